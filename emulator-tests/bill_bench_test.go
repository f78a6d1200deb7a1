package emulatortests

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetfeed"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/functions/query"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/build/bill"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/internal/testenv/logquery"
	"github.com/fleetcast/fleetcast/internal/testenv/otlptest"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/internal/testenv/watchtest"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/publisher"
	"github.com/fleetcast/fleetcast/pubsubtopic"
	"github.com/fleetcast/fleetcast/telemetry"
)

var billCompress = flag.Int("bill.compress", 1,
	"BenchmarkBill: divide the scenario's clock (its window, its change rates and every interval of both systems) by this")

// messageIDBytes is the size of a Pub/Sub message ID in production (a
// decimal number of about 16 digits), part of a message's billed volume.
const messageIDBytes = 16

// billedVolume is a message's Pub/Sub volume as Pub/Sub bills one
// message per request (every publish of an ordered fleet event, every
// push): its data, attributes, the 20-byte timestamp and the message ID,
// at least bill.Prices.PubSubMinBytes.
func billedVolume(m *pubsub.Message) float64 {
	v := len(m.Data) + 20 + messageIDBytes
	for k, a := range m.Attributes {
		v += len(k) + len(a)
	}
	return max(float64(v), bill.Prices.PubSubMinBytes)
}

// countingAnnouncer announces on the change feed as the ingest function
// does, counting the messages and their billed volume.
type countingAnnouncer struct {
	*fleetfeed.Announcer
	msgs, bytes atomic.Int64
}

func (a *countingAnnouncer) Announce(ctx context.Context, docs []*fleet.Document) error {
	for _, d := range docs {
		m, err := fleetfeed.Message(d)
		if err != nil {
			return err
		}
		a.msgs.Add(1)
		a.bytes.Add(int64(billedVolume(m)))
	}
	return a.Announcer.Announce(ctx, docs)
}

// ingestedEventLines is the filter of the Terraform module's exclusion
// ingest_ingested_events, for the function's own lines (terraform's
// monitoring test holds the module to it): the "fleet event ingested"
// lines below WARNING, which Cloud Logging does not store by default.
const ingestedEventLines = `jsonPayload.message="fleet event ingested" AND severity<WARNING`

// excludingWriter counts the bytes of the log lines written to it, and of
// those the module's exclusion keeps out of storage (each Write is one
// line, as slog writes them).
type excludingWriter struct {
	filter        *logquery.Filter
	n, excludedAt atomic.Int64
}

func newExcludingWriter(tb testing.TB) *excludingWriter {
	f, err := logquery.Parse(ingestedEventLines)
	require.NoError(tb, err)
	return &excludingWriter{filter: f}
}

func (w *excludingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	if w.filter.Match(logquery.FromStructuredLine(p, nil, "")) {
		w.excludedAt.Add(int64(len(p)))
	}
	return len(p), nil
}

// countingWriter counts the bytes written to it.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// Classes of fleetcast messages, by what the ingest made of them.
const (
	msgHot     = iota // an upsert of a hot fleet
	msgChange         // an upsert of another fleet that changed it
	msgRefresh        // an upsert of another fleet that changed nothing
	msgPart           // a snapshot part
	msgClasses
)

// billedIngest is the ingest function as deployed, in this process: the
// publisher's Transport publishes each event (it returns at once, as
// Pub/Sub acknowledges a publish), and pushers deliver it to the
// function's Handler as the CloudEvent Eventarc would, one fleet's events
// in order (an ordered subscription), ingestConcurrency at once (the
// deployed ingest_concurrency), again after a failure (a redelivery). It
// records each push's span, for Cloud Run's bill (bill.InstanceTime). Its
// Applier classifies each message and counts its Pub/Sub volume.
type billedIngest struct {
	handler *ingest.Handler
	// spans are every push's; cold those of the fleets not hot.
	spans, cold bill.Spans
	source      string
	ids         atomic.Int64
	shards      []chan sent
	pushers     sync.WaitGroup
	// redelivered counts the pushes that failed and were retried;
	// lastErr is the last one's error.
	redelivered atomic.Int64
	lastErr     atomic.Value

	store *firestoredb.Store
	hot   map[string]bool
	msgs  [msgClasses]atomic.Int64
	bytes [msgClasses]atomic.Int64
}

// The Terraform module's default ingest_concurrency and query_concurrency.
const (
	ingestConcurrency = 8
	queryConcurrency  = 1000
)

var (
	_ publisher.Transport = (*billedIngest)(nil)
	_ ingest.Applier      = (*billedIngest)(nil)
)

// start starts the pushers; they stop when ctx ends.
func (t *billedIngest) start(ctx context.Context, tb testing.TB) {
	for range ingestConcurrency {
		ch := make(chan sent, 1<<16)
		t.shards = append(t.shards, ch)
		t.pushers.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-ch:
					for err := t.push(ctx, tb, m); err != nil && ctx.Err() == nil; err = t.push(ctx, tb, m) {
						t.redelivered.Add(1)
						t.lastErr.Store(err.Error())
						letTimePass(100 * time.Millisecond) // Pub/Sub's minimum backoff
					}
				}
			}
		})
	}
}

// Send queues the message the publisher's transport would publish, its
// trace context included.
func (t *billedIngest) Send(ctx context.Context, ev fleet.Event) error {
	msg, err := pubsubtopic.TracedMessage(ctx, ev)
	if err != nil {
		return fmt.Errorf("encode %s: %w", ev.Key(), err)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(ev.Key().DocID()))
	t.shards[int(h.Sum32())%len(t.shards)] <- sent{ev, msg}
	return nil
}

// sent is an event and the message it was sent as.
type sent struct {
	ev  fleet.Event
	msg *pubsub.Message
}

// push delivers one message to the function, as one push request.
func (t *billedIngest) push(ctx context.Context, tb testing.TB, m sent) error {
	ev, msg := m.ev, m.msg
	id := strconv.FormatInt(t.ids.Add(1), 10)
	e := event.New()
	e.SetID(id)
	e.SetType("google.cloud.pubsub.topic.v1.messagePublished")
	e.SetSource(t.source)
	if err := e.SetData("application/json", ingest.MessagePublishedData{Message: ingest.PubsubMessage{
		Data: msg.Data, Attributes: msg.Attributes, MessageID: id, PublishTime: time.Now(), OrderingKey: msg.OrderingKey,
	}}); err != nil {
		tb.Errorf("CloudEvent of %s: %v", ev.Key(), err)
		return nil
	}
	begin := time.Now()
	defer func() {
		end := time.Now()
		t.spans.Add(begin, end)
		if ev.Kind == fleet.KindSnapshot || !t.hot[ev.Name] {
			t.cold.Add(begin, end)
		}
	}()
	return t.handler.Handle(ctx, e)
}

func (t *billedIngest) Apply(ctx context.Context, ev fleet.Event) (fleet.Applied, error) {
	res, err := t.store.Apply(ctx, ev)
	if err != nil {
		return res, err
	}
	class := msgPart
	switch {
	case ev.Kind == fleet.KindSnapshot:
	case t.hot[ev.Name]:
		class = msgHot
	case res.Outcome.Writes():
		class = msgChange
	default:
		class = msgRefresh
	}
	// As it was published: its trace context is the same size in any
	// trace (ctx holds the ingest span).
	msg, err := pubsubtopic.TracedMessage(ctx, ev)
	if err != nil {
		return res, err
	}
	t.msgs[class].Add(1)
	t.bytes[class].Add(int64(billedVolume(msg)))
	return res, nil
}

// ticking calls f every period until ctx ends, from its own goroutine.
func ticking(ctx context.Context, wg *sync.WaitGroup, period time.Duration, f func()) {
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				f()
			}
		}
	})
}

// BenchmarkBill measures what fleetcast and the per-event broadcaster
// cost per unit of work, for the bill of the reference deployment
// (bill.Reference) in BENCHMARKS.md. It runs one cluster's share of that
// deployment for one refresh interval, both systems side by side from
// the same API server:
//
//   - the cluster's 1 000 fleets, two of them hot (20 changes per second
//     each), and the cluster's share of the other changes spread at
//     random over the others (6 per second);
//   - fleetcast: the real publisher, the ingest function's handler fed
//     the CloudEvents Eventarc would deliver (its invocations billed by
//     bill.InstanceTime as Cloud Run bills them), the query function with the
//     reference's matchmakers on its stream and its queries per second;
//   - the baseline: every informer event and every fleet each 15 s
//     published, each message written by its consumer (billed the same
//     way), its queries read from Firestore.
//
// The scenario's clock is divided by -bill.compress; the queries and
// the stream's polls run in real time. Every count is taken over the
// window, after both systems have published the initial fleets.
func BenchmarkBill(b *testing.B) {
	c := controlplane.Require(b, cp, cpErr)
	emulator.Host(b, emulator.FirestoreHostEnv)
	for range b.N {
		benchmarkBill(b, c)
	}
}

func benchmarkBill(b *testing.B, c *controlplane.ControlPlane) {
	compress := time.Duration(*billCompress)
	ref := bill.Reference
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	ns := kubetest.NewNamespace(b, c)
	const cluster = "bench"
	fleets := ref.FleetsPerCluster
	names := make([]string, fleets)
	hot := map[string]bool{}
	for i := range names {
		names[i] = fmt.Sprintf("f%04d", i)
		if i < ref.HotFleets {
			hot[names[i]] = true
		}
	}
	platforms := []string{"pc", "xbox", "playstation", "switch"}
	setup := time.Now()
	parallel(fleets, 8, func(i int) {
		ns.CreateFleet(ns.Name, names[i], map[string]string{"platform": platforms[i%len(platforms)]})
	})
	b.Logf("%d fleets created in %v", fleets, time.Since(setup).Round(time.Millisecond))

	// fleetcast, with the publisher's and the function's propagation and
	// sampler as deployed: trace context on every message, none sampled
	// (Cloud Trace's spans are priced from trace_sample_ratio).
	otlptest.Capture(b, telemetry.Config{Service: "fleetcast", SampleRatio: 0})
	project := emulator.ProjectID(b)
	logBytes := newExcludingWriter(b)
	ours := &billedIngest{
		source: "//pubsub.googleapis.com/projects/" + project + "/topics/" + ingest.DefaultTopicPrefix + cluster,
		store:  firestoredb.New(emulator.Firestore(b, project), fleet.DefaultTombstoneRetention, time.Now),
		hot:    hot,
	}
	// The change feed, as Terraform deploys it (change_feed).
	ps := emulator.PubSub(b, project)
	feedTopic := "changes-" + randomHex(b, 4)
	require.NoError(b, fleetfeed.EnsureTopic(ctx, ps, feedTopic))
	announcer := &countingAnnouncer{Announcer: fleetfeed.NewAnnouncer(ps, feedTopic)}
	b.Cleanup(announcer.Stop)
	ours.handler = ingest.NewHandler(ours, logging.New(logBytes, slog.LevelInfo, logging.WithProject(project)), ingest.Config{
		TombstoneRetention: fleet.DefaultTombstoneRetention, EventTimeout: 50 * time.Second,
		TopicPrefix: ingest.DefaultTopicPrefix, MaxClockSkew: fleet.DefaultMaxClockSkew,
		FullReconcileEvery: firestoredb.DefaultFullReconcileEvery,
	}, time.Now).WithAnnouncer(announcer)
	cfg := kubetest.Config(cluster, ns.Name)
	cfg.MinInterval = publisher.DefaultConfig().MinInterval / compress
	cfg.SnapshotInterval = ref.SnapshotInterval / compress
	cfg.RefreshInterval = ref.RefreshInterval / compress
	ours.start(ctx, b)
	kubetest.StartPublisher(b, cfg, c.RESTConfig(), ours)

	// The baseline.
	baseLog := &countingWriter{}
	base := newBroadcaster(firestoredb.New(emulator.Firestore(b, emulator.ProjectID(b)), time.Hour, time.Now), 8)
	base.hot = hot
	base.log = logging.New(baseLog, slog.LevelInfo)
	stopBaseline := base.follow(b, ns, cfg.Projection, cluster, ref.BaselineRepublish/compress)

	// Both have every fleet before the window opens.
	require.Eventually(b, func() bool {
		return ours.msgs[msgChange].Load()+ours.msgs[msgHot].Load() >= int64(fleets) && base.writes.Load() >= int64(fleets)
	}, 2*time.Minute, 100*time.Millisecond, "the initial publishes did not arrive")
	b.Logf("both systems had every fleet %v after the start", time.Since(setup).Round(time.Millisecond))

	// fleetcast's read side: the query function with the matchmakers on
	// its stream, following the change feed.
	quiet := logging.New(io.Discard, logging.LevelWarning)
	viewStore := firestoredb.New(emulator.Firestore(b, project), fleet.DefaultTombstoneRetention, time.Now)
	svc := fleetapi.NewService(fleetfeed.NewFollower(viewStore, ps, feedTopic, quiet), fleetapi.Options{Log: quiet})
	srv := httptest.NewServer(query.NewHandler(svc, quiet))
	b.Cleanup(srv.Close)
	client := fleetcastv1connect.NewInformationServiceClient(testhttp.New(&http.Transport{MaxIdleConnsPerHost: ref.Matchmakers}), srv.URL)
	var streamed atomic.Int64
	watchtest.Subscribe(b, client, ref.Matchmakers, &fleetcastv1.WatchFleetsRequest{},
		func(int, *fleetcastv1.FleetInformation) { streamed.Add(1) })

	// The view's idle cost: streams open, no fleet written.
	for {
		reads := viewStore.Reads()
		require.NoError(b, svc.Sync(ctx))
		if viewStore.Reads()-reads <= 2 {
			break
		}
	}
	idleReads, idleStart := viewStore.Reads(), time.Now()
	letTimePass(10 * time.Second)
	idle := float64(viewStore.Reads()-idleReads) / time.Since(idleStart).Seconds()

	type counts struct {
		msgs, bytes                                        [msgClasses]int64
		billing                                            firestoredb.Billing
		logBytes, excludedLogBytes, viewSyncs, viewListens int64
		announced, announcedBytes                          int64
		baseMsgs, baseRepublished, baseBytes, baseWrites   int64
		baseLogBytes                                       int64
	}
	snapshot := func() counts {
		var k counts
		for i := range msgClasses {
			k.msgs[i], k.bytes[i] = ours.msgs[i].Load(), ours.bytes[i].Load()
		}
		k.billing = ours.store.Billing()
		view := viewStore.Billing()
		k.logBytes, k.viewSyncs, k.viewListens = logBytes.n.Load(), view.Reads[firestoredb.CauseView], view.Reads[firestoredb.CauseListen]
		k.excludedLogBytes = logBytes.excludedAt.Load()
		k.announced, k.announcedBytes = announcer.msgs.Load(), announcer.bytes.Load()
		k.baseMsgs, k.baseRepublished, k.baseBytes, k.baseWrites = base.messages.Load(), base.republished.Load(), base.bytes.Load(), base.writes.Load()
		k.baseLogBytes = baseLog.n.Load()
		return k
	}

	// The window: one refresh interval of scenario time.
	window := ref.RefreshInterval / compress
	spreadRate := ref.SpreadChangesPerSecond() / float64(ref.Clusters)
	var hotPatches, spreadPatches, queries, baseQueryReads atomic.Int64
	var baseQueries bill.Spans
	b.ResetTimer()
	start, startedAt := snapshot(), time.Now()
	load, stopLoad := context.WithTimeout(ctx, window)
	var wg sync.WaitGroup
	// Every update changes the fleet's status: an update that changes
	// nothing is no event on the API server.
	for i := range ref.HotFleets {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		allocated := int64(50)
		ticking(load, &wg, time.Duration(float64(time.Second)/ref.HotChangesPerSecond)/compress, func() {
			if allocated <= 20 || (allocated < 80 && rng.IntN(2) == 0) {
				allocated++
			} else {
				allocated--
			}
			ns.SetStatus(ns.Name, names[i], map[string]any{"replicas": int64(100), "readyReplicas": 100 - allocated, "allocatedReplicas": allocated})
			hotPatches.Add(1)
		})
	}
	spreadRNG := rand.New(rand.NewPCG(9, 9))
	ready := map[string]int64{}
	ticking(load, &wg, time.Duration(float64(time.Second)/spreadRate)/compress, func() {
		name := names[ref.HotFleets+spreadRNG.IntN(fleets-ref.HotFleets)]
		ready[name] = (ready[name] + 1) % 4
		ns.SetStatus(ns.Name, name, map[string]any{"replicas": int64(3), "readyReplicas": ready[name]})
		spreadPatches.Add(1)
	})
	ticking(load, &wg, time.Duration(float64(time.Second)/ref.QueriesPerSecond), func() {
		resp, err := testhttp.Client.Get(srv.URL + "/v1/fleets?selector=platform%3Dpc&orderBy=ready&pageSize=100")
		if err != nil {
			b.Errorf("query: %v", err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Errorf("query: %s", resp.Status)
		}
		queries.Add(1)
	})
	ticking(load, &wg, time.Duration(float64(time.Second)/ref.QueriesPerSecond), func() {
		begin := time.Now()
		docs, err := base.store.Client().Collection(firestoredb.FleetsCollection).Where("labels.platform", "==", "pc").
			Limit(100).Documents(ctx).GetAll()
		baseQueries.Add(begin, time.Now())
		if err != nil {
			b.Errorf("baseline query: %v", err)
			return
		}
		baseQueryReads.Add(int64(max(1, len(docs))))
	})
	<-load.Done()
	stopLoad()
	wg.Wait()
	end, endedAt := snapshot(), time.Now()
	elapsed := endedAt.Sub(startedAt)
	b.StopTimer()
	b.Logf("window %v: %d hot and %d spread status updates, %d queries, %d stream messages",
		elapsed.Round(time.Millisecond), hotPatches.Load(), spreadPatches.Load(), queries.Load(), streamed.Load())

	// Both must end in the API server's state.
	letTimePass(2 * cfg.MinInterval)
	queued := 0
	for _, ch := range ours.shards {
		queued += len(ch)
	}
	b.Logf("fleetcast: %d pushes redelivered (last error: %v), %d messages still queued", ours.redelivered.Load(), ours.lastErr.Load(), queued)
	stopBaseline()
	require.NoError(b, base.close())
	requireViewsMatch(b, ns, cfg.Projection, cluster, fleets, map[string]*firestoredb.Store{"fleetcast": ours.store, "baseline": base.store})

	d := func(f func(counts) int64) float64 { return float64(f(end) - f(start)) }
	msgs := func(class int) float64 { return d(func(k counts) int64 { return k.msgs[class] }) }
	bytesOf := func(class int) float64 { return d(func(k counts) int64 { return k.bytes[class] }) }
	reads := func(cause string) float64 { return d(func(k counts) int64 { return k.billing.Reads[cause] }) }
	writes := func(cause string) float64 { return d(func(k counts) int64 { return k.billing.Writes[cause] }) }
	scenario := (elapsed * compress).Seconds() // the window in scenario seconds
	upserts := msgs(msgHot) + msgs(msgChange) + msgs(msgRefresh)
	parts := msgs(msgPart)
	// Instance time: the window's requests of this cluster, and of the
	// deployment: this cluster's trace, and the other clusters' (this
	// trace without its hot fleets: the deployment has two hot fleets in
	// all) at random offsets, independent clusters on one function;
	// billed as Cloud Run bills.
	rng := rand.New(rand.NewPCG(5, 5))
	instanceSeconds := func(all, cold []bill.Span, others, concurrency int) (perRequest float64, instances int) {
		spans := bill.Superpose(all, cold, startedAt, elapsed, others, rng)
		billed, instances := bill.InstanceTime(spans, concurrency, bill.Prices.RunRounding)
		return billed.Seconds() / float64(len(spans)), instances
	}
	ourSpans, ourCold := ours.spans.Within(startedAt, endedAt), ours.cold.Within(startedAt, endedAt)
	baseSpans, baseCold := base.spans.Within(startedAt, endedAt), base.cold.Within(startedAt, endedAt)
	querySpans := baseQueries.Within(startedAt, endedAt)
	invocations := float64(len(ourSpans))
	baseInvocations := float64(len(baseSpans))
	fcBilled, fcInstances := instanceSeconds(ourSpans, ourCold, ref.Clusters-1, ingestConcurrency)
	blBilled, blInstances := instanceSeconds(baseSpans, baseCold, ref.Clusters-1, ingestConcurrency)
	fcBilledOne, _ := instanceSeconds(ourSpans, nil, 0, ingestConcurrency)
	blBilledOne, _ := instanceSeconds(baseSpans, nil, 0, ingestConcurrency)
	queryBilled, _ := instanceSeconds(querySpans, nil, 0, queryConcurrency)
	fcWrites := writes(firestoredb.CauseApply) + writes(firestoredb.CauseCluster) + writes(firestoredb.CauseReconcile)
	baseMsgs := d(func(k counts) int64 { return k.baseMsgs })
	baseRepublished := d(func(k counts) int64 { return k.baseRepublished })
	baseWrites := d(func(k counts) int64 { return k.baseWrites })
	nonzero := func(what string, v float64) float64 {
		if v <= 0 {
			b.Fatalf("the window had no %s", what)
		}
		return v
	}

	m := bill.Measured{
		Fleetcast: bill.FleetcastUnits{
			MsgsPerHotFleetSecond:         msgs(msgHot) / float64(ref.HotFleets) / scenario,
			MsgsPerSpreadChange:           msgs(msgChange) / nonzero("spread change", float64(spreadPatches.Load())),
			RefreshesPerFleetInterval:     msgs(msgRefresh) / float64(fleets) * ref.RefreshInterval.Seconds() / scenario,
			PartsPerSnapshot:              parts / (scenario / ref.SnapshotInterval.Seconds()),
			BilledBytesPerUpsert:          (bytesOf(msgHot) + bytesOf(msgChange) + bytesOf(msgRefresh)) / nonzero("upsert", upserts),
			BilledBytesPerPart:            bytesOf(msgPart) / nonzero("snapshot", parts),
			ApplyReadsPerUpsert:           reads(firestoredb.CauseApply) / upserts,
			WritesPerChange:               writes(firestoredb.CauseApply) / nonzero("change", msgs(msgHot)+msgs(msgChange)),
			ReconcileReadsPerPart:         reads(firestoredb.CauseReconcile) / parts,
			ClusterReadsPerPart:           reads(firestoredb.CauseCluster) / parts,
			ClusterWritesPerPart:          writes(firestoredb.CauseCluster) / parts,
			FullReconcileEvery:            firestoredb.DefaultFullReconcileEvery,
			BilledSecondsPerInvocation:    fcBilled,
			IngestInstances:               float64(fcInstances),
			LogBytesPerInvocation:         d(func(k counts) int64 { return k.logBytes }) / nonzero("invocation", invocations),
			ExcludedLogBytesPerInvocation: d(func(k counts) int64 { return k.excludedLogBytes }) / nonzero("invocation", invocations),
			ViewSyncReadsPerSecond:        d(func(k counts) int64 { return k.viewSyncs }) / elapsed.Seconds(),
			ViewListenReadsPerWrite:       d(func(k counts) int64 { return k.viewListens }) / nonzero("fleet write", writes(firestoredb.CauseApply)),
			// The change feed: what the ingest function announced per
			// fleet document it wrote, and each message's billed volume.
			AnnouncementsPerWrite: d(func(k counts) int64 { return k.announced }) /
				nonzero("fleet write", writes(firestoredb.CauseApply)+writes(firestoredb.CauseReconcile)),
			BilledBytesPerAnnouncement: d(func(k counts) int64 { return k.announcedBytes }) /
				nonzero("announcement", d(func(k counts) int64 { return k.announced })),
		},
		Baseline: bill.BaselineUnits{
			MsgsPerChange:              (baseMsgs - baseRepublished) / nonzero("status update", float64(hotPatches.Load()+spreadPatches.Load())),
			MsgsPerFleetRepublish:      baseRepublished / float64(fleets) / (scenario / ref.BaselineRepublish.Seconds()),
			BilledBytesPerMsg:          d(func(k counts) int64 { return k.baseBytes }) / nonzero("baseline message", baseMsgs),
			WritesPerMsg:               float64(base.writes.Load()) / float64(base.messages.Load()),
			BilledSecondsPerInvocation: blBilled,
			LogBytesPerInvocation:      d(func(k counts) int64 { return k.baseLogBytes }) / nonzero("baseline write", baseInvocations),
		},
	}
	baseQueryCount := len(querySpans)
	m.Baseline.ReadsPerQuery = float64(baseQueryReads.Load()) / nonzero("baseline query", float64(baseQueryCount))
	m.Baseline.BilledSecondsPerQuery = queryBilled
	m.Report(func(name string, v float64) { b.ReportMetric(v, name) })

	// The raw counts of the window, for the document.
	b.ReportMetric(scenario, "window-scenario-s")
	b.ReportMetric(float64(compress), "compress")
	b.ReportMetric(ingestConcurrency, "ingest-concurrency")
	b.ReportMetric(fcBilledOne, "fc-one-cluster-billed-s/invocation")
	b.ReportMetric(blBilledOne, "bl-one-cluster-billed-s/invocation")
	b.ReportMetric(float64(blInstances), "bl-consumer-instances")
	b.ReportMetric(float64(fleets), "fleets")
	b.ReportMetric(float64(hotPatches.Load()), "hot-updates")
	b.ReportMetric(float64(spreadPatches.Load()), "spread-updates")
	b.ReportMetric(msgs(msgHot), "fc-hot-msgs")
	b.ReportMetric(msgs(msgChange), "fc-change-msgs")
	b.ReportMetric(msgs(msgRefresh), "fc-refresh-msgs")
	b.ReportMetric(parts, "fc-part-msgs")
	b.ReportMetric(fcWrites, "fc-writes")
	b.ReportMetric(reads(firestoredb.CauseApply)+reads(firestoredb.CauseReconcile)+reads(firestoredb.CauseCluster), "fc-ingest-reads")
	b.ReportMetric(d(func(k counts) int64 { return k.viewSyncs + k.viewListens }), "fc-view-reads")
	b.ReportMetric(d(func(k counts) int64 { return k.viewSyncs }), "fc-view-sync-reads")
	b.ReportMetric(d(func(k counts) int64 { return k.viewListens }), "fc-view-listen-reads")
	b.ReportMetric(idle, "fc-view-idle-reads/s")
	b.ReportMetric(float64(queries.Load()), "fc-queries")
	b.ReportMetric(float64(streamed.Load()), "fc-stream-msgs")
	b.ReportMetric(baseMsgs, "bl-msgs")
	b.ReportMetric(baseWrites, "bl-writes")
	b.ReportMetric(float64(baseQueryCount), "bl-queries")
	b.ReportMetric(float64(hotPatches.Load())/float64(ref.HotFleets)/scenario, "hot-achieved-per-fleet-s")
	b.ReportMetric(float64(spreadPatches.Load())/scenario, "spread-achieved-per-s")
	b.ReportMetric(float64(queries.Load())/elapsed.Seconds(), "queries-achieved-per-s")
}

// requireViewsMatch requires every store's live fleets to hold the
// status each fleet of ns has on the API server.
func requireViewsMatch(tb testing.TB, ns *kubetest.Namespace, projection publisher.Projection, cluster string, fleets int, stores map[string]*firestoredb.Store) {
	tb.Helper()
	list, err := ns.Fleets(ns.Name).List(tb.Context(), metav1.ListOptions{})
	require.NoError(tb, err)
	want := map[string]string{}
	for _, item := range list.Items {
		_, s, err := projection.Project(cluster, &item)
		require.NoError(tb, err)
		want[item.GetName()] = statusLine(s.Status.Replicas, s.Status.ReadyReplicas, s.Status.AllocatedReplicas)
	}
	require.Len(tb, want, fleets)
	for name, store := range stores {
		require.EventuallyWithT(tb, func(t *assert.CollectT) {
			got := map[string]string{}
			_, err := store.LiveFleets(tb.Context(), func(d *fleet.Document) {
				got[d.Name] = statusLine(d.Status.Replicas, d.Status.ReadyReplicas, d.Status.AllocatedReplicas)
			})
			require.NoError(t, err)
			assert.Equal(t, want, got, "%s's Firestore view differs from the API server", name)
		}, 30*time.Second, 500*time.Millisecond)
	}
}
