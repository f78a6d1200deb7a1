package emulatortests

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/functions/query"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/internal/testenv/watchtest"
	"github.com/fleetcast/fleetcast/logging"
)

var (
	benchWatchChanges   = flag.Int("watch.changes", 40, "BenchmarkWatchFanout: changes per case")
	benchWatchListeners = flag.Int("watch.listeners", 1000, "BenchmarkWatchFanout: direct Firestore listeners in the many-listener case")
)

// receipts records when each subscriber saw each version of the watched
// fleet.
type receipts struct {
	mu   sync.Mutex
	seen []map[int64]time.Time // by subscriber, version seq → when
	cond *sync.Cond
}

func newReceipts(n int) *receipts {
	r := &receipts{seen: make([]map[int64]time.Time, n)}
	for i := range r.seen {
		r.seen[i] = map[int64]time.Time{}
	}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *receipts) saw(sub int, seq int64) {
	r.mu.Lock()
	r.seen[sub][seq] = time.Now()
	r.mu.Unlock()
	r.cond.Broadcast()
}

// wait returns, once every subscriber saw seq, how long after start each
// did.
func (r *receipts) wait(seq int64, start time.Time) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, 0, len(r.seen))
	for i := 0; i < len(r.seen); {
		at, ok := r.seen[i][seq]
		if !ok {
			r.cond.Wait()
			continue
		}
		out = append(out, at.Sub(start))
		i++
	}
	return out
}

// BenchmarkWatchFanout measures how a fleet write (an ingest transaction)
// reaches many subscribers: through one query instance's stream
// (WatchFleets over Connect, the function's defaults: WATCH_POLL 250 ms;
// 1 000 subscribers also with a busy loop taking one core beside),
// and through direct Firestore listeners (fleetwatch.Watch, each with its
// own listeners, as each matchmaker process would have). It reports the
// latency from the write to each subscriber's receipt, the Firestore reads
// the instance's view made per change (polls that found nothing
// included), and the heap per subscriber (for the stream, client and
// server, both in this process).
func BenchmarkWatchFanout(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("source=stream/subscribers=%d", n), func(b *testing.B) { benchmarkStreamFanout(b, n, false) })
	}
	b.Run("source=stream/subscribers=1000/cpu=contended", func(b *testing.B) { benchmarkStreamFanout(b, 1000, true) })
	for _, n := range []int{1, *benchWatchListeners} {
		b.Run(fmt.Sprintf("source=firestore/subscribers=%d", n), func(b *testing.B) { benchmarkListenerFanout(b, n) })
	}
}

// fanoutWrite writes the watched fleet at version seq and returns when.
func fanoutWrite(b *testing.B, store *firestoredb.Store, seq int64) time.Time {
	start := time.Now()
	_, err := store.Apply(b.Context(), fleet.Event{
		SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "c0", Namespace: "games", Name: "f00000",
		Version: fleet.Version{Term: 2, Seq: seq}, ObservedAt: fleet.MicrosOf(start), Publisher: fleet.Publisher{ID: "p"},
		Fleet: fleet.State{UID: "u", Labels: map[string]string{"platform": "pc"}, Status: fleet.Status{ReadyReplicas: seq % 10}},
	})
	require.NoError(b, err)
	return start
}

// measureFanout writes the watched fleet *benchWatchChanges times, each
// once every subscriber saw the previous, then 100 to 350 ms later (at
// random, so that writes fall anywhere between two polls of the view), and
// reports the latency distribution over every receipt and that of the
// last subscriber of each change.
func measureFanout(b *testing.B, store *firestoredb.Store, r *receipts) {
	var all, last []time.Duration
	rng := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for i := range *benchWatchChanges {
		seq := int64(1_000_000 + i)
		start := fanoutWrite(b, store, seq)
		lat := r.wait(seq, start)
		all = append(all, lat...)
		slowest := lat[0]
		for _, l := range lat {
			slowest = max(slowest, l)
		}
		last = append(last, slowest)
		<-time.After(100*time.Millisecond + time.Duration(rng.Int64N(int64(250*time.Millisecond))))
	}
	b.StopTimer()
	reportDist(b, "latency", "ms", millis(all))
	reportDist(b, "last-subscriber", "ms", millis(last))
	b.ReportMetric(float64(*benchWatchChanges), "changes")
}

// burnCPU runs a shell busy loop beside the benchmark, taking one of the
// machine's cores as another job would, until the benchmark ends.
func burnCPU(b *testing.B) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	require.NoError(b, cmd.Start())
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// benchmarkStreamFanout is the stream case with n subscribers; contended
// runs a busy loop beside the changes (burnCPU).
func benchmarkStreamFanout(b *testing.B, n int, contended bool) {
	project := emulator.ProjectID(b)
	store := firestoredb.New(emulator.Firestore(b, project), time.Hour, time.Now)
	fillFleets(b, store, 100)
	log := logging.New(io.Discard, logging.LevelWarning)
	svc := fleetapi.NewService(store, fleetapi.Options{Log: log, MaxWatches: n})
	srv := httptest.NewServer(query.NewHandler(svc, log))
	b.Cleanup(srv.Close)
	client := fleetcastv1connect.NewInformationServiceClient(testhttp.New(&http.Transport{MaxIdleConnsPerHost: n}), srv.URL)

	heapBefore := heapInUse()
	r := newReceipts(n)
	watchtest.Subscribe(b, client, n, &fleetcastv1.WatchFleetsRequest{Filter: &fleetcastv1.FleetFilter{Clusters: []string{"c0"}, Selector: "platform=pc"}},
		func(sub int, f *fleetcastv1.FleetInformation) {
			if f.GetFleetName() == "f00000" {
				r.saw(sub, f.GetVersion().GetSeq())
			}
		})
	heapPer := float64(heapInUse()-heapBefore) / float64(n) / 1024
	// Warm: once a sync reads only a query's minimum, the fill is behind
	// the view (a sync reads again what was written within COMMIT_LAG).
	for {
		reads := store.Reads()
		require.NoError(b, svc.Sync(b.Context()))
		if store.Reads()-reads <= 2 {
			break
		}
	}
	// Idle: the view polls, and finds nothing.
	reads, idleStart := store.Reads(), time.Now()
	<-time.After(2 * time.Second)
	idle := float64(store.Reads()-reads) / time.Since(idleStart).Seconds()
	reads = store.Reads()
	if contended {
		burnCPU(b)
	}
	measureFanout(b, store, r) // resets the metrics reported before it
	b.ReportMetric(float64(store.Reads()-reads)/float64(*benchWatchChanges), "view-reads/change")
	b.ReportMetric(idle, "idle-view-reads/s")
	b.ReportMetric(heapPer, "heap-KiB/subscriber")
}

func benchmarkListenerFanout(b *testing.B, n int) {
	project := emulator.ProjectID(b)
	store := firestoredb.New(emulator.Firestore(b, project), time.Hour, time.Now)
	fillFleets(b, store, 100)
	heapBefore := heapInUse()
	r := newReceipts(n)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	for i := range n {
		_, err := fleetwatch.Watch(ctx, store.Client(), fleetwatch.Options{Clusters: []string{"c0"}, OnChange: func(c fleetwatch.Change) {
			if c.Fleet.Name == "f00000" {
				r.saw(i, c.Fleet.Version.Seq)
			}
		}})
		require.NoError(b, err)
	}
	heapPer := float64(heapInUse()-heapBefore) / float64(n) / 1024
	measureFanout(b, store, r) // resets the metrics reported before it
	b.ReportMetric(heapPer, "heap-KiB/subscriber")
}
