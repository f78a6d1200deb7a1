package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/logging"
)

// recorder is an Applier that records events and answers with err.
type recorder struct {
	applied []fleet.Event
	err     error
}

func (r *recorder) Apply(_ context.Context, ev fleet.Event) (firestoredb.Result, error) {
	if r.err != nil {
		return firestoredb.Result{}, r.err
	}
	r.applied = append(r.applied, ev)
	return firestoredb.Result{Outcome: fleet.OutcomeCreated, Writes: 1}, nil
}

func validEvent(t *testing.T) []byte {
	t.Helper()
	b, err := fleet.EncodeEvent(fleet.Event{
		SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "pc",
		Version: fleet.Version{Term: 1, Seq: 1}, ObservedAt: fleet.MicrosOf(time.Now()),
		Publisher: fleet.Publisher{ID: "p"}, Namespace: "default", Name: "sgs",
		Fleet: fleet.State{UID: "u"},
	})
	require.NoError(t, err)
	return b
}

func cloudEvent(t *testing.T, data any) event.Event {
	t.Helper()
	e := event.New()
	e.SetID("ce-1")
	e.SetType("google.cloud.pubsub.topic.v1.messagePublished")
	e.SetSource("//pubsub.googleapis.com/projects/p/topics/fleet-events")
	require.NoError(t, e.SetData("application/json", data))
	return e
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
	tests := []struct {
		name         string
		data         any
		storeErr     error
		wantErr      bool
		wantApplied  int
		wantSeverity string
		wantInLog    string
	}{
		{name: "valid event is applied", data: pubsubData(validEvent(t)), wantApplied: 1, wantSeverity: "INFO", wantInLog: `"outcome":"created"`},
		{name: "not JSON is acked", data: pubsubData([]byte("garbage")), wantSeverity: "ERROR", wantInLog: "decode event"},
		{name: "invalid event is acked", data: pubsubData(bytes.Replace(validEvent(t), []byte(`"cluster":"pc"`), []byte(`"cluster":"P C"`), 1)), wantSeverity: "ERROR", wantInLog: "cluster"},
		{name: "not a Pub/Sub message is acked", data: "just a string", wantSeverity: "ERROR", wantInLog: "not a Pub/Sub message"},
		{name: "transient store error is retried", data: pubsubData(validEvent(t)), storeErr: errors.New("rpc error: code = Unavailable"), wantErr: true, wantSeverity: "WARNING", wantInLog: "Unavailable"},
		{name: "permanent store error is acked", data: pubsubData(validEvent(t)), storeErr: fleet.ErrInvalid, wantSeverity: "ERROR", wantInLog: "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			store := &recorder{err: tt.storeErr}
			h := ingest.NewHandler(store, logging.New(&buf, logging.LevelWarning-8), time.Second)
			err := h.Handle(t.Context(), cloudEvent(t, tt.data))
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
		})
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := ingest.ConfigFromEnv(env(nil))
	require.NoError(t, err)
	assert.Equal(t, 24*time.Hour, c.TombstoneRetention)
	assert.Equal(t, 50*time.Second, c.EventTimeout)

	c, err = ingest.ConfigFromEnv(env(map[string]string{"TOMBSTONE_RETENTION": "72h", "GOOGLE_CLOUD_PROJECT": "p", "LOG_LEVEL": "debug"}))
	require.NoError(t, err)
	assert.Equal(t, 72*time.Hour, c.TombstoneRetention)
	assert.Equal(t, slog.LevelDebug, c.LogLevel)

	for k, v := range map[string]string{"TOMBSTONE_RETENTION": "forever", "EVENT_TIMEOUT": "-1s", "LOG_LEVEL": "loud"} {
		_, err := ingest.ConfigFromEnv(env(map[string]string{k: v}))
		assert.ErrorContains(t, err, k)
	}
}
