package fleetview

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
)

// checking is a listening Memory that is also a Checker: its digests are
// the aggregation's (the live fleets that carry their ID), and it counts
// the clusters read again.
type checking struct {
	fleetapitest.Listening
	reloads map[string]int
}

func (c *checking) ClusterDigest(ctx context.Context, cluster string) (count, sum int64, err error) {
	_, err = c.LiveFleets(ctx, func(d *fleet.Document) {
		if d.Cluster == cluster && d.DocID != "" {
			count, sum = count+1, sum+d.DocIDHash
		}
	})
	return count, sum, err
}

func (c *checking) ClusterFleets(ctx context.Context, cluster string, each func(*fleet.Document)) ([]string, error) {
	c.reloads[cluster]++
	return c.LiveFleets(ctx, func(d *fleet.Document) {
		if d.Cluster == cluster {
			each(d)
		}
	})
}

func identified(d *fleet.Document) *fleet.Document {
	d.DocID = d.Key().DocID()
	d.DocIDHash = fleet.IDHash(d.DocID)
	return d
}

// TestACheckReloadsAClusterThatDriftedAndNoOther: a view that follows a
// Checker compares each cluster with the store every CheckInterval. A
// fleet gone from the store without the view hearing of it (here its
// tombstone expired unheard) makes its cluster disagree; at the second
// check in a row the cluster is read again and the fleet leaves the view,
// which no older state of it brings back. A disagreement that passes by
// the next check (a write not yet delivered) reads nothing again, and the
// other clusters, one holding a document the view leaves out, are never
// read again.
func TestACheckReloadsAClusterThatDriftedAndNoOther(t *testing.T) {
	w := newWorld(t)
	src := &checking{Listening: fleetapitest.Listening{Memory: w.Mem}, reloads: map[string]int{}}
	e := w.engine(src, Options{CheckInterval: time.Minute, StaleAfter: 24 * time.Hour, TombstoneRetention: 48 * time.Hour})
	// ps5 holds a fleet no answer can hold: the view leaves it out, and
	// counts it as the store does.
	for _, d := range []*fleet.Document{doc("pc", "games", "a", nil, 1), doc("pc", "games", "b", nil, 1), doc("ps5", "games", "c", nil, 1),
		doc("ps5", "games", "bad", map[string]string{"platform": "\xff"}, 1)} {
		w.Put(identified(d))
	}
	read(t, e)
	stop, err := e.Watching()
	require.NoError(t, err)
	defer stop()
	require.Eventually(t, func() bool { return w.Mem.Listeners() == 1 }, 5*time.Second, time.Millisecond)
	check := func() {
		t.Helper()
		w.Clock.Step(time.Minute)
		require.NoError(t, e.Sync(t.Context()))
	}
	idOf := func(name string) string { return key("pc", "games", name) }

	// A write held back from visibility: the store's digest and the
	// view's disagree once, and agree again by the next check.
	commit := w.Mem.HoldFleet(*identified(doc("pc", "games", "late", nil, 1)))
	w.Mem.Expire(fleet.Key{Cluster: "pc", Namespace: "games", Name: "a"})
	check()
	_, held := e.Current().Fleet(idOf("a"))
	assert.True(t, held, "one disagreement reads nothing again")
	commit()
	require.Eventually(t, func() bool { _, ok := e.Current().Fleet(idOf("late")); return ok }, 5*time.Second, time.Millisecond)
	check()
	_, held = e.Current().Fleet(idOf("a"))
	assert.False(t, held, "the second disagreement in a row reads the cluster again: a is gone")
	assert.Equal(t, map[string]int{"pc": 1}, src.reloads, "pc alone is read again, once")
	for _, name := range []string{"b", "late"} {
		_, held := e.Current().Fleet(idOf(name))
		assert.True(t, held, name)
	}
	stale := identified(doc("pc", "games", "a", nil, 1))
	stale.Version = fleet.Version{Term: 1, Seq: 1}
	e.heard(fleet.Page[fleet.Document]{Docs: []*fleet.Document{stale}}, w.Clock.Now())
	_, held = e.Current().Fleet(idOf("a"))
	assert.False(t, held, "an older state does not bring it back")
}

// TestAPartitionIgnoresOtherClustersOnTheFeed: the change feed carries
// every cluster's documents; a partition's view takes its own, and
// neither holds nor remembers the others'.
func TestAPartitionIgnoresOtherClustersOnTheFeed(t *testing.T) {
	w := newWorld(t)
	e := w.engine(w.Mem, Options{Clusters: []string{"pc"}})
	read(t, e)
	mine, theirs := identified(doc("pc", "games", "a", nil, 1)), identified(doc("ps5", "games", "b", nil, 1))
	e.heard(fleet.Page[fleet.Document]{Docs: []*fleet.Document{mine, theirs}}, w.Clock.Now())
	_, held := e.Current().Fleet(mine.DocID)
	assert.True(t, held)
	_, held = e.Current().Fleet(theirs.DocID)
	assert.False(t, held)
	e.mu.Lock()
	defer e.mu.Unlock()
	assert.False(t, e.st.gone.covers(theirs.DocID, theirs), "nothing remembered of another partition's fleet")
}
