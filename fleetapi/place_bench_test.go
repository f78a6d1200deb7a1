package fleetapi

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
)

// BenchmarkPlace measures one Place over 10 000 fleets in 20 clusters (a
// half match the selector, a policy of three rules), through the Service
// with a view fresh enough to answer without a sync: the reading, the
// ranking of every matching fleet and the answer. It reports each call's
// p50 and p99.
func BenchmarkPlace(b *testing.B) {
	w := newWorld(b)
	for c := range 20 {
		w.Mem.PutCluster(fleet.ClusterDocument{Cluster: fmt.Sprintf("c%02d", c), Labels: map[string]string{"region": []string{"eu", "us", "ap", "sa"}[c%4]},
			SnapshotVersion: fleet.Version{Term: 1, Seq: w.Next()}, SnapshotParts: 1, IngestedAt: w.Clock.Now(), HeartbeatAt: w.Clock.Now(),
			AllocatorEndpoint: fmt.Sprintf("c%02d.example:443", c), Totals: fleet.DocStatus{Counters: map[string]fleet.DocAggregate{"rooms": {}}}})
	}
	for i := range 10000 {
		d := doc(fmt.Sprintf("c%02d", i%20), "games", fmt.Sprintf("f%05d", i),
			map[string]string{"platform": []string{"pc", "ps5"}[i%2], "app.kubernetes.io/version": "1.42"},
			int64(i%10), map[string]fleet.DocAggregate{"rooms": {Capacity: 10, Count: int64(i % 7), Available: 10 - int64(i%7)}})
		d.Status.Replicas = 10
		w.Put(d)
	}
	svc := w.service(Options{MaxStaleness: time.Hour, ClusterRefresh: time.Hour})
	policy, err := ParsePolicy([]string{"region=eu:0:100", "region=us:1:100", ":2:1"})
	require.NoError(b, err)
	req := PlaceRequest{Filter: Query{Selector: mustSelector(b, "platform=pc")}, Need: Need{Counter: "rooms", CounterAvailable: 2}, Count: 3, Policy: &policy}
	p, err := svc.Place(b.Context(), req) // the first sync
	require.NoError(b, err)
	require.Len(b, p.Placements, 3)
	b.ReportAllocs()
	var took []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if _, err := svc.Place(b.Context(), req); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkPlacementSpread is 20 independent matchmakers each placing 100
// matches a second against 10 eligible fleets of equal capacity (5 000
// ready game servers each), for 10 s of simulated time, through one
// Service: each placement is allocated at once on its fleet, and each
// fleet's publisher reports its ready game servers once a second (the
// publisher's coalescing, Firestore's one write per document per second),
// the fleets a tenth of a second apart. pick=place takes Place's first
// candidate; pick=deterministic takes the most ready fleet, ties by name,
// as Inform ordered by ready (and fleetwatch.Pick before Place) answers.
// It reports the allocation imbalance — the most-loaded fleet's
// allocations over the mean — in each second (their mean and the worst)
// and over the whole run.
func BenchmarkPlacementSpread(b *testing.B) {
	for _, pick := range []string{"place", "deterministic"} {
		b.Run("pick="+pick, func(b *testing.B) {
			var perSecond, worst, run []float64
			for b.Loop() {
				s := spread(b, pick == "place")
				perSecond, worst, run = append(perSecond, s.meanPerSecond), append(worst, s.worstSecond), append(run, s.run)
			}
			b.ReportMetric(mean(perSecond), "imbalance-per-s")
			b.ReportMetric(slices.Max(worst), "imbalance-worst-s")
			b.ReportMetric(mean(run), "imbalance-run")
		})
	}
}

type spreadResult struct{ meanPerSecond, worstSecond, run float64 }

func spread(b *testing.B, place bool) spreadResult {
	const (
		matchmakers = 20
		perSecond   = 100
		fleets      = 10
		capacity    = 5000
		seconds     = 10
		tick        = time.Second / perSecond
	)
	w := newWorld(b)
	clusters := []string{"pc", "ps5", "xbox"}
	ready := make([]int64, fleets)
	report := func(i int) {
		d := doc(clusters[i%3], "games", fmt.Sprintf("f%02d", i), map[string]string{"game": "x"}, ready[i], map[string]fleet.DocAggregate{})
		d.Spec.Replicas, d.Status.Replicas = capacity, capacity
		w.Put(d)
	}
	for i := range fleets {
		ready[i] = capacity
		report(i)
	}
	svc := w.service(Options{})
	index := map[string]int{}
	for i := range fleets {
		index[fmt.Sprintf("f%02d", i)] = i
	}
	choose := func() int {
		if place {
			p, err := svc.Place(b.Context(), PlaceRequest{})
			require.NoError(b, err)
			require.NotEmpty(b, p.Placements)
			return index[p.Placements[0].Name]
		}
		l, err := svc.ListFleets(b.Context(), Query{OrderBy: OrderByReady, MinReady: 1, PageSize: 1})
		require.NoError(b, err)
		require.NotEmpty(b, l.Items)
		return index[l.Items[0].Name]
	}
	allocs := make([][]float64, seconds)
	for s := range seconds {
		allocs[s] = make([]float64, fleets)
		for t := range perSecond {
			w.Clock.Step(tick)
			for range matchmakers {
				i := choose()
				ready[i]--
				allocs[s][i]++
			}
			// Fleet i reports at every second's i-th tenth.
			if t%(perSecond/fleets) == 0 {
				report(t / (perSecond / fleets))
			}
		}
	}
	var out spreadResult
	total := make([]float64, fleets)
	for _, a := range allocs {
		imb := imbalance(a)
		out.meanPerSecond += imb / seconds
		out.worstSecond = max(out.worstSecond, imb)
		for i, n := range a {
			total[i] += n
		}
	}
	out.run = imbalance(total)
	return out
}

// imbalance is the most-loaded fleet's allocations over the mean.
func imbalance(allocs []float64) float64 {
	return slices.Max(allocs) / (sum(allocs) / float64(len(allocs)))
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

func mean(v []float64) float64 { return sum(v) / float64(len(v)) }

func mustSelector(tb testing.TB, s string) labels.Selector {
	tb.Helper()
	sel, err := labels.Parse(s)
	require.NoError(tb, err)
	return sel
}
