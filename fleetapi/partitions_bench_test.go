package fleetapi

import (
	"fmt"
	"net/url"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetview"
)

// BenchmarkPartitions1M answers a studio of 1 000 000 fleets (100
// clusters × 10 000 typical fleets) as one view, through Partitions over
// the partitions whose fleets fit VIEW_MAX_BYTES (each loaded on its own,
// as its instance loads it, and asked as a partition behind its URL is:
// its request parsed again, page token included). It measures the live
// heap of the largest partition; the p99 of a merged GET
// /v1/fleets?selector=tier=gold&pageSize=100 (100 fleets match, one in
// each cluster) and of a Place among them (count=3, a policy of three
// rules); and walks every page of every fleet in name order, checking
// that the walk is the single view's: each fleet once, none missing, in
// document ID order.
func BenchmarkPartitions1M(b *testing.B) {
	const clusters, perCluster, requests = 100, 10_000, 1000
	for b.Loop() {
		src := newGenerated(clusters, perCluster)
		src.gold = perCluster
		clusterBytes := fleetview.DocBytes(typicalFleet(src.clusters[0], 0, src.at)) * perCluster
		held := partitionsOf(src.clusters, clusterBytes, DefaultMaxViewBytes)
		var parts []Partition
		var worst uint64
		for i, h := range held {
			svc, heap, _ := viewOf(b, src.partition(h), Options{MaxStaleness: time.Hour, ClusterRefresh: time.Hour, StaleAfter: time.Hour, Clusters: h})
			worst = max(worst, heap)
			parts = append(parts, Partition{Name: fmt.Sprint("p", i), Clusters: h, API: wire{svc}})
		}
		all, err := NewPartitions(parts, PartitionsOptions{Timeout: time.Minute})
		require.NoError(b, err)
		ctx := b.Context()

		v, err := url.ParseQuery("pageSize=100&selector=tier%3Dgold")
		require.NoError(b, err)
		q, err := ParseQuery(v)
		require.NoError(b, err)
		policy, err := ParsePolicy([]string{"region=europe-west1:0:100", "region=us:1:100", ":2:1"})
		require.NoError(b, err)
		place := PlaceRequest{Filter: q, Need: Need{Counter: "rooms", CounterAvailable: 2}, Count: 3, Policy: &policy}
		var list, placed []time.Duration
		for range requests {
			start := time.Now()
			l, err := all.ListFleets(ctx, q)
			list = append(list, time.Since(start))
			require.NoError(b, err)
			require.Len(b, l.Items, 100)
			require.Equal(b, 100, l.TotalSize)
			start = time.Now()
			p, err := all.Place(ctx, place)
			placed = append(placed, time.Since(start))
			require.NoError(b, err)
			require.Len(b, p.Placements, 3)
			require.Equal(b, 100, p.Eligible)
		}

		// Every fleet, page by page: the single view's order is document
		// ID order, every live fleet of a fresh cluster once.
		walk := NewQuery()
		walk.PageSize = MaxPageSize
		want := make([]string, 0, clusters*perCluster)
		for _, c := range src.clusters {
			for i := range perCluster {
				want = append(want, typicalFleet(c, i, src.at).DocID)
			}
		}
		slices.Sort(want)
		got := make([]string, 0, len(want))
		pages := 0
		start := time.Now()
		for {
			l, err := all.ListFleets(ctx, walk)
			require.NoError(b, err)
			require.Equal(b, len(want), l.TotalSize)
			pages++
			for _, f := range l.Items {
				got = append(got, fleet.Key{Cluster: f.Cluster, Namespace: f.Namespace, Name: f.Name}.DocID())
			}
			if l.NextPageToken == "" {
				break
			}
			walk, err = walk.Next(l.NextPageToken)
			require.NoError(b, err)
		}
		walkTook := time.Since(start)
		require.Equal(b, len(want), len(got), "every fleet once")
		require.True(b, slices.Equal(want, got), "the single view's order")

		slices.Sort(list)
		slices.Sort(placed)
		b.ReportMetric(float64(len(held)), "partitions")
		b.ReportMetric(float64(worst)/(1<<20), "partition-heap-MiB")
		b.ReportMetric(float64(list[len(list)*99/100].Microseconds())/1000, "selector-p99-ms")
		b.ReportMetric(float64(list[len(list)/2].Microseconds())/1000, "selector-p50-ms")
		b.ReportMetric(float64(placed[len(placed)*99/100].Microseconds())/1000, "place-p99-ms")
		b.ReportMetric(float64(placed[len(placed)/2].Microseconds())/1000, "place-p50-ms")
		b.ReportMetric(float64(pages), "walk-pages")
		b.ReportMetric(walkTook.Seconds(), "walk-s")
		runtime.KeepAlive(parts)
	}
}
