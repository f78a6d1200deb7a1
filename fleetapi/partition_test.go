package fleetapi

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

// TestAPartitionHoldsItsClustersOnly: a Service whose view holds the
// partition of clusters pc and ps5 (Options.Clusters) keeps no document
// of another cluster, even from a Source that returns them (the memory
// store is no partition), in its first load and in its syncs after; and
// every request that names another cluster is refused, naming the
// partition, where an empty answer would say that cluster has no fleets.
func TestAPartitionHoldsItsClustersOnly(t *testing.T) {
	w := newWorld(t)
	for _, c := range []string{"pc", "ps5", "xbox"} {
		w.Put(doc(c, "games", "a", map[string]string{"platform": c}, 3, nil))
	}
	svc := w.service(Options{Clusters: []string{"ps5", "pc", "ps5"}})
	ctx := t.Context()

	l, err := svc.ListFleets(ctx, Query{})
	require.NoError(t, err)
	assert.Equal(t, []string{"pc/games/a", "ps5/games/a"}, names(l.Items), "the first load")
	w.Settle()
	w.Put(doc("xbox", "games", "b", nil, 1, nil))
	w.Put(doc("pc", "games", "b", nil, 1, nil))
	l, err = svc.ListFleets(ctx, Query{})
	require.NoError(t, err)
	assert.Equal(t, []string{"pc/games/a", "pc/games/b", "ps5/games/a"}, names(l.Items), "a sync")
	cl, err := svc.ListClusters(ctx)
	require.NoError(t, err)
	var clusters []string
	for _, c := range cl.Items {
		clusters = append(clusters, c.Cluster)
	}
	assert.Equal(t, []string{"pc", "ps5"}, clusters)

	refused := func(t *testing.T, err error) {
		t.Helper()
		var e *Error
		require.True(t, errors.As(err, &e), "%v", err)
		assert.Equal(t, InvalidArgument, e.Code)
		assert.Equal(t, "cluster", e.Param)
		assert.Contains(t, e.Message, `cluster "xbox" is not in this instance's partition (clusters pc, ps5)`)
	}
	t.Run("a fleet list naming it", func(t *testing.T) {
		_, err := svc.ListFleets(ctx, Query{Clusters: []string{"pc", "xbox"}})
		refused(t, err)
	})
	t.Run("its fleet", func(t *testing.T) {
		_, err := svc.GetFleet(ctx, fleet.Key{Cluster: "xbox", Namespace: "games", Name: "a"})
		refused(t, err)
	})
	t.Run("the cluster", func(t *testing.T) {
		_, err := svc.GetCluster(ctx, "xbox")
		refused(t, err)
	})
	t.Run("a placement", func(t *testing.T) {
		_, err := svc.Place(ctx, PlaceRequest{Filter: Query{Clusters: []string{"xbox"}}, Count: 1})
		refused(t, err)
	})
	t.Run("a watch", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		refused(t, svc.Watch(wctx, Query{Clusters: []string{"xbox"}}, "", func(Event) error { return nil }))
	})
	t.Run("its own clusters are answered", func(t *testing.T) {
		f, err := svc.GetFleet(ctx, fleet.Key{Cluster: "ps5", Namespace: "games", Name: "a"})
		require.NoError(t, err)
		assert.Equal(t, "ps5", f.Cluster)
		l, err := svc.ListFleets(ctx, Query{Clusters: []string{"pc"}})
		require.NoError(t, err)
		assert.Len(t, l.Items, 2)
	})
}
