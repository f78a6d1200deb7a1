package emulatortests

import (
	"context"
	"flag"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/publisher"
)

var (
	hotRate     = flag.Float64("hot.rate", 20, "BenchmarkHotFleetStaleness: status changes per second of the hot fleet")
	hotDuration = flag.Duration("hot.duration", 30*time.Second, "BenchmarkHotFleetStaleness: how long it changes")
	hotFloors   = flag.Int("hot.floors", 60, "BenchmarkHotFleetStaleness: floor samples measured after the changes")
)

// BenchmarkHotFleetStaleness measures how stale a hot fleet looks: one
// fleet's status changes -hot.rate times a second for -hot.duration,
// through the whole pipeline of BenchmarkEndToEndLatency (the publisher at
// its default 1 s minimum interval, the Pub/Sub emulator, the ingest
// function's process, the Firestore emulator) to a fleetwatch listener.
// Each change sets readyReplicas to its sequence number, so a state is at
// least as new as change i when its ready is ≥ i; a change's staleness is
// from the start of its patch to the listener's first such state. The
// publisher holds a change for up to its minimum interval (coalescing:
// the latest state goes out once per interval), so the bound is that
// interval plus the pipeline's floor, measured after the changes, hop by
// hop as §2 does: p99 ≤ min-interval + floor p99.
func BenchmarkHotFleetStaleness(b *testing.B) {
	c := controlplane.Require(b, cp, cpErr)
	for range b.N {
		benchmarkHotFleet(b, c)
	}
}

func benchmarkHotFleet(b *testing.B, c *controlplane.ControlPlane) {
	p := newPipeline(b)
	ns := kubetest.NewNamespace(b, c)
	p.nsName = ns.Name
	cfg := p.publisherConfig(ns.Name)
	def := publisher.DefaultConfig()
	cfg.MinInterval, cfg.SnapshotInterval, cfg.RefreshInterval = def.MinInterval, def.SnapshotInterval, def.RefreshInterval
	kubetest.StartPublisher(b, cfg, c.RESTConfig(), p.transport(""))
	ns.CreateFleet(ns.Name, "hot", nil)
	p.waitFleets("created", []string{"hot"}, live)

	var mu sync.Mutex
	var seenAt []time.Time // seenAt[i]: when a state ≥ i was first seen
	ctx, stop := context.WithCancel(b.Context())
	defer stop()
	_, err := fleetwatch.Watch(ctx, p.fs, fleetwatch.Options{Clusters: []string{p.cluster}, OnChange: func(ch fleetwatch.Change) {
		if ch.Fleet.Name != "hot" {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for int64(len(seenAt)) <= ch.Fleet.ReadyReplicas {
			seenAt = append(seenAt, now)
		}
	}})
	require.NoError(b, err)

	b.ResetTimer()
	var started []time.Time // started[i]: when change i's patch began
	started = append(started, time.Time{})
	tick := time.NewTicker(time.Duration(float64(time.Second) / *hotRate))
	begin := time.Now()
	for time.Since(begin) < *hotDuration {
		<-tick.C
		started = append(started, time.Now())
		ns.SetStatus(ns.Name, "hot", map[string]any{"readyReplicas": int64(len(started) - 1)})
	}
	tick.Stop()
	elapsed := time.Since(begin)
	last := len(started) - 1
	require.Eventually(b, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seenAt) > last
	}, time.Minute, 10*time.Millisecond, "the last change reached the listener")
	b.StopTimer()

	mu.Lock()
	stale := make([]time.Duration, 0, last)
	for i := 1; i <= last; i++ {
		stale = append(stale, seenAt[i].Sub(started[i]))
	}
	mu.Unlock()
	f := newFloorProbe(b, c, p)
	var floors []float64
	for i := range *hotFloors {
		sum := 0.0
		for _, d := range f.measure(int64(i)) {
			sum += float64(d.Microseconds()) / 1000
		}
		floors = append(floors, sum)
	}
	staleMs := millis(stale)
	reportDist(b, "staleness", "ms", staleMs)
	reportDist(b, "floor", "ms", floors)
	minInterval := float64(cfg.MinInterval.Milliseconds())
	b.ReportMetric(minInterval, "min-interval-ms")
	b.ReportMetric(minInterval+quantile(floors, 0.5), "bound-p50-ms")
	b.ReportMetric(minInterval+quantile(floors, 0.99), "bound-p99-ms")
	b.ReportMetric(float64(last), "changes")
	b.ReportMetric(float64(last)/elapsed.Seconds(), "changes/s")
	b.ReportMetric(*hotRate, "rate-asked/s")
}
