package fleetview

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

// TestARemovedFleetStaysRemoved: a read that began before a fleet's
// tombstone and is applied after it (a listener's first snapshot, taken
// before the delete, delivered after a round read the tombstone) does
// not bring the fleet back; neither does a full load's, nor a listener's
// page of a fleet whose tombstone came first. A newer live version
// (the fleet created again) does.
func TestARemovedFleetStaysRemoved(t *testing.T) {
	w := newWorld(t)
	e := w.engine(w.Mem, Options{TombstoneRetention: time.Hour, Resync: 24 * time.Hour})
	w.Put(doc("pc", "games", "a", nil, 1))
	read(t, e)
	has := func(name string) bool {
		_, ok := e.Current().Fleet(key("pc", "games", name))
		return ok
	}
	before, _ := e.Current().Fleet(key("pc", "games", "a"))
	require.NotNil(t, before)
	readBefore := w.Clock.Now()

	w.Settle()
	w.Remove("pc", "games", "a")
	read(t, e)
	require.False(t, has("a"), "the round read the tombstone")

	e.heard(fleet.Page[fleet.Document]{Docs: []*fleet.Document{before}}, readBefore)
	assert.False(t, has("a"), "a page read before the tombstone")

	e.mu.Lock()
	e.st.load([]*fleet.Document{before}, slices.Collect(maps.Values(e.st.clusters)), nil)
	e.publish()
	e.mu.Unlock()
	assert.False(t, has("a"), "a load read before the tombstone")

	// A tombstone the view never held a fleet for comes first.
	b := doc("pc", "games", "b", nil, 1)
	b.Version = fleet.Version{Term: 1, Seq: w.Next()}
	w.Settle()
	w.Remove("pc", "games", "b")
	read(t, e)
	e.heard(fleet.Page[fleet.Document]{Docs: []*fleet.Document{b}}, readBefore)
	assert.False(t, has("b"), "older than the tombstone the view read")

	w.Settle()
	w.Put(doc("pc", "games", "a", nil, 3))
	read(t, e)
	again, ok := e.Current().Fleet(key("pc", "games", "a"))
	require.True(t, ok, "created again, newer than its tombstone")
	assert.Equal(t, int64(3), again.Status.ReadyReplicas)
}

// TestTheRemovalsAreBounded: the view remembers a removal for
// Resync, and no more removals than fit in a sixteenth of its budget,
// forgetting the oldest first.
func TestTheRemovalsAreBounded(t *testing.T) {
	w := newWorld(t)
	v := newState(Options{Resync: time.Minute, MaxViewBytes: 16 * 1000, Now: w.Clock.Now}.WithDefaults())
	tomb := func(name string) *fleet.Document {
		return fleet.Tombstone(fleet.Key{Cluster: "pc", Namespace: "games", Name: name}, fleet.Version{Term: 1, Seq: w.Next()},
			fleet.Publisher{ID: "p"}, w.Clock.Now(), w.Clock.Now(), time.Hour)
	}
	v.putFleet(tomb("old"))
	w.Clock.Step(2 * time.Minute)
	v.putFleet(tomb("new"))
	_, old := v.gone.byID[key("pc", "games", "old")]
	assert.False(t, old, "older than Resync: forgotten")
	_, recent := v.gone.byID[key("pc", "games", "new")]
	assert.True(t, recent)

	for i := range 200 {
		v.putFleet(tomb(string(rune('a'+i%26)) + time.Duration(i).String()))
	}
	assert.LessOrEqual(t, v.gone.bytes, 1000)
	assert.Greater(t, v.gone.bytes, 500, "full, not emptied")
	_, recent = v.gone.byID[key("pc", "games", "new")]
	assert.False(t, recent, "the oldest forgotten first")
}

// TestAReannouncementChangesNothingHeld: the change feed announces a
// duplicate's state again with no commit time, in case its first
// announcement was lost. A view that holds that version changes nothing
// (no change for its watches); one that does not holds it; a write of the
// same version with a commit time is a change as before.
func TestAReannouncementChangesNothingHeld(t *testing.T) {
	v := newState(Options{})
	at := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	a := doc("pc", "games", "a", nil, 1)
	a.WrittenAt = at
	require.True(t, v.putFleet(a))
	again := *a
	again.WrittenAt = time.Time{}
	assert.False(t, v.putFleet(&again), "re-announced: held already")
	rewritten := *a
	rewritten.WrittenAt = at.Add(time.Second)
	assert.True(t, v.putFleet(&rewritten), "written again with a commit time")
	b := doc("pc", "games", "b", nil, 2)
	assert.True(t, v.putFleet(b), "re-announced, and not held: held now")
	newer := *a
	newer.Version.Seq, newer.WrittenAt, newer.Status = 2, time.Time{}, &fleet.DocStatus{ReadyReplicas: 3}
	assert.True(t, v.putFleet(&newer), "a re-announcement of a newer version than held")
}
