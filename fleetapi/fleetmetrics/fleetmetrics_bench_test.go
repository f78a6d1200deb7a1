package fleetmetrics_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetmetrics"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
)

// countingWriter counts what an answer would send.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// BenchmarkMetricsScrape measures one scrape of /metrics over 10 000 fleets
// in 3 clusters (each fleet with one counter and one list): copying the
// figures from a reading of the view (one snapshot) and encoding them in
// Prometheus' text format, per fleet (about 70 000 series) and summed by
// cluster, platform and version (12 sums). The view is loaded and synced
// before; a scrape reads no store.
func BenchmarkMetricsScrape(b *testing.B) {
	now := time.Now()
	mem := fleetapitest.NewMemory(time.Now)
	for _, c := range []string{"c0", "c1", "c2"} {
		mem.PutCluster(fleet.ClusterDocument{Cluster: c, Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: 1},
			SnapshotParts: 1, IngestedAt: now, HeartbeatAt: now, FleetCount: 3334})
	}
	for i := range 10_000 {
		mem.PutFleet(fleet.Document{Cluster: fmt.Sprintf("c%d", i%3), Namespace: "games", Name: fmt.Sprintf("f%05d", i), UID: "u",
			Version: fleet.Version{Term: 1, Seq: int64(i + 2)},
			Labels:  map[string]string{"platform": []string{"pc", "ps5"}[i%2], "version": []string{"1.41", "1.42"}[(i/2)%2]},
			Spec:    &fleet.Spec{Replicas: 10, Scheduling: "Packed"},
			Status: &fleet.DocStatus{Replicas: 10, ReadyReplicas: int64(i % 10), AllocatedReplicas: 2, ReservedReplicas: 1,
				Counters: map[string]fleet.DocAggregate{"rooms": {Capacity: 10, Count: 4, Available: 6}},
				Lists:    map[string]fleet.DocAggregate{"players": {Capacity: 40, Count: 30, Available: 10}}},
			Rollout:    &fleet.Rollout{Complete: true},
			ObservedAt: now, IngestedAt: now})
	}
	svc := fleetapi.NewService(mem, fleetapi.Options{MaxStaleness: time.Hour, ClusterRefresh: -1})
	require.NoError(b, svc.Sync(b.Context()))
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	for _, tc := range []struct {
		name string
		opts fleetmetrics.Options
	}{
		{"per-fleet", fleetmetrics.Options{Labels: []string{"platform", "version"}, MaxSeries: 1_000_000}},
		{"aggregated", fleetmetrics.Options{Labels: []string{"platform", "version"}, Aggregate: true}},
	} {
		b.Run("series="+tc.name, func(b *testing.B) {
			var locked time.Duration
			var w countingWriter
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				var snap *fleetmetrics.Snapshot
				require.NoError(b, svc.Read(b.Context(), func(r *fleetapi.Read) error {
					snap = fleetmetrics.Collect(r, tc.opts)
					return nil
				}))
				locked += time.Since(start)
				w.n = 0
				require.NoError(b, snap.Write(&w, format))
				require.Equal(b, tc.opts.Aggregate, snap.Aggregated())
			}
			b.ReportMetric(float64(locked.Microseconds())/float64(b.N)/1000, "locked-ms/op")
			b.ReportMetric(float64(w.n), "bytes/scrape")
		})
	}
}
