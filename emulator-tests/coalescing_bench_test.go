package emulatortests

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/build/bill"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/publisher"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

var (
	coalesceCompress = flag.Int("coalesce.compress", 1,
		"BenchmarkCoalescingVsBroadcast: divide the scenario's clock (its steps and every interval of both systems) by this")
	coalesceChurnRate = flag.Float64("coalesce.churn", 20,
		"BenchmarkCoalescingVsBroadcast: status changes per churning fleet per (scenario) second")
)

// The scenario, in scenario time (divided by -coalesce.compress to run).
const (
	scaleTarget     = 500 // servers the scaling fleet reaches
	scaleBatch      = 64  // servers Agones creates per GameServerSet sync
	scaleBatchEvery = 500 * time.Millisecond
	scaleTick       = 50 * time.Millisecond // how often the fleet controller can report
	churnFleets     = 10
	churnServers    = 100
	churnDuration   = time.Minute
	steadyDuration  = 10 * time.Minute
	// The baseline's full republish period and fleetcast's defaults.
	baselineRepublish = 15 * time.Second
)

// countingStore is the consumer side of a system under comparison: it
// counts the messages it received and the Firestore writes they caused.
type countingStore struct {
	store            *firestoredb.Store
	messages, writes atomic.Int64
}

// fleetcastSide is a publisher.Transport that hands each event straight to
// the ingest core (the same Store.Apply the ingest function runs), one
// message per Send that succeeds.
type fleetcastSide struct {
	countingStore
	// upserts counts the messages that carry a fleet's state: every
	// message but snapshots.
	upserts atomic.Int64
}

func (s *fleetcastSide) Send(ctx context.Context, ev fleet.Event) error {
	res, err := s.store.Apply(ctx, ev)
	if err != nil {
		return err // the Sender retries, as Pub/Sub would redeliver
	}
	s.messages.Add(1)
	if ev.Kind != fleet.KindSnapshot {
		s.upserts.Add(1)
	}
	s.writes.Add(int64(res.Writes))
	return nil
}

// broadcaster is the baseline: what existing Agones event broadcasters do.
// It publishes every informer event (add, update, delete) and republishes
// every fleet each period; its consumer writes every message it receives.
// Writes go through workers sharded by fleet, so each fleet's messages are
// written in order (as an ordered subscription would deliver them).
type broadcaster struct {
	countingStore
	// republished counts the messages of the periodic republish; bytes
	// their Pub/Sub volume, each request's minimum applied.
	republished, bytes atomic.Int64
	// spans records the consumer's writes, for their Cloud Run bill, and
	// cold those of the fleets not in hot; log, if set, gets one line per
	// write.
	spans, cold bill.Spans
	hot         map[string]bool
	log         *slog.Logger
	seq         atomic.Int64
	shards      []chan fleet.Event
	wg          sync.WaitGroup
	err         atomic.Pointer[error]
}

func newBroadcaster(store *firestoredb.Store, workers int) *broadcaster {
	b := &broadcaster{countingStore: countingStore{store: store}}
	for range workers {
		ch := make(chan fleet.Event, 1<<16)
		b.shards = append(b.shards, ch)
		b.wg.Go(func() {
			for ev := range ch {
				if err := b.write(ev); err != nil {
					b.err.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	return b
}

func (b *broadcaster) publish(k fleet.Key, s *fleet.State) {
	ev := fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindDelete, Cluster: k.Cluster,
		Version: fleet.Version{Term: 1, Seq: b.seq.Add(1)}, ObservedAt: fleet.MicrosOf(time.Now()),
		Publisher: fleet.Publisher{ID: "broadcaster"}, Namespace: k.Namespace, Name: k.Name}
	if s != nil {
		ev.Kind, ev.Fleet = fleet.KindUpsert, *s
	}
	b.messages.Add(1)
	if msg, err := pubsubtopic.Message(ev); err == nil {
		b.bytes.Add(int64(billedVolume(msg)))
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(k.Name))
	b.shards[int(h.Sum32())%len(b.shards)] <- ev
}

// write stores the message as it comes: a naive consumer, one write each.
func (b *broadcaster) write(ev fleet.Event) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, _ := fleet.ApplyFleetEvent(nil, ev, time.Now(), time.Hour)
	for attempt := 0; ; attempt++ {
		begin := time.Now()
		_, err := b.store.FleetRef(ev.Key()).Set(ctx, d)
		b.spans.Add(begin, time.Now())
		if !b.hot[ev.Name] {
			b.cold.Add(begin, time.Now())
		}
		if err == nil {
			b.writes.Add(1)
			if b.log != nil {
				b.log.InfoContext(ctx, "fleet event written", logging.KeyKind, string(ev.Kind), logging.KeyCluster, ev.Cluster,
					logging.KeyFleet, ev.Key().DocID(), logging.KeyVersion, ev.Version.String())
			}
			return nil
		}
		if attempt == 5 {
			return err
		}
		letTimePass(100 * time.Millisecond)
	}
}

// follow publishes every informer event on the fleets of ns, and every
// fleet each period, until the returned stop is called.
func (b *broadcaster) follow(tb testing.TB, ns *kubetest.Namespace, projection publisher.Projection, cluster string, period time.Duration) (stop func()) {
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(ns.Dyn, 0, ns.Name, nil)
	inf := factory.ForResource(publisher.FleetGVR).Informer()
	project := func(obj any) (fleet.Key, *fleet.State) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		k, s, err := projection.Project(cluster, obj.(*unstructured.Unstructured))
		if err != nil {
			tb.Errorf("baseline projection: %v", err)
		}
		return k, &s
	}
	// One lock orders the events and the republishes: a republish that
	// listed a fleet before its update must publish it before the update
	// does, or the older state would be written last.
	var order sync.Mutex
	locked := func(f func()) {
		order.Lock()
		defer order.Unlock()
		f()
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { locked(func() { b.publish(project(obj)) }) },
		UpdateFunc: func(_, obj any) { locked(func() { b.publish(project(obj)) }) },
		DeleteFunc: func(obj any) { locked(func() { k, _ := project(obj); b.publish(k, nil) }) },
	})
	require.NoError(tb, err)
	done := make(chan struct{})
	factory.Start(done)
	factory.WaitForCacheSync(done)
	ctx, cancel := context.WithCancel(context.Background())
	var republisher sync.WaitGroup
	republisher.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			locked(func() {
				for _, obj := range inf.GetStore().List() {
					b.republished.Add(1)
					b.publish(project(obj))
				}
			})
		}
	})
	return func() {
		cancel()
		republisher.Wait()
		close(done)
		factory.Shutdown()
	}
}

func (b *broadcaster) close() error {
	for _, ch := range b.shards {
		close(ch)
	}
	b.wg.Wait()
	if err := b.err.Load(); err != nil {
		return *err
	}
	return nil
}

// phaseCounts are both systems' counters at the end of a phase. The
// baseline's consumer writes blind (a Set per message), so it reads
// nothing; fleetcast's reads are its ingest's, as billed, every cause.
type phaseCounts struct{ fcMsgs, fcWrites, fcReads, blMsgs, blWrites int64 }

// BenchmarkCoalescingVsBroadcast runs one scripted scenario from the same
// API server through fleetcast (the real publisher, in-process, and the
// ingest core on the Firestore emulator) and through the baseline
// broadcaster, and counts messages and Firestore writes of each:
//
//  1. scale-up: a fleet scaled 0 → 500 as Agones reports it (servers
//     created in batches of 64 per sync, each Ready 2–6 s after creation,
//     the fleet's status updated at most every 50 ms);
//  2. churn: 10 fleets of 100 servers under allocation churn, each fleet's
//     status changing -coalesce.churn times per second for a minute;
//  3. steady state: 10 minutes in which nothing changes.
//
// The scenario's clock is divided by -coalesce.compress, with every
// interval of both systems (fleetcast's 1 s minimum interval, 30 s
// snapshots and 10 min refresh; the baseline's 15 s republish). At the end
// both Firestore views must equal the API server's fleets.
func BenchmarkCoalescingVsBroadcast(b *testing.B) {
	c := controlplane.Require(b, cp, cpErr)
	emulator.Host(b, emulator.FirestoreHostEnv)
	for range b.N {
		benchmarkCoalescing(b, c)
	}
}

func benchmarkCoalescing(b *testing.B, c *controlplane.ControlPlane) {
	compress := time.Duration(*coalesceCompress)
	ns := kubetest.NewNamespace(b, c)
	const cluster = "bench"
	ours := &fleetcastSide{countingStore: countingStore{store: firestoredb.New(emulator.Firestore(b, emulator.ProjectID(b)), time.Hour, time.Now)}}
	base := newBroadcaster(firestoredb.New(emulator.Firestore(b, emulator.ProjectID(b)), time.Hour, time.Now), 4)

	cfg := kubetest.Config(cluster, ns.Name)
	cfg.MinInterval = publisher.DefaultConfig().MinInterval / compress
	cfg.SnapshotInterval = publisher.DefaultConfig().SnapshotInterval / compress
	cfg.RefreshInterval = publisher.DefaultConfig().RefreshInterval / compress
	kubetest.StartPublisher(b, cfg, c.RESTConfig(), ours)

	stopBaseline := base.follow(b, ns, cfg.Projection, cluster, baselineRepublish/compress)
	counts := func() phaseCounts {
		reads := int64(0)
		for _, n := range ours.store.Billing().Reads {
			reads += n
		}
		return phaseCounts{ours.messages.Load(), ours.writes.Load(), reads, base.messages.Load(), base.writes.Load()}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	b.ResetTimer()

	// 1. Scale-up.
	ns.CreateFleet(ns.Name, "scaler", nil)
	var readyAt []time.Duration // when each created server becomes Ready
	var replicas, ready int64
	var lastBatch time.Duration = -scaleBatchEvery
	updates := 0
	for now := time.Duration(0); ready < scaleTarget; now += scaleTick {
		if replicas < scaleTarget && now-lastBatch >= scaleBatchEvery {
			n := min(scaleBatch, scaleTarget-replicas)
			for range n {
				readyAt = append(readyAt, now+2*time.Second+time.Duration(rng.Int64N(int64(4*time.Second))))
			}
			replicas += n
			lastBatch = now
		}
		r := int64(0)
		for _, at := range readyAt {
			if at <= now {
				r++
			}
		}
		letTimePass(time.Until(start.Add(now / compress)))
		if r != ready || now == lastBatch {
			ready = r
			ns.SetStatus(ns.Name, "scaler", map[string]any{"replicas": replicas, "readyReplicas": ready})
			updates++
		}
	}
	b.Logf("scale-up: %d status updates in %v", updates, time.Since(start).Round(time.Millisecond))
	letTimePass(2 * cfg.MinInterval) // the trailing publish
	afterScale := counts()

	// 2. Churn: each fleet's allocations move by one server per change,
	// between 20 and 80 allocated.
	for i := range churnFleets {
		name := fmt.Sprintf("churn-%d", i)
		ns.CreateFleet(ns.Name, name, nil)
		ns.SetStatus(ns.Name, name, map[string]any{"replicas": int64(churnServers), "readyReplicas": int64(churnServers)})
	}
	letTimePass(2 * cfg.MinInterval)
	patches, churnTime := churn(ns, churnFleets, *coalesceChurnRate, churnDuration/compress, compress)
	b.Logf("churn: %d status updates in %v (%.0f/s)", patches, churnTime.Round(time.Millisecond),
		float64(patches)/churnTime.Seconds())
	letTimePass(2 * cfg.MinInterval)
	afterChurn := counts()

	// 3. Steady state.
	letTimePass(steadyDuration / compress)
	stopBaseline()
	require.NoError(b, base.close())
	end := counts()
	b.StopTimer()

	// Both must end in the API server's final state.
	requireViewsMatch(b, ns, cfg.Projection, cluster, 1+churnFleets, map[string]*firestoredb.Store{"fleetcast": ours.store, "baseline": base.store})

	report := func(phase string, from, to phaseCounts) {
		b.ReportMetric(float64(to.fcMsgs-from.fcMsgs), phase+"-fleetcast-msgs")
		b.ReportMetric(float64(to.fcWrites-from.fcWrites), phase+"-fleetcast-writes")
		b.ReportMetric(float64(to.fcReads-from.fcReads), phase+"-fleetcast-reads")
		b.ReportMetric(float64(to.blMsgs-from.blMsgs), phase+"-baseline-msgs")
		b.ReportMetric(float64(to.blWrites-from.blWrites), phase+"-baseline-writes")
	}
	report("scale", phaseCounts{}, afterScale)
	report("churn", afterScale, afterChurn)
	report("steady", afterChurn, end)
	report("total", phaseCounts{}, end)
	b.ReportMetric(float64(updates), "scale-updates")
	b.ReportMetric(float64(patches), "churn-updates")
	b.ReportMetric(float64(end.blMsgs)/float64(end.fcMsgs), "msgs-ratio")
	b.ReportMetric(float64(end.blWrites)/float64(end.fcWrites), "writes-ratio")
	b.ReportMetric(float64(compress), "compress")
	b.ReportMetric(*coalesceChurnRate, "churn-per-fleet-s")
	// The rate the patchers achieved, in scenario time: below the asked
	// rate when the API server cannot take the patches that fast.
	b.ReportMetric(float64(patches)/churnFleets/(churnTime*compress).Seconds(), "churn-achieved-per-fleet-s")
	b.ReportMetric(1+churnFleets, "fleets")
	b.ReportMetric(cfg.MinInterval.Seconds()*float64(compress), "min-interval-s")
}

// churn changes the status of fleets churn-0 … churn-<fleets-1> of ns
// (100 servers each) rate times per scenario second each, for d (run
// time): allocations move by one server per change, between 20 and 80
// allocated. Each fleet has a patcher per 5 changes a second (a patch
// takes tens of milliseconds here), ticking in turn; with several, the
// allocations climb and fall back in a sawtooth instead, so that patches
// that cross each other still each change the status. It returns the
// patches made and the time they took.
func churn(ns *kubetest.Namespace, fleets int, rate float64, d, compress time.Duration) (int64, time.Duration) {
	start := time.Now()
	patchers := max(1, int(math.Ceil(rate/5)))
	period := time.Duration(float64(time.Second) / rate / float64(compress))
	var churners sync.WaitGroup
	var patches atomic.Int64
	for i := range fleets {
		var mu sync.Mutex // the fleet's walk
		rng := rand.New(rand.NewPCG(uint64(i), 3))
		allocated := int64(50)
		step := func() int64 {
			mu.Lock()
			defer mu.Unlock()
			if patchers > 1 {
				allocated = 20 + (allocated-20+1)%61
				return allocated
			}
			if allocated <= 20 || (allocated < 80 && rng.IntN(2) == 0) {
				allocated++
			} else {
				allocated--
			}
			return allocated
		}
		name := fmt.Sprintf("churn-%d", i)
		for w := range patchers {
			churners.Go(func() {
				letTimePass(time.Duration(w) * period) // in turn
				tick := time.NewTicker(period * time.Duration(patchers))
				defer tick.Stop()
				for time.Since(start) < d {
					<-tick.C
					a := step()
					ns.SetStatus(ns.Name, name, map[string]any{"replicas": int64(churnServers),
						"readyReplicas": churnServers - a, "allocatedReplicas": a})
					patches.Add(1)
				}
			})
		}
	}
	churners.Wait()
	return patches.Load(), time.Since(start)
}

// statusLine is the part of a fleet's status the scenario changes.
func statusLine(replicas, ready, allocated int64) string {
	return fmt.Sprintf("replicas=%d ready=%d allocated=%d", replicas, ready, allocated)
}
