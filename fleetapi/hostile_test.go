package fleetapi

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleetview"
)

// Tests of what one cluster's data may do to answers about the others:
// every cluster publishes its own numbers, and the read side sums them.

// TestSumsOverClustersSaturate: a cluster reporting int64's largest
// number of ready game servers does not wrap another's figures negative
// in /v1/labels.
func TestSumsOverClustersSaturate(t *testing.T) {
	w := newWorld(t)
	liar := doc("pc", "games", "liar", map[string]string{"version": "1.42"}, math.MaxInt64, nil)
	liar.Status.AllocatedReplicas = math.MaxInt64
	w.Put(liar)
	w.Put(doc("ps5", "games", "honest", map[string]string{"version": "1.42"}, 5, nil))
	svc := w.service(Options{})

	lv, err := svc.LabelValues(t.Context(), "version", false)
	require.NoError(t, err)
	require.Len(t, lv.Values, 1)
	assert.Equal(t, int64(math.MaxInt64), lv.Values[0].ReadyReplicas, "saturated, not wrapped")
	assert.Equal(t, int64(math.MaxInt64), lv.Values[0].AllocatedReplicas)
	assert.Equal(t, int64(2), lv.Values[0].Fleets)
}

// TestAClusterPastTheViewsBudgetIsLeftOut: a cluster that creates fleets
// without end makes the view exceed its budget in bytes: that cluster,
// the one taking the most, leaves the view (answers, watches) and is
// reported stale and over budget, while the others are answered whole; the
// view stays within its bound; and the next full load, once the cluster
// shrank, takes it back.
func TestAClusterPastTheViewsBudgetIsLeftOut(t *testing.T) {
	w := newWorld(t)
	for i := range 5 {
		w.Put(doc("pc", "games", fmt.Sprintf("pc-%d", i), nil, 1, nil))
	}
	per := fleetview.DocBytes(doc("xbox", "games", "hog-0000", nil, 1, nil))
	svc := w.service(Options{MaxViewBytes: 40 * per, Resync: time.Hour, TombstoneRetention: 24 * time.Hour})
	require.NoError(t, svc.Sync(t.Context()))
	c := newWatcher(t, svc, NewQuery())
	c.step(false, -1)

	for i := range 60 {
		w.Put(doc("xbox", "games", fmt.Sprintf("hog-%04d", i), nil, 1, nil))
	}
	w.Settle()
	require.NoError(t, svc.Sync(t.Context()))
	assert.Equal(t, []string{"pc/games/pc-0", "pc/games/pc-1", "pc/games/pc-2", "pc/games/pc-3", "pc/games/pc-4"}, all(t, svc, NewQuery()))
	q := NewQuery()
	q.IncludeStale = true
	assert.Len(t, all(t, svc, q), 5, "the hog's fleets are not held at all")
	cl, err := svc.GetCluster(t.Context(), "xbox")
	require.NoError(t, err)
	assert.True(t, cl.Stale)
	assert.True(t, cl.OverBudget)
	assert.LessOrEqual(t, svc.ViewBytes(), 40*per)
	c.step(false, -1)
	assert.Equal(t, want(t, svc, c.q), c.fleets, "a watch follows")
	assert.Equal(t, true, c.clusters["xbox"].Stale)

	// The hog shrinks; the next full load takes it back.
	for i := 10; i < 60; i++ {
		w.Remove("xbox", "games", fmt.Sprintf("hog-%04d", i))
	}
	w.Clock.Step(2 * time.Hour)
	w.Heartbeat("xbox", 0)
	w.Heartbeat("pc", 0)
	w.Heartbeat("ps5", 0)
	require.NoError(t, svc.Sync(t.Context()))
	assert.Len(t, all(t, svc, NewQuery()), 15)
	cl, err = svc.GetCluster(t.Context(), "xbox")
	require.NoError(t, err)
	assert.False(t, cl.OverBudget)
}

// TestALoadHoldsNoMoreThanTheView: a new instance loads a store where one
// cluster is over budget: it answers the others, and reports that one
// stale and over budget (fleetview's TestALoadHoldsNoMoreThanTheView
// shows the load never holds more than the view may).
func TestALoadHoldsNoMoreThanTheView(t *testing.T) {
	per := fleetview.DocBytes(doc("xbox", "games", "hog-0000", nil, 1, nil))
	// A new instance loads a store where one cluster is over budget.
	w := newWorld(t)
	w.Put(doc("pc", "games", "pc-0", nil, 1, nil))
	for i := range 100 {
		w.Put(doc("xbox", "games", fmt.Sprintf("hog-%04d", i), nil, 1, nil))
	}
	svc := w.service(Options{MaxViewBytes: 40 * per})
	assert.Equal(t, []string{"pc/games/pc-0"}, all(t, svc, NewQuery()))
	cl, err := svc.GetCluster(t.Context(), "xbox")
	require.NoError(t, err)
	assert.True(t, cl.Stale && cl.OverBudget)
}
