package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

var t0 = time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)

func upsert(term, seq int64, ready int64) fleet.Event {
	return fleet.Event{
		SchemaVersion: fleet.SchemaVersion,
		Kind:          fleet.KindUpsert,
		Cluster:       "pc",
		Version:       fleet.Version{Term: term, Seq: seq},
		ObservedAt:    fleet.MicrosOf(t0),
		Publisher:     fleet.Publisher{ID: "pub-a"},
		Namespace:     "default",
		Name:          "sgs",
		Fleet:         fleet.State{UID: "u1", Status: fleet.Status{ReadyReplicas: ready}},
	}
}

func deleteEv(term, seq int64) fleet.Event {
	e := upsert(term, seq, 0)
	e.Kind = fleet.KindDelete
	e.Fleet = fleet.State{}
	return e
}

// apply feeds events in order to one document, as the ingest function does.
func apply(tb testing.TB, evs ...fleet.Event) (*fleet.Document, []fleet.Outcome) {
	tb.Helper()
	var stored *fleet.Document
	var outcomes []fleet.Outcome
	for _, e := range evs {
		require.NoError(tb, e.Validate())
		next, o := fleet.ApplyFleetEvent(stored, e, t0.Add(time.Second), time.Hour)
		require.Equal(tb, next != nil, o.Writes(), "a document to write iff the outcome writes")
		if next != nil {
			stored = next
		}
		outcomes = append(outcomes, o)
	}
	return stored, outcomes
}

func TestApplyFleetEvent(t *testing.T) {
	tests := []struct {
		name        string
		events      []fleet.Event
		wantOutcome []fleet.Outcome
		wantReady   int64 // of the final document, unless deleted
		wantDeleted bool
		wantVersion fleet.Version
	}{
		{
			name:        "new fleet",
			events:      []fleet.Event{upsert(1, 1, 3)},
			wantOutcome: []fleet.Outcome{fleet.OutcomeCreated},
			wantReady:   3, wantVersion: fleet.Version{Term: 1, Seq: 1},
		},
		{
			name:        "duplicate writes nothing",
			events:      []fleet.Event{upsert(1, 1, 3), upsert(1, 1, 3)},
			wantOutcome: []fleet.Outcome{fleet.OutcomeCreated, fleet.OutcomeDuplicate},
			wantReady:   3, wantVersion: fleet.Version{Term: 1, Seq: 1},
		},
		{
			name:        "reverse order keeps the newest",
			events:      []fleet.Event{upsert(1, 3, 30), upsert(1, 2, 20), upsert(1, 1, 10)},
			wantOutcome: []fleet.Outcome{fleet.OutcomeCreated, fleet.OutcomeStale, fleet.OutcomeStale},
			wantReady:   30, wantVersion: fleet.Version{Term: 1, Seq: 3},
		},
		{
			name:        "newer term wins over higher seq",
			events:      []fleet.Event{upsert(2, 1, 5), upsert(1, 900, 9)},
			wantOutcome: []fleet.Outcome{fleet.OutcomeCreated, fleet.OutcomeStale},
			wantReady:   5, wantVersion: fleet.Version{Term: 2, Seq: 1},
		},
		{
			name:        "delete then late older upsert stays deleted",
			events:      []fleet.Event{upsert(1, 1, 3), deleteEv(1, 3), upsert(1, 2, 4)},
			wantOutcome: []fleet.Outcome{fleet.OutcomeCreated, fleet.OutcomeDeleted, fleet.OutcomeStale},
			wantDeleted: true, wantVersion: fleet.Version{Term: 1, Seq: 3},
		},
		{
			name:        "delete of an unknown fleet leaves a tombstone that fences its late upsert",
			events:      []fleet.Event{deleteEv(1, 5), upsert(1, 4, 1)},
			wantOutcome: []fleet.Outcome{fleet.OutcomeDeleted, fleet.OutcomeStale},
			wantDeleted: true, wantVersion: fleet.Version{Term: 1, Seq: 5},
		},
		{
			name:        "newer upsert after delete revives",
			events:      []fleet.Event{upsert(1, 1, 3), deleteEv(1, 2), upsert(1, 3, 7)},
			wantOutcome: []fleet.Outcome{fleet.OutcomeCreated, fleet.OutcomeDeleted, fleet.OutcomeRevived},
			wantReady:   7, wantVersion: fleet.Version{Term: 1, Seq: 3},
		},
		{
			// S at 1, S' at 2, S at 3 delivered 1, 3, 2: the identical state
			// at 3 must still advance the version, or 2 would win.
			name:        "identical state with a newer version advances the fence",
			events:      []fleet.Event{upsert(1, 1, 3), upsert(1, 3, 3), upsert(1, 2, 8)},
			wantOutcome: []fleet.Outcome{fleet.OutcomeCreated, fleet.OutcomeUpdated, fleet.OutcomeStale},
			wantReady:   3, wantVersion: fleet.Version{Term: 1, Seq: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, outcomes := apply(t, tt.events...)
			assert.Equal(t, tt.wantOutcome, outcomes)
			assert.Equal(t, tt.wantDeleted, doc.Deleted)
			assert.Equal(t, tt.wantVersion, doc.Version)
			if tt.wantDeleted {
				assert.Nil(t, doc.Status, "a tombstone carries no capacity")
				require.NotNil(t, doc.ExpireAt)
				assert.Equal(t, t0.Add(time.Second+time.Hour), *doc.ExpireAt)
				return
			}
			assert.Nil(t, doc.ExpireAt, "a live fleet never expires")
			assert.Equal(t, tt.wantReady, doc.Status.ReadyReplicas)
		})
	}
}

func TestApplyFleetEventRecordsLag(t *testing.T) {
	e := upsert(1, 1, 1)
	e.ObservedAt = fleet.MicrosOf(t0.Add(-1500 * time.Millisecond))
	doc, _ := fleet.ApplyFleetEvent(nil, e, t0, time.Hour)
	assert.Equal(t, int64(1500), doc.LagMillis)
	assert.Equal(t, t0, doc.IngestedAt)
	assert.Equal(t, e.ObservedAt.Time(), doc.ObservedAt)
}

func TestDocStatusDerivesAvailableCapacity(t *testing.T) {
	s := fleet.NewDocStatus(fleet.Status{
		Players:  fleet.Players{Count: 3, Capacity: 10},
		Counters: map[string]fleet.Aggregate{"rooms": {Count: 4, Capacity: 10}, "over": {Count: 12, Capacity: 10}},
		Lists:    map[string]fleet.Aggregate{"players": {Count: 0, Capacity: 64}},
	})
	assert.Equal(t, int64(7), s.Players.Available)
	assert.Equal(t, int64(6), s.Counters["rooms"].Available)
	assert.Equal(t, int64(0), s.Counters["over"].Available, "never negative")
	assert.Equal(t, int64(64), s.Lists["players"].Available)
}

func snapshotEvent(term, seq int64, parts []fleet.Snapshot, i int) fleet.Event {
	e := upsert(term, seq, 0)
	e.Kind, e.Namespace, e.Name, e.Fleet = fleet.KindSnapshot, "", "", fleet.State{}
	e.Snapshot = parts[i]
	e.Snapshot.FleetCount = 0
	for _, p := range parts {
		e.Snapshot.FleetCount += int64(len(p.Fleets))
	}
	return e
}

func TestReconcileSnapshot(t *testing.T) {
	entry := func(ns, name string, seq int64) fleet.SnapshotEntry {
		return fleet.SnapshotEntry{Namespace: ns, Name: name, Version: fleet.Version{Term: 2, Seq: seq}}
	}
	// Two parts: [.., b/a) and [b/a, ..).
	parts := fleet.SplitSnapshot([]fleet.SnapshotEntry{entry("c", "z", 3), entry("a", "x", 1), entry("b", "a", 2), entry("a", "y", 4)}, 150)
	require.Equal(t, 2, len(parts), "the test needs two parts")
	require.Equal(t, fleet.FleetRef{Namespace: "b", Name: "a"}, parts[0].End)
	snap0 := snapshotEvent(2, 10, parts, 0)
	require.NoError(t, snap0.Validate())

	doc := func(ns, name string, term, seq int64, deleted bool) *fleet.Document {
		return &fleet.Document{Cluster: "pc", Namespace: ns, Name: name, Version: fleet.Version{Term: term, Seq: seq}, Deleted: deleted}
	}
	tests := []struct {
		name          string
		stored        *fleet.Document
		wantTombstone bool
	}{
		{"listed fleet stays", doc("a", "x", 2, 1, false), false},
		{"absent older fleet in range is tombstoned", doc("a", "gone", 2, 5, false), true},
		{"absent fleet from an older term is tombstoned", doc("a", "gone", 1, 99, false), true},
		{"absent fleet newer than the snapshot stays", doc("a", "new", 2, 11, false), false},
		{"absent fleet outside the part's range stays", doc("b", "gone", 2, 5, false), false},
		{"range end is exclusive", doc("b", "a", 2, 1, false), false},
		{"tombstone stays as it is", doc("a", "gone", 2, 5, true), false},
		{"other cluster stays", &fleet.Document{Cluster: "xb", Namespace: "a", Name: "gone", Version: fleet.Version{Term: 1, Seq: 1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fleet.ReconcileSnapshot(tt.stored, snap0, t0, time.Hour)
			if !tt.wantTombstone {
				assert.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			assert.True(t, got.Deleted)
			assert.Equal(t, snap0.Version, got.Version, "the tombstone fences events older than the snapshot")
			assert.Equal(t, tt.stored.Key(), got.Key())
		})
	}
}

func TestApplySnapshotToClusterOnlyForNewerSnapshots(t *testing.T) {
	parts := fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)
	snap := snapshotEvent(1, 10, parts, 0)
	snap.Snapshot.ClusterLabels = map[string]string{"platform": "pc"}
	snap.Snapshot.AllocatorEndpoint = "34.1.2.3:443"
	snap.Snapshot.Totals = fleet.Status{ReadyReplicas: 4, Counters: map[string]fleet.Aggregate{"rooms": {Count: 1, Capacity: 3}}}
	require.NoError(t, snap.Validate())
	c := fleet.ApplySnapshotToCluster(nil, snap, t0)
	require.NotNil(t, c)
	assert.Equal(t, "pc", c.Labels["platform"])
	assert.Equal(t, "34.1.2.3:443", c.AllocatorEndpoint, "the cluster's record advertises its allocator")
	bad := snap
	bad.Snapshot.AllocatorEndpoint = "allocator"
	assert.ErrorIs(t, bad.Validate(), fleet.ErrInvalid, "an endpoint without a port is refused")
	assert.Equal(t, int64(2), c.Totals.Counters["rooms"].Available)
	assert.Nil(t, fleet.ApplySnapshotToCluster(c, snap, t0), "same snapshot (another part): no write")
	older := snapshotEvent(1, 9, parts, 0)
	assert.Nil(t, fleet.ApplySnapshotToCluster(c, older, t0), "older snapshot: no write")
	newer := snapshotEvent(2, 0, parts, 0)
	assert.NotNil(t, fleet.ApplySnapshotToCluster(c, newer, t0))
}
