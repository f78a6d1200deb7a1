package fleetapi

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

// TestMergedPartitionsPageAsOneView: the fleets of four clusters, in one
// view and in three partitions of them (one stale cluster, one with no
// document); random queries (selectors, each order, with staleness or
// without, clusters named or not, pages of any size) walked page by page,
// Partitions asking each partition its narrowed query at the merged
// answer's token, as a partition behind its URL parses it: the same fleets in the same order, none twice or missing, the same
// totals and the same number of pages.
func TestMergedPartitionsPageAsOneView(t *testing.T) {
	w := newWorld(t)
	rng := rand.New(rand.NewPCG(5, 1))
	clusters := []string{"pc", "ps5", "xbox", "nodoc"}
	w.Heartbeat("pc", 0)
	w.Heartbeat("ps5", 0)
	w.Heartbeat("xbox", time.Hour) // stale; nodoc has no document: stale too
	for i := range 300 {
		labels := map[string]string{"platform": []string{"pc", "ps5"}[rng.IntN(2)]}
		if rng.IntN(4) == 0 {
			labels["tier"] = strconv.Itoa(rng.IntN(3))
		}
		w.Put(doc(clusters[rng.IntN(len(clusters))], "games", fmt.Sprintf("f%03d", i), labels, rng.Int64N(5),
			map[string]fleet.DocAggregate{"rooms": {Capacity: 10, Count: rng.Int64N(11), Available: rng.Int64N(11)}}))
	}
	// Loaded once: the fleets do not change during the walks.
	loaded := func(o Options) *Service {
		o.MaxStaleness = time.Hour
		s := w.service(o)
		require.NoError(t, s.Sync(t.Context()))
		return s
	}
	one := loaded(Options{})
	held := [][]string{{"pc"}, {"ps5", "nodoc"}, {"xbox"}}
	var parts []Partition
	for i, h := range held {
		parts = append(parts, Partition{Name: fmt.Sprint(i), Clusters: h, API: wire{loaded(Options{Clusters: h})}})
	}
	all, err := NewPartitions(parts, PartitionsOptions{})
	require.NoError(t, err)
	for range 200 {
		v := url.Values{"pageSize": {strconv.Itoa(1 + rng.IntN(40))}}
		switch rng.IntN(3) {
		case 1:
			v.Set("orderBy", OrderByReady)
		case 2:
			v.Set("orderBy", OrderByAvailable)
			v.Set("counter", "rooms")
		}
		switch rng.IntN(4) {
		case 1:
			v.Set("selector", "platform=pc")
		case 2:
			v.Set("selector", "tier")
		case 3:
			v.Set("selector", "tier!=1")
		}
		if rng.IntN(2) == 0 {
			v.Set("includeStale", "true")
		}
		// Some clusters named: each partition is asked of its own.
		for _, c := range clusters {
			if rng.IntN(3) == 0 {
				v.Add("cluster", c)
			}
		}
		q, err := ParseQuery(v)
		require.NoError(t, err)
		want, wantPages, wantTotal := walk(t, one, q)
		got, gotPages, total := walk(t, all, q)
		require.Equal(t, want, got, "%v", v)
		require.Equal(t, wantPages, gotPages, "%v", v)
		require.Equal(t, wantTotal, total, "%v", v)
	}
}

// walk reads every page of q from api: the fleets' IDs in order, the
// pages, and their total (every page's). No answer may name a cluster
// unavailable.
func walk(t *testing.T, api API, q Query) (ids []string, pages, total int) {
	t.Helper()
	for next := q; ; pages++ {
		l, err := api.ListFleets(t.Context(), next)
		require.NoError(t, err)
		require.Empty(t, l.UnavailableClusters)
		if pages == 0 {
			total = l.TotalSize
		}
		require.Equal(t, total, l.TotalSize, "every page's total")
		for _, f := range l.Items {
			ids = append(ids, fleetID(f))
		}
		if l.NextPageToken == "" {
			return ids, pages + 1, total
		}
		next, err = q.Next(l.NextPageToken)
		require.NoError(t, err)
	}
}

// TestMergedPartitionsAnswerLabelsAndClustersAsOneView: the clusters, a
// cluster by name and each label's values of the partitions, merged
// (Partitions), are one view's.
func TestMergedPartitionsAnswerLabelsAndClustersAsOneView(t *testing.T) {
	w := newWorld(t)
	rng := rand.New(rand.NewPCG(7, 3))
	clusters := []string{"pc", "ps5", "xbox", "nodoc"}
	w.Heartbeat("pc", 0)
	w.Heartbeat("ps5", 0)
	w.Heartbeat("xbox", time.Hour)
	for i := range 200 {
		labels := map[string]string{"platform": []string{"pc", "ps5", "switch"}[rng.IntN(3)]}
		if rng.IntN(3) == 0 {
			labels["version"] = []string{"1.41", "1.42"}[rng.IntN(2)]
		}
		w.Put(doc(clusters[rng.IntN(len(clusters))], "games", fmt.Sprintf("f%03d", i), labels, rng.Int64N(5), nil))
	}
	one := w.service(Options{})
	all, err := NewPartitions([]Partition{
		{Name: "a", Clusters: []string{"pc", "xbox"}, API: wire{w.service(Options{Clusters: []string{"pc", "xbox"}})}},
		{Name: "b", Clusters: []string{"ps5", "nodoc"}, API: wire{w.service(Options{Clusters: []string{"ps5", "nodoc"}})}},
	}, PartitionsOptions{})
	require.NoError(t, err)
	ctx := t.Context()
	want, err := one.ListClusters(ctx)
	require.NoError(t, err)
	got, err := all.ListClusters(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)
	for _, c := range []string{"pc", "xbox", "ps5"} {
		want, err := one.GetCluster(ctx, c)
		require.NoError(t, err)
		got, err := all.GetCluster(ctx, c)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, key := range []string{"platform", "version", "nope"} {
		for _, stale := range []bool{false, true} {
			want, err := one.LabelValues(ctx, key, stale)
			require.NoError(t, err)
			got, err := all.LabelValues(ctx, key, stale)
			require.NoError(t, err)
			require.Equal(t, want, got, "%s, stale %v", key, stale)
		}
	}
}
