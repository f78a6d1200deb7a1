package ingest_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/internal/testenv/otlptest"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/telemetry"
)

// recorder is an Applier that records events and answers with err.
type recorder struct {
	applied []fleet.Event
	err     error
}

func (r *recorder) Apply(_ context.Context, ev fleet.Event) (fleet.Applied, error) {
	if r.err != nil {
		return fleet.Applied{}, r.err
	}
	r.applied = append(r.applied, ev)
	return fleet.Applied{Outcome: fleet.OutcomeCreated, Writes: 1}, nil
}

// now is the ingest clock of these tests.
var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func upsertOf(cluster string) fleet.Event {
	return fleet.Event{
		SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: cluster,
		Version: fleet.Version{Term: now.UnixMilli(), Seq: 1}, ObservedAt: fleet.MicrosOf(now),
		Publisher: fleet.Publisher{ID: "p"}, Namespace: "default", Name: "sgs",
		Fleet: fleet.State{UID: "u"},
	}
}

func encoded(t *testing.T, ev fleet.Event) []byte {
	t.Helper()
	b, err := fleet.EncodeEvent(ev)
	require.NoError(t, err)
	return b
}

func validEvent(t *testing.T) []byte {
	t.Helper()
	return encoded(t, upsertOf("pc"))
}

// pcTopic is cluster pc's topic, as a CloudEvent's source.
const pcTopic = "//pubsub.googleapis.com/projects/p/topics/fleet-events-pc"

func cloudEvent(t *testing.T, data any) event.Event {
	t.Helper()
	return cloudEventFrom(t, pcTopic, data)
}

func cloudEventFrom(t *testing.T, source string, data any) event.Event {
	t.Helper()
	e := event.New()
	e.SetID("ce-1")
	e.SetType("google.cloud.pubsub.topic.v1.messagePublished")
	e.SetSource(source)
	require.NoError(t, e.SetData("application/json", data))
	return e
}

func config() ingest.Config {
	return ingest.Config{TombstoneRetention: 24 * time.Hour, EventTimeout: time.Second, TopicPrefix: ingest.DefaultTopicPrefix, MaxClockSkew: fleet.DefaultMaxClockSkew}
}

func pubsubData(data []byte) ingest.MessagePublishedData {
	return ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: data, MessageID: "m-42"}}
}

func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

func TestHandle(t *testing.T) {
	forged := upsertOf("ps5")
	future := upsertOf("pc")
	future.Version.Term = math.MaxInt64
	year9000 := upsertOf("pc")
	year9000.ObservedAt = fleet.MicrosOf(time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC))
	tests := []struct {
		name         string
		source       string
		data         any
		storeErr     error
		wantErr      bool
		wantApplied  int
		wantSeverity string
		wantInLog    string
	}{
		{name: "another cluster's event on pc's topic is dropped", data: pubsubData(encoded(t, forged)), wantSeverity: "ERROR", wantInLog: `"reasonCode":"foreign-cluster"`},
		{name: "a term from the future is dropped", data: pubsubData(encoded(t, future)), wantSeverity: "ERROR", wantInLog: `"reasonCode":"clock-skew"`},
		{name: "a heartbeat from year 9000 is dropped", data: pubsubData(encoded(t, year9000)), wantSeverity: "ERROR", wantInLog: "observedAt"},
		{name: "a topic without the prefix is no cluster's", source: "//pubsub.googleapis.com/projects/p/topics/fleet-events", data: pubsubData(validEvent(t)), wantSeverity: "ERROR", wantInLog: `"reasonCode":"unbound-topic"`},
		{name: "a source that is no topic is no cluster's", source: "//storage.googleapis.com/projects/_/buckets/b", data: pubsubData(validEvent(t)), wantSeverity: "ERROR", wantInLog: "not a Pub/Sub topic"},
		{name: "valid event is applied", data: pubsubData(validEvent(t)), wantApplied: 1, wantSeverity: "INFO", wantInLog: `"outcome":"created"`},
		{name: "not JSON is acked", data: pubsubData([]byte("garbage")), wantSeverity: "ERROR", wantInLog: "decode event"},
		{name: "invalid event is acked", data: pubsubData(bytes.Replace(validEvent(t), []byte(`"cluster":"pc"`), []byte(`"cluster":"P C"`), 1)), wantSeverity: "ERROR", wantInLog: "cluster"},
		{name: "not a Pub/Sub message is acked", data: "just a string", wantSeverity: "ERROR", wantInLog: "not a Pub/Sub message"},
		{name: "transient store error is retried", data: pubsubData(validEvent(t)), storeErr: errors.New("rpc error: code = Unavailable"), wantErr: true, wantSeverity: "WARNING", wantInLog: "Unavailable"},
		{name: "invalid store input is acked", data: pubsubData(validEvent(t)), storeErr: fleet.ErrInvalid, wantSeverity: "ERROR", wantInLog: "invalid"},
		{name: "a store refusal is acked", data: pubsubData(validEvent(t)), storeErr: fmt.Errorf("%w: decode fleets/x: bad", fleet.ErrPermanent), wantSeverity: "ERROR", wantInLog: `"reasonCode":"store-refused"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			store := &recorder{err: tt.storeErr}
			h := ingest.NewHandler(store, logging.New(&buf, logging.LevelWarning-8), config(), func() time.Time { return now })
			source := cmp.Or(tt.source, pcTopic)
			err := h.Handle(t.Context(), cloudEventFrom(t, source, tt.data))
			if tt.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			assert.Len(t, store.applied, tt.wantApplied)
			lines := logLines(t, &buf)
			require.Len(t, lines, 1, "exactly one log line per message")
			assert.Equal(t, tt.wantSeverity, lines[0]["severity"])
			assert.NotEmpty(t, lines[0][logging.KeyMessageID], "the log names the message")
			assert.Contains(t, buf.String(), tt.wantInLog)
			if tt.wantSeverity == "ERROR" {
				assert.EqualValues(t, 1, lines[0][logging.KeyDropped], "the drop is counted")
			}
		})
	}
}

func TestClusterOfSource(t *testing.T) {
	topic, cluster, err := ingest.ClusterOfSource("//pubsub.googleapis.com/projects/p/topics/fleet-events-eu-west", "fleet-events-")
	require.NoError(t, err)
	assert.Equal(t, "projects/p/topics/fleet-events-eu-west", topic)
	assert.Equal(t, "eu-west", cluster)
	for _, bad := range []string{
		"", "//pubsub.googleapis.com/projects/p/topics/", "//pubsub.googleapis.com/projects/p/topics/other-eu",
		"//pubsub.googleapis.com/projects/p/topics/fleet-events-EU", "//pubsub.googleapis.com/projects/p/subscriptions/fleet-events-eu",
		"https://pubsub.googleapis.com/projects/p/topics/fleet-events-eu",
	} {
		_, _, err := ingest.ClusterOfSource(bad, "fleet-events-")
		assert.Error(t, err, bad)
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := ingest.ConfigFromEnv(env(nil))
	require.NoError(t, err)
	assert.Equal(t, 24*time.Hour, c.TombstoneRetention)
	assert.Equal(t, 50*time.Second, c.EventTimeout)
	assert.Equal(t, "fleet-events-", c.TopicPrefix)
	assert.Equal(t, 10*time.Minute, c.MaxClockSkew)
	assert.Equal(t, 240, c.FullReconcileEvery)

	c, err = ingest.ConfigFromEnv(env(map[string]string{"TOMBSTONE_RETENTION": "72h", "GOOGLE_CLOUD_PROJECT": "p", "LOG_LEVEL": "debug", "FULL_RECONCILE_EVERY": "1"}))
	require.NoError(t, err)
	assert.Equal(t, 72*time.Hour, c.TombstoneRetention)
	assert.Equal(t, 1, c.FullReconcileEvery)
	assert.Equal(t, slog.LevelDebug, c.LogLevel)

	bad := map[string]string{"TOMBSTONE_RETENTION": "forever", "EVENT_TIMEOUT": "-1s", "LOG_LEVEL": "loud", "MAX_CLOCK_SKEW": "0s", "FULL_RECONCILE_EVERY": "0", "MAX_CLUSTER_IN_FLIGHT": "none"}
	for k, v := range bad {
		_, err := ingest.ConfigFromEnv(env(map[string]string{k: v}))
		assert.ErrorContains(t, err, k)
	}
	_, err = ingest.ConfigFromEnv(env(bad))
	for k := range bad {
		assert.ErrorContains(t, err, k+"=", "every error at once, not the first")
	}
}

// outcomes is an Applier that answers each event with the next outcome.
type outcomes []fleet.Outcome

func (o *outcomes) Apply(context.Context, fleet.Event) (fleet.Applied, error) {
	out := (*o)[0]
	*o = (*o)[1:]
	w := 0
	if out.Writes() {
		w = 1
	}
	return fleet.Applied{Outcome: out, Writes: w}, nil
}

// TestUnchangedEventsAreCountedNotLogged: at INFO, an event that changed
// something has its line; duplicates and stale events have DEBUG lines,
// and one summary line a minute counts them.
func TestUnchangedEventsAreCountedNotLogged(t *testing.T) {
	var logs bytes.Buffer
	clock := now
	store := outcomes{fleet.OutcomeCreated, fleet.OutcomeDuplicate, fleet.OutcomeStale, fleet.OutcomeDuplicate, fleet.OutcomeUpdated, fleet.OutcomeDuplicate}
	h := ingest.NewHandler(&store, logging.New(&logs, slog.LevelInfo),
		ingest.Config{TopicPrefix: ingest.DefaultTopicPrefix, MaxClockSkew: time.Hour, TombstoneRetention: time.Hour, EventTimeout: time.Second},
		func() time.Time { return clock })
	for i := range 6 {
		if i == 5 {
			clock = clock.Add(ingest.SummaryInterval)
		}
		require.NoError(t, h.Handle(t.Context(), cloudEvent(t, map[string]any{"message": map[string]any{"data": validEvent(t), "messageId": fmt.Sprint(i)}})))
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		lines = append(lines, m)
	}
	require.Len(t, lines, 3, logs.String())
	assert.Equal(t, "created", lines[0]["outcome"])
	assert.Equal(t, "updated", lines[1]["outcome"])
	assert.Equal(t, "fleet events that changed nothing", lines[2]["message"])
	assert.EqualValues(t, 3, lines[2]["duplicates"])
	assert.EqualValues(t, 1, lines[2]["stale"])
}

// TestWhatAPublisherDidNotFitIsStoredDegraded: an upsert that a publisher
// did not fit to the store's limits — an autoscaler's last scale after
// year 9999 or ahead of the ingest clock, labels past MaxStateBytes — is
// stored without those parts, marked degraded and logged at ERROR, not
// dropped (the fleet stays visible) and not stored as it came (no answer
// could hold it).
func TestWhatAPublisherDidNotFitIsStoredDegraded(t *testing.T) {
	// Written as a publisher of another build would: fleet.EncodeEvent
	// refuses these states, so the JSON is edited after it.
	withScaleTime := func(at fleet.Micros) []byte {
		ev := upsertOf("pc")
		ev.Fleet.Autoscalers = []fleet.Autoscaler{{Name: "buffer", Policy: fleet.AutoscalerPolicy{Type: "Buffer"}, Status: fleet.AutoscalerStatus{LastScaleTime: 1}}}
		return bytes.Replace(encoded(t, ev), []byte(`"lastScaleTime":1`), fmt.Appendf(nil, `"lastScaleTime":%d`, at), 1)
	}
	labelled := upsertOf("pc")
	labelled.Fleet.Labels = map[string]string{}
	for i := range 100 {
		labelled.Fleet.Labels[fmt.Sprintf("example.com/label-%03d", i)] = strings.Repeat("v", 63)
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"year 10000":         {withScaleTime(fleet.MaxMicros + 1), "lastScaleTime"},
		"int64's largest":    {withScaleTime(math.MaxInt64), "lastScaleTime"},
		"an hour ahead":      {withScaleTime(fleet.MicrosOf(now.Add(time.Hour))), "ahead of the ingest clock"},
		"labels past bounds": {encodedUnchecked(t, labelled), fmt.Sprintf("exceeds %d", fleet.MaxStateBytes)},
	} {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			var buf bytes.Buffer
			h := ingest.NewHandler(rec, logging.New(&buf, slog.LevelInfo), config(), func() time.Time { return now })
			require.NoError(t, h.Handle(t.Context(), cloudEvent(t, pubsubData(tc.data))))
			require.Len(t, rec.applied, 1, "stored, not dropped")
			st := rec.applied[0].Fleet
			require.NoError(t, rec.applied[0].Validate())
			assert.Contains(t, st.Degraded, "at ingest, dropped ")
			assert.Contains(t, st.Degraded, tc.want)
			assert.Empty(t, st.Autoscalers)
			b, err := json.Marshal(st)
			require.NoError(t, err)
			assert.LessOrEqual(t, len(b), fleet.MaxStateBytes)
			var degraded []map[string]any
			for _, l := range logLines(t, &buf) {
				if l["severity"] == "ERROR" && strings.Contains(l["message"].(string), "stored degraded") {
					degraded = append(degraded, l)
				}
			}
			require.Len(t, degraded, 1, buf.String())
			assert.Equal(t, "default,sgs", strings.TrimPrefix(degraded[0]["fleet"].(string), "pc,"))
		})
	}
}

// encodedUnchecked is the JSON of ev as a publisher that does not fit its
// states would send it.
func encodedUnchecked(t *testing.T, ev fleet.Event) []byte {
	t.Helper()
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	return b
}

// TestAStoreThatIsNotReadyIsRetriedAndBlamedOnTheOperator: when the store
// cannot run a query for want of an index, the event is redelivered (an
// error, not an acknowledgement) and the ERROR line says what to do.
func TestAStoreThatIsNotReadyIsRetriedAndBlamedOnTheOperator(t *testing.T) {
	rec := &recorder{err: fmt.Errorf("reconcile: %w", fleet.ErrStoreNotReady)}
	var buf bytes.Buffer
	h := ingest.NewHandler(rec, logging.New(&buf, slog.LevelInfo), config(), func() time.Time { return now })
	err := h.Handle(t.Context(), cloudEvent(t, pubsubData(validEvent(t))))
	require.ErrorIs(t, err, fleet.ErrStoreNotReady, "redelivered")
	lines := logLines(t, &buf)
	require.Len(t, lines, 1)
	assert.Equal(t, "ERROR", lines[0]["severity"])
	assert.Contains(t, lines[0]["message"], "create it (terraform apply)")
	assert.Nil(t, lines[0]["reasonCode"], "not a drop")
}

// blocking is an Applier that holds every event until released.
type blocking struct {
	started chan fleet.Event
	release chan struct{}
}

func (b *blocking) Apply(_ context.Context, ev fleet.Event) (fleet.Applied, error) {
	b.started <- ev
	<-b.release
	return fleet.Applied{Outcome: fleet.OutcomeCreated, Writes: 1}, nil
}

// TestAClusterGetsItsShareOfAnInstance: past MaxClusterInFlight events of
// one cluster in flight, another of its events is asked for again
// (ErrOverShare: a redelivery, which shrinks its subscription's push
// window), while another cluster's event and the cluster's own snapshot
// are taken.
func TestAClusterGetsItsShareOfAnInstance(t *testing.T) {
	b := &blocking{started: make(chan fleet.Event, 10), release: make(chan struct{})}
	cfg := config()
	cfg.MaxClusterInFlight = 1
	var buf bytes.Buffer
	h := ingest.NewHandler(b, logging.New(&buf, slog.LevelInfo), cfg, func() time.Time { return now })
	done := make(chan error, 10)
	handle := func(source string, ev fleet.Event) {
		go func() { done <- h.Handle(context.Background(), cloudEventFrom(t, source, pubsubData(encoded(t, ev)))) }()
	}
	handle(pcTopic, upsertOf("pc"))
	<-b.started // pc has its one event in flight

	second := upsertOf("pc")
	second.Name = "other"
	err := h.Handle(t.Context(), cloudEventFrom(t, pcTopic, pubsubData(encoded(t, second))))
	require.ErrorIs(t, err, ingest.ErrOverShare, "asked for again")
	assert.Contains(t, buf.String(), `"byCluster":{"pc":1}`, "and said, with the count")

	handle("//pubsub.googleapis.com/projects/p/topics/fleet-events-ps5", upsertOf("ps5"))
	assert.Equal(t, "ps5", (<-b.started).Cluster, "another cluster is taken")
	snap := upsertOf("pc")
	snap.Kind, snap.Namespace, snap.Name, snap.Fleet = fleet.KindSnapshot, "", "", fleet.State{}
	snap.Snapshot = fleet.Snapshot{Parts: 1, Fleets: []fleet.SnapshotEntry{}}
	handle(pcTopic, snap)
	assert.Equal(t, fleet.KindSnapshot, (<-b.started).Kind, "and pc's heartbeat, in its own places")

	close(b.release)
	for range 3 {
		require.NoError(t, <-done)
	}
	require.NoError(t, h.Handle(t.Context(), cloudEventFrom(t, pcTopic, pubsubData(encoded(t, second)))), "its place is free again")
}

// TestServeHTTPTurnsAPushIntoItsEvent: a raw Pub/Sub push body becomes the
// messagePublished event of the topic the path names, and is applied; a
// binary CloudEvent is taken as it is; what is no push is dropped and
// acknowledged; an error asks for the message again.
func TestServeHTTPTurnsAPushIntoItsEvent(t *testing.T) {
	rec := &recorder{}
	var buf bytes.Buffer
	h := ingest.NewHandler(rec, logging.New(&buf, slog.LevelInfo), config(), func() time.Time { return now })
	post := func(path string, header map[string]string, body []byte) int {
		r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		for k, v := range header {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	push, err := json.Marshal(pubsubData(validEvent(t)))
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, post("/projects/p/topics/fleet-events-pc", map[string]string{"Content-Type": "application/json"}, push))
	require.Len(t, rec.applied, 1)
	assert.Equal(t, "pc", rec.applied[0].Cluster)

	assert.Equal(t, http.StatusOK, post("/projects/p/topics/fleet-events-ps5", map[string]string{"Content-Type": "application/json"}, push))
	assert.Len(t, rec.applied, 1, "through another cluster's topic: dropped")
	assert.Contains(t, buf.String(), `"reasonCode":"foreign-cluster"`)

	ce := map[string]string{"Content-Type": "application/json", "ce-specversion": "1.0", "ce-id": "ce-7",
		"ce-type": ingest.MessagePublishedType, "ce-source": pcTopic}
	assert.Equal(t, http.StatusOK, post("/", ce, push))
	assert.Len(t, rec.applied, 2, "a binary CloudEvent, its source in its header")

	assert.Equal(t, http.StatusOK, post("/projects/p/topics/fleet-events-pc", map[string]string{"Content-Type": "application/json"}, []byte("not json")))
	assert.Contains(t, buf.String(), `"reasonCode":"not-pubsub"`)

	rec.err = errors.New("firestore unavailable")
	assert.Equal(t, http.StatusInternalServerError, post("/projects/p/topics/fleet-events-pc", map[string]string{"Content-Type": "application/json"}, push))
	r := httptest.NewRequest(http.MethodGet, "/projects/p/topics/fleet-events-pc", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)
}

// TestEachMessageIsTracedAsItsPublishersChild: the message's
// googclient_traceparent (as the Pub/Sub client writes it) is the parent of
// the ingest span; the log line of the event names that trace and the
// ingest span, sampled or not, and the code that wrote it.
func TestEachMessageIsTracedAsItsPublishersChild(t *testing.T) {
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	spans := otlptest.Capture(t, telemetry.Config{Service: "fleetcast-ingest", SampleRatio: 0})
	for _, sampled := range []bool{true, false} {
		t.Run(fmt.Sprintf("sampled=%v", sampled), func(t *testing.T) {
			spans.Reset()
			var buf bytes.Buffer
			h := ingest.NewHandler(&recorder{}, logging.New(&buf, slog.LevelInfo, logging.WithProject("studio")), config(), func() time.Time { return now })
			flags := map[bool]string{true: "01", false: "00"}[sampled]
			data := pubsubData(validEvent(t))
			data.Message.Attributes = map[string]string{"googclient_traceparent": "00-" + traceID + "-" + parentID + "-" + flags}
			require.NoError(t, h.Handle(t.Context(), cloudEvent(t, data)))

			lines := logLines(t, &buf)
			require.Len(t, lines, 1)
			assert.Equal(t, "projects/studio/traces/"+traceID, lines[0][logging.FieldTrace])
			assert.Equal(t, sampled, lines[0][logging.FieldTraceSampled])
			spanID, _ := lines[0][logging.FieldSpanID].(string)
			assert.Len(t, spanID, 16)
			assert.NotEqual(t, parentID, spanID, "the line is the ingest span's, not the publisher's")
			loc, _ := lines[0][logging.FieldSourceLocation].(map[string]any)
			assert.True(t, strings.HasSuffix(fmt.Sprint(loc["file"]), "functions/ingest/ingest.go"), "source location %v", loc)

			if !sampled {
				assert.Empty(t, spans.GetSpans(), "an unsampled trace exports nothing")
				return
			}
			got := spans.GetSpans().Snapshots()
			require.Len(t, got, 1)
			s := got[0]
			assert.Equal(t, ingest.SpanName, s.Name())
			assert.Equal(t, trace.SpanKindConsumer, s.SpanKind())
			assert.Equal(t, traceID, s.SpanContext().TraceID().String())
			assert.Equal(t, parentID, s.Parent().SpanID().String())
			assert.Equal(t, spanID, s.SpanContext().SpanID().String())
			assert.Contains(t, s.Attributes(), attribute.String("fleetcast.outcome", "created"))
			assert.Contains(t, s.Attributes(), attribute.String("fleetcast.cluster", "pc"))
		})
	}
}

// TestADropMarksItsSpan: a dropped message's span says why, as an error.
func TestADropMarksItsSpan(t *testing.T) {
	spans := otlptest.Capture(t, telemetry.Config{Service: "fleetcast-ingest", SampleRatio: 1})
	h := ingest.NewHandler(&recorder{}, logging.New(io.Discard, slog.LevelInfo), config(), func() time.Time { return now })
	require.NoError(t, h.Handle(t.Context(), cloudEvent(t, pubsubData(encoded(t, upsertOf("ps5"))))))
	got := spans.GetSpans().Snapshots()
	require.Len(t, got, 1)
	assert.Contains(t, got[0].Attributes(), attribute.String("fleetcast.reason_code", ingest.DropForeignCluster))
	assert.Equal(t, codes.Error, got[0].Status().Code)
	assert.False(t, got[0].Parent().IsValid(), "no trace context in the message: a trace of its own")
}

// deaf is an Applier that ignores its context: it returns only when
// released, however long past its deadline.
type deaf struct{ release chan struct{} }

func (d deaf) Apply(context.Context, fleet.Event) (fleet.Applied, error) {
	<-d.release
	return fleet.Applied{Outcome: fleet.OutcomeCreated, Writes: 1}, nil
}

// TestAPushIsAnsweredWithinItsDeadlineWhateverTheStoreDoes: a store call
// that never returns (one that ignores its context) does not hold the
// push: it is answered 500 (asking for redelivery) once EVENT_TIMEOUT has
// passed, and said; the handling goes on holding its cluster's share, so
// the cluster's next event is asked for again at once, and the share is
// free once the store returns.
func TestAPushIsAnsweredWithinItsDeadlineWhateverTheStoreDoes(t *testing.T) {
	store := deaf{release: make(chan struct{})}
	cfg := config()
	cfg.EventTimeout, cfg.MaxClusterInFlight = 50*time.Millisecond, 1
	var buf syncbuf.Buffer
	h := ingest.NewHandler(store, logging.New(&buf, slog.LevelInfo), cfg, func() time.Time { return now })
	push, err := json.Marshal(pubsubData(validEvent(t)))
	require.NoError(t, err)
	post := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/projects/p/topics/fleet-events-pc", bytes.NewReader(push)))
		}()
		select {
		case <-answered:
		case <-time.After(time.Minute): // a hang guard, not a measurement
			t.Fatal("the push was not answered")
		}
		return w
	}
	w := post()
	assert.Equal(t, http.StatusInternalServerError, w.Code)
	assert.Contains(t, w.Body.String(), "not applied within EVENT_TIMEOUT (50ms)")
	assert.Eventually(t, func() bool { return strings.Contains(buf.String(), `"overdue":1`) }, time.Minute, 10*time.Millisecond,
		"the overdue answer is logged: %s", buf.String())

	w = post()
	assert.Equal(t, http.StatusInternalServerError, w.Code)
	assert.Contains(t, w.Body.String(), ingest.ErrOverShare.Error(), "the stuck handling keeps its cluster's share")

	close(store.release)
	assert.Eventually(t, func() bool { return post().Code == http.StatusOK }, time.Minute, 10*time.Millisecond,
		"once the store returns, the share is free")
}

// announcing is an Applier whose every event leaves one document to
// announce, with the outcome it is given, and an Announcer that records
// what it is asked to announce and answers with err.
type announcing struct {
	outcome   fleet.Outcome
	announced [][]*fleet.Document
	err       error
}

func (a *announcing) Apply(_ context.Context, ev fleet.Event) (fleet.Applied, error) {
	d, _ := fleet.ApplyFleetEvent(nil, ev, now, time.Hour)
	res := fleet.Applied{Outcome: a.outcome, Announce: []*fleet.Document{d}}
	if a.outcome.Writes() {
		res.Writes = 1
	}
	return res, nil
}

func (a *announcing) Announce(_ context.Context, docs []*fleet.Document) error {
	a.announced = append(a.announced, docs)
	return a.err
}

// TestWhatAnEventLeftIsAnnouncedBeforeItIsAcknowledged: with a change
// feed, the documents an event left are announced before the push is
// answered, a duplicate's as a write's; an announcement that fails asks
// for the event again (an error, logged as a warning), so that its
// redelivery announces it.
func TestWhatAnEventLeftIsAnnouncedBeforeItIsAcknowledged(t *testing.T) {
	for _, o := range []fleet.Outcome{fleet.OutcomeCreated, fleet.OutcomeDuplicate} {
		a := &announcing{outcome: o}
		var buf bytes.Buffer
		h := ingest.NewHandler(a, logging.New(&buf, slog.LevelInfo), config(), func() time.Time { return now }).WithAnnouncer(a)
		require.NoError(t, h.Handle(t.Context(), cloudEvent(t, pubsubData(validEvent(t)))), o)
		require.Len(t, a.announced, 1, o)
		require.Len(t, a.announced[0], 1, o)
		assert.Equal(t, "pc/default/sgs", a.announced[0][0].Key().String(), o)
	}

	a := &announcing{outcome: fleet.OutcomeUpdated, err: errors.New("pubsub unavailable")}
	var buf bytes.Buffer
	h := ingest.NewHandler(a, logging.New(&buf, slog.LevelInfo), config(), func() time.Time { return now }).WithAnnouncer(a)
	err := h.Handle(t.Context(), cloudEvent(t, pubsubData(validEvent(t))))
	require.ErrorContains(t, err, "pubsub unavailable", "asked for again")
	lines := logLines(t, &buf)
	require.Len(t, lines, 1)
	assert.Equal(t, "WARNING", lines[0]["severity"])
	assert.Contains(t, lines[0]["message"], "not announced")
	assert.Equal(t, "updated", lines[0]["outcome"])
}

// TestChangeTopicIsAPubSubTopicID: CHANGE_TOPIC is checked by Pub/Sub's
// rule for a topic ID when the function starts.
func TestChangeTopicIsAPubSubTopicID(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "CHANGE_TOPIC" {
				return v
			}
			return ""
		}
	}
	c, err := ingest.ConfigFromEnv(env("fleet-changes"))
	require.NoError(t, err)
	assert.Equal(t, "fleet-changes", c.ChangeTopic)
	for _, bad := range []string{"x", "goog-changes", "1changes", "projects/p/topics/fleet-changes"} {
		_, err := ingest.ConfigFromEnv(env(bad))
		assert.ErrorContains(t, err, "CHANGE_TOPIC", bad)
	}
}
