package fleetapi

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetview"
)

// instanceBytes is what a query instance is deployed with (Terraform:
// 512Mi), and viewHeapGoal the live heap its view may take: half of it.
// The collector needs room above what is live: deployed with
// GOMEMLIMIT=460MiB, it collects sooner the nearer the heap is to it, and
// with half the instance live it still has 200 MiB of garbage between
// collections; the streams, the feed and the requests need the rest.
const (
	instanceBytes = 512 << 20
	viewHeapGoal  = instanceBytes / 2
)

// generated is a Source that makes a deployment's documents as it reads
// them — clusters × fleetsPerCluster typical fleets — reading those of
// only's clusters when set, as firestoredb.Partition reads its clusters':
// each document is allocated afresh, as Firestore's decoding allocates it,
// so that a view's heap is its own.
type generated struct {
	clusters         []string
	fleetsPerCluster int
	only             []string
	at               time.Time
	// gold, when set: every gold-th fleet of a cluster (from its first)
	// carries the label tier=gold, the selector a selective query asks.
	gold int
}

func newGenerated(clusters, fleetsPerCluster int) *generated {
	g := &generated{fleetsPerCluster: fleetsPerCluster, at: time.Now()}
	for c := range clusters {
		g.clusters = append(g.clusters, fmt.Sprintf("%s-%s-%02d", []string{"pc", "ps5", "xbox", "switch"}[c%4], []string{"eu", "us", "ap"}[c%3], c))
	}
	return g
}

func (g *generated) partition(clusters []string) *generated {
	out := *g
	out.only = clusters
	return &out
}

func (g *generated) scope() []string {
	if g.only != nil {
		return g.only
	}
	return g.clusters
}

// typicalFleet is a fleet as a studio runs them: four labels, a counter
// and a list, a Buffer autoscaler, its rollout settled.
func typicalFleet(cluster string, i int, at time.Time) *fleet.Document {
	name := fmt.Sprintf("game-%s-%05d", []string{"ranked", "casual", "custom"}[i%3], i)
	k := fleet.Key{Cluster: cluster, Namespace: "games", Name: name}
	platform, _, _ := strings.Cut(cluster, "-")
	return &fleet.Document{
		Cluster: strings.Clone(cluster), Namespace: strings.Clone("games"), Name: name,
		Version: fleet.Version{Term: at.UnixMilli(), Seq: int64(i + 1)}, DocID: k.DocID(), DocIDHash: fleet.IDHash(k.DocID()),
		FeedShard: fleet.FeedShard(k.DocID(), fleet.MaxFeedShards), UID: fmt.Sprintf("%08x-4b8e-9d0a-%012x", i, i*7919),
		Labels: map[string]string{
			strings.Clone("platform"): strings.Clone(platform), strings.Clone("app.kubernetes.io/version"): strings.Clone("1.42.0"),
			strings.Clone("region"): strings.Clone("europe-west1"), strings.Clone("mode"): strings.Clone([]string{"ranked", "casual", "custom"}[i%3]),
		},
		Spec: &fleet.Spec{Replicas: 10, Scheduling: strings.Clone("Packed"), StrategyType: strings.Clone("RollingUpdate")},
		Status: &fleet.DocStatus{Replicas: 10, ReadyReplicas: 6, AllocatedReplicas: 4,
			Counters: map[string]fleet.DocAggregate{strings.Clone("rooms"): {Count: 12, Capacity: 40, Available: 28}},
			Lists:    map[string]fleet.DocAggregate{strings.Clone("players"): {Count: 30, Capacity: 100, Available: 70}}},
		Autoscalers: []fleet.Autoscaler{{Name: name + "-autoscaler", Policy: fleet.AutoscalerPolicy{Type: strings.Clone("Buffer"), BufferSize: strings.Clone("5"), MinReplicas: 2, MaxReplicas: 50}}},
		Publisher:   fleet.Publisher{ID: strings.Clone("fleetcast-publisher-7d9f8c5b6-x2k4q"), Version: strings.Clone("v0.4.0")},
		ObservedAt:  at, IngestedAt: at, WrittenAt: at,
	}
}

func (g *generated) LiveFleets(_ context.Context, each func(*fleet.Document)) ([]string, error) {
	for _, c := range g.scope() {
		for i := range g.fleetsPerCluster {
			d := typicalFleet(c, i, g.at)
			if g.gold > 0 && i%g.gold == 0 {
				d.Labels[strings.Clone("tier")] = strings.Clone("gold")
			}
			each(d)
		}
	}
	return nil, nil
}

func (g *generated) Clusters(context.Context) (fleet.Page[fleet.ClusterDocument], error) {
	var p fleet.Page[fleet.ClusterDocument]
	for _, c := range g.scope() {
		p.Docs = append(p.Docs, &fleet.ClusterDocument{Cluster: c, Labels: map[string]string{"region": "europe-west1"},
			SnapshotVersion: fleet.Version{Term: 1, Seq: 1}, SnapshotParts: 1, HeartbeatAt: g.at, IngestedAt: time.Now(),
			FleetCount: int64(g.fleetsPerCluster), WrittenAt: g.at,
			Totals: fleet.DocStatus{Counters: map[string]fleet.DocAggregate{"rooms": {}}, Lists: map[string]fleet.DocAggregate{"players": {}}}})
	}
	return p, nil
}

func (g *generated) FleetsWrittenSince(context.Context, time.Time) (fleet.Page[fleet.Document], error) {
	return fleet.Page[fleet.Document]{}, nil
}

func (g *generated) ClustersWrittenSince(context.Context, time.Time) (fleet.Page[fleet.ClusterDocument], error) {
	return fleet.Page[fleet.ClusterDocument]{}, nil
}

// viewOf loads a Service's view over src and returns it, with the live heap
// it takes (after a collection, before and after) and how long its load took.
func viewOf(tb testing.TB, src Source, opts Options) (svc *Service, heap uint64, took time.Duration) {
	tb.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	svc = NewService(src, opts)
	require.NoError(tb, svc.Sync(tb.Context()))
	took = time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	return svc, after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc), took
}

// partitionsOf splits clusters into partitions of at most
// MaxClusters (Firestore's "in") whose fleets' docBytes fit maxBytes.
func partitionsOf(clusters []string, clusterBytes, maxBytes int) [][]string {
	per := max(1, min(MaxClusters, maxBytes/clusterBytes))
	var out [][]string
	for c := range slices.Chunk(clusters, per) {
		out = append(out, c)
	}
	return out
}

// BenchmarkViewMemory loads query views in memory, of typical fleets, and
// measures the live heap each takes (after a collection): the reference
// deployment's 10 000 fleets in one view; and a studio a hundred times
// that, 100 clusters × 10 000 fleets = 1 M fleets, first in one view as
// deployed (VIEW_MAX_BYTES, which leaves out the clusters past it), then
// split into the partitions (VIEW_CLUSTERS) whose fleets fit
// VIEW_MAX_BYTES, each loaded on its own as its instance would load it. It
// reports the heap per fleet, the largest partition's heap and fleets
// against viewHeapGoal, and what one view of every fleet would take
// (VIEW_MAX_BYTES lifted).
func BenchmarkViewMemory(b *testing.B) {
	b.Run("fleets=10000", func(b *testing.B) {
		for b.Loop() {
			src := newGenerated(10, 1000)
			svc, heap, took := viewOf(b, src, Options{MaxStaleness: time.Hour})
			b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
			b.ReportMetric(float64(heap)/10000, "heap-B/fleet")
			b.ReportMetric(float64(svc.ViewBytes())/10000, "docBytes-B/fleet")
			b.ReportMetric(took.Seconds(), "load-s")
			runtime.KeepAlive(svc)
		}
	})
	b.Run("fleets=1000000", func(b *testing.B) {
		for b.Loop() {
			const clusters, perCluster = 100, 10000
			src := newGenerated(clusters, perCluster)
			clusterBytes := fleetview.DocBytes(typicalFleet(src.clusters[0], 0, src.at)) * perCluster

			// One view, as deployed: VIEW_MAX_BYTES leaves clusters out.
			one, heapOne, _ := viewOf(b, src, Options{MaxStaleness: time.Hour})
			cl, err := one.ListClusters(b.Context())
			require.NoError(b, err)
			over := 0
			for _, c := range cl.Items {
				if c.OverBudget {
					over++
				}
			}
			b.ReportMetric(float64(over), "one-view-clusters-left-out")
			b.ReportMetric(float64(heapOne)/(1<<20), "one-view-heap-MiB")
			one = nil

			// Every fleet in one view, VIEW_MAX_BYTES lifted: what a
			// single instance would have to hold.
			all, heapAll, tookAll := viewOf(b, src, Options{MaxStaleness: time.Hour, MaxViewBytes: 1 << 40})
			b.ReportMetric(float64(heapAll)/(1<<20), "all-heap-MiB")
			b.ReportMetric(float64(heapAll)/(clusters*perCluster), "heap-B/fleet")
			b.ReportMetric(float64(all.ViewBytes())/(clusters*perCluster), "docBytes-B/fleet")
			b.ReportMetric(tookAll.Seconds(), "all-load-s")
			all = nil

			// The partitions.
			parts := partitionsOf(src.clusters, clusterBytes, DefaultMaxViewBytes)
			var worst uint64
			var worstFleets int
			var worstTook time.Duration
			for _, p := range parts {
				svc, heap, took := viewOf(b, src.partition(p), Options{MaxStaleness: time.Hour, Clusters: p})
				l, err := svc.ListFleets(b.Context(), Query{PageSize: 1})
				require.NoError(b, err)
				require.EqualValues(b, len(p)*perCluster, l.TotalSize, "a partition holds all its fleets")
				if heap > worst {
					worst, worstFleets = heap, int(l.TotalSize)
				}
				worstTook = max(worstTook, took)
			}
			b.ReportMetric(float64(len(parts)), "partitions")
			b.ReportMetric(float64(worstFleets), "partition-fleets")
			b.ReportMetric(float64(worst)/(1<<20), "partition-heap-MiB")
			b.ReportMetric(float64(viewHeapGoal)/(1<<20), "goal-heap-MiB")
			b.ReportMetric(worstTook.Seconds(), "partition-load-s")
		}
	})
}
