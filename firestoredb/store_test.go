package firestoredb_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
)

func newStore(tb testing.TB) (*firestoredb.Store, *firestore.Client) {
	tb.Helper()
	c := emulator.Firestore(tb, emulator.ProjectID(tb))
	return firestoredb.New(c, time.Hour, time.Now), c
}

func upsert(name string, term, seq, ready int64) fleet.Event {
	return fleet.Event{
		SchemaVersion: fleet.SchemaVersion,
		Kind:          fleet.KindUpsert,
		Cluster:       "pc",
		Version:       fleet.Version{Term: term, Seq: seq},
		ObservedAt:    fleet.MicrosOf(time.Now()),
		Publisher:     fleet.Publisher{ID: "pub-a", Version: "test"},
		Namespace:     "default",
		Name:          name,
		Fleet: fleet.State{
			UID:    "uid-" + name,
			Labels: map[string]string{"app.kubernetes.io/version": "1.2.3"},
			Status: fleet.Status{ReadyReplicas: ready, Counters: map[string]fleet.Aggregate{"rooms": {Count: 1, Capacity: 4}}},
		},
	}
}

func snapshot(term, seq int64, parts []fleet.Snapshot, part int) fleet.Event {
	e := upsert("x", term, seq, 0)
	e.Kind, e.Namespace, e.Name, e.Fleet = fleet.KindSnapshot, "", "", fleet.State{}
	e.Snapshot = parts[part]
	for _, p := range parts {
		e.Snapshot.FleetCount += int64(len(p.Fleets))
	}
	return e
}

func get(tb testing.TB, s *firestoredb.Store, name string) (*fleet.Document, *firestore.DocumentSnapshot) {
	tb.Helper()
	snap, err := s.FleetRef(fleet.Key{Cluster: "pc", Namespace: "default", Name: name}).Get(tb.Context())
	require.NoError(tb, err)
	var d fleet.Document
	require.NoError(tb, snap.DataTo(&d))
	return &d, snap
}

func TestApplyConvergesOnTheNewestVersionUnderConcurrency(t *testing.T) {
	s, _ := newStore(t)
	// 8 versions of one fleet applied at once, each twice. Transactions on
	// one document serialise; one that still fails is retried, as Pub/Sub
	// redelivers what the function did not acknowledge. Whatever the order,
	// the newest wins and exactly one apply creates the document.
	const versions = 8
	var wg sync.WaitGroup
	results := make(chan fleet.Applied, 2*versions)
	for seq := int64(1); seq <= versions; seq++ {
		for range 2 {
			wg.Go(func() {
				for attempt := 1; ; attempt++ {
					res, err := s.Apply(t.Context(), upsert("hot", 1, seq, seq))
					if err == nil {
						results <- res
						return
					}
					if attempt == 20 {
						t.Errorf("version %d: still failing after %d deliveries: %v", seq, attempt, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(results)
	d, _ := get(t, s, "hot")
	assert.Equal(t, fleet.Version{Term: 1, Seq: versions}, d.Version)
	assert.Equal(t, int64(versions), d.Status.ReadyReplicas)
	outcomes := map[fleet.Outcome]int{}
	for r := range results {
		outcomes[r.Outcome]++
	}
	assert.Equal(t, 1, outcomes[fleet.OutcomeCreated], "%v", outcomes)
	assert.GreaterOrEqual(t, outcomes[fleet.OutcomeDuplicate]+outcomes[fleet.OutcomeStale], versions, "at least one of each pair writes nothing: %v", outcomes)
}

func TestDuplicateAndStaleEventsWriteNothing(t *testing.T) {
	s, _ := newStore(t)
	res, err := s.Apply(t.Context(), upsert("a", 1, 2, 5))
	require.NoError(t, err)
	require.Equal(t, fleet.OutcomeCreated, res.Outcome)
	_, before := get(t, s, "a")
	for _, ev := range []fleet.Event{upsert("a", 1, 2, 5), upsert("a", 1, 1, 9)} {
		res, err := s.Apply(t.Context(), ev)
		require.NoError(t, err)
		assert.Zero(t, res.Writes)
	}
	_, after := get(t, s, "a")
	assert.Equal(t, before.UpdateTime, after.UpdateTime, "no write: the update time is unchanged")
}

func TestSnapshotPartsReconcileOnlyTheirRange(t *testing.T) {
	s, c := newStore(t)
	ctx := t.Context()
	// Live fleets a..f at term 1; the snapshot at term 2 lists b and e.
	for i, n := range []string{"a", "b", "c", "d", "e", "f"} {
		_, err := s.Apply(ctx, upsert(n, 1, int64(i+1), 1))
		require.NoError(t, err)
	}
	// Another cluster's fleet, which no snapshot of "pc" may touch.
	other := upsert("a", 1, 1, 1)
	other.Cluster = "pc-eu"
	_, err := s.Apply(ctx, other)
	require.NoError(t, err)

	entry := func(n string, seq int64) fleet.SnapshotEntry {
		return fleet.SnapshotEntry{Namespace: "default", Name: n, Version: fleet.Version{Term: 1, Seq: seq}}
	}
	parts := fleet.SplitSnapshot([]fleet.SnapshotEntry{entry("b", 2), entry("e", 5)}, 80)
	require.Equal(t, 2, len(parts))
	require.Equal(t, "e", parts[1].Start.Name)

	// Part 2 first: it covers [e, ...) and tombstones only f.
	res, err := s.Apply(ctx, snapshot(2, 1, parts, 1))
	require.NoError(t, err)
	assert.Equal(t, 1, res.Tombstoned)
	assert.True(t, res.ClusterUpdated)
	for n, deleted := range map[string]bool{"a": false, "c": false, "d": false, "e": false, "f": true} {
		d, _ := get(t, s, n)
		assert.Equal(t, deleted, d.Deleted, n)
	}
	// Part 1 then tombstones a, c and d; the cluster document is already
	// at this snapshot and is not written again.
	res, err = s.Apply(ctx, snapshot(2, 1, parts, 0))
	require.NoError(t, err)
	assert.Equal(t, 3, res.Tombstoned)
	assert.False(t, res.ClusterUpdated)
	announced := map[string]*fleet.Document{}
	for _, d := range res.Announce {
		announced[d.Name] = d
	}
	assert.Len(t, announced, 3, "the tombstones are announced")
	for n, deleted := range map[string]bool{"a": true, "b": false, "c": true, "d": true, "e": false} {
		d, snap := get(t, s, n)
		assert.Equal(t, deleted, d.Deleted, n)
		if deleted {
			assert.Equal(t, fleet.Version{Term: 2, Seq: 1}, d.Version)
			assert.NotNil(t, d.ExpireAt)
			if a := announced[n]; assert.NotNil(t, a, n) {
				assert.True(t, a.Deleted, n)
				assert.Equal(t, d.Version, a.Version, n)
				assert.Equal(t, snap.UpdateTime, a.WrittenAt, "%s: announced with its commit time", n)
			}
		}
	}
	// A redelivered part finds nothing more to do.
	res, err = s.Apply(ctx, snapshot(2, 1, parts, 0))
	require.NoError(t, err)
	assert.Zero(t, res.Writes)

	snap, err := c.Collection(firestoredb.FleetsCollection).Doc(other.Key().DocID()).Get(ctx)
	require.NoError(t, err)
	deleted, err := snap.DataAt("deleted")
	require.NoError(t, err)
	assert.Equal(t, false, deleted, "another cluster's fleet is untouched")

	var cluster fleet.ClusterDocument
	snap, err = s.ClusterRef("pc").Get(ctx)
	require.NoError(t, err)
	require.NoError(t, snap.DataTo(&cluster))
	assert.Equal(t, int64(2), cluster.FleetCount)
	assert.Equal(t, fleet.Version{Term: 2, Seq: 1}, cluster.SnapshotVersion)
}

// TestAClusterDigestCountsItsLiveFleets: what a view checks itself
// against: the count and docIDHash sum of a cluster's live fleet
// documents, none of another cluster's nor a tombstone; and the cluster's
// live fleets read alone.
func TestAClusterDigestCountsItsLiveFleets(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	cluster := "dg" + strings.ToLower(strings.ReplaceAll(t.Name(), "_", ""))[:8]
	var want, sum int64
	for i, n := range []string{"a", "b", "c"} {
		ev := upsert(n, 1, int64(i+1), 1)
		ev.Cluster = cluster
		_, err := s.Apply(ctx, ev)
		require.NoError(t, err)
		if n != "b" {
			want, sum = want+1, sum+fleet.IDHash(ev.Key().DocID())
		}
	}
	del := upsert("b", 1, 9, 0)
	del.Cluster, del.Kind, del.Fleet = cluster, fleet.KindDelete, fleet.State{}
	_, err := s.Apply(ctx, del)
	require.NoError(t, err)
	other := upsert("a", 1, 1, 1)
	other.Cluster = cluster + "x"
	_, err = s.Apply(ctx, other)
	require.NoError(t, err)

	count, got, err := s.ClusterDigest(ctx, cluster)
	require.NoError(t, err)
	assert.Equal(t, want, count)
	assert.Equal(t, sum, got)
	var names []string
	_, err = s.ClusterFleets(ctx, cluster, func(d *fleet.Document) { names = append(names, d.Name) })
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "c"}, names)
}

// TestAnUnreadableDocumentHoldsUpNothingElse: a fleet document that
// cannot be decoded makes its own events fail permanently (to be
// acknowledged, not redelivered for days), while snapshot parts over its
// range still reconcile the other fleets and record the heartbeat; an
// unreadable cluster document is rewritten by the next snapshot.
func TestAnUnreadableDocumentHoldsUpNothingElse(t *testing.T) {
	s, c := newStore(t)
	ctx := t.Context()
	for i, n := range []string{"a", "b"} {
		_, err := s.Apply(ctx, upsert(n, 1, int64(i+1), 1))
		require.NoError(t, err)
	}
	poison := fleet.Key{Cluster: "pc", Namespace: "default", Name: "poison"}
	_, err := c.Collection(firestoredb.FleetsCollection).Doc(poison.DocID()).Set(ctx, map[string]any{
		"cluster": "pc", "namespace": "default", "name": "poison", "deleted": false, "version": "not a version",
	})
	require.NoError(t, err)
	_, err = s.ClusterRef("pc").Set(ctx, map[string]any{"snapshotVersion": 42})
	require.NoError(t, err)

	_, err = s.Apply(ctx, upsert("poison", 1, 3, 1))
	require.ErrorIs(t, err, fleet.ErrPermanent, "an event on the unreadable document cannot succeed by retrying")

	// The snapshot lists only a: b is tombstoned, poison is skipped, and
	// the heartbeat lands.
	parts := fleet.SplitSnapshot([]fleet.SnapshotEntry{{Namespace: "default", Name: "a", Version: fleet.Version{Term: 1, Seq: 1}}}, fleet.DefaultSnapshotPartBytes)
	res, err := s.Apply(ctx, snapshot(2, 1, parts, 0))
	require.NoError(t, err)
	assert.Equal(t, 1, res.Tombstoned)
	assert.Equal(t, []string{poison.DocID()}, res.Unreadable)
	assert.True(t, res.ClusterUpdated)
	assert.True(t, res.ClusterRepaired)
	d, _ := get(t, s, "b")
	assert.True(t, d.Deleted)
	var cluster fleet.ClusterDocument
	snap, err := s.ClusterRef("pc").Get(ctx)
	require.NoError(t, err)
	require.NoError(t, snap.DataTo(&cluster))
	assert.Equal(t, fleet.Version{Term: 2, Seq: 1}, cluster.SnapshotVersion, "the heartbeat is recorded")
	raw, err := c.Collection(firestoredb.FleetsCollection).Doc(poison.DocID()).Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, "not a version", raw.Data()["version"], "the unreadable document is left as it is")
}

// TestAnUpsertCostsAtMostTwoRPCs: without the version cache, a read and a
// conditional write for a change (a creation included), the read alone for
// a duplicate; no transaction to begin, commit or roll back. With it (the
// default), a document the instance knows costs no read: a change is its
// conditional write alone, a duplicate or a stale event nothing.
func TestAnUpsertCostsAtMostTwoRPCs(t *testing.T) {
	var rpcs emulator.RPCs
	c := emulator.Firestore(t, emulator.ProjectID(t), rpcs.FirestoreOptions(t)...)
	for _, tc := range []struct {
		name                     string
		store                    *firestoredb.Store
		change, duplicate, stale map[string]int
	}{
		{"uncached", firestoredb.New(c, time.Hour, time.Now).WithVersionCache(0, 0),
			map[string]int{"BatchGetDocuments": 1, "Commit": 1}, map[string]int{"BatchGetDocuments": 1}, map[string]int{"BatchGetDocuments": 1}},
		{"cached", firestoredb.New(c, time.Hour, time.Now), map[string]int{"Commit": 1}, map[string]int{}, map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.store
			apply := func(ev fleet.Event) map[string]int {
				rpcs.Take()
				_, err := s.Apply(t.Context(), ev)
				require.NoError(t, err)
				return rpcs.Take()
			}
			name := "f-" + tc.name
			assert.Equal(t, map[string]int{"BatchGetDocuments": 1, "Commit": 1}, apply(upsert(name, 1, 1, 1)), "a creation")
			assert.Equal(t, tc.change, apply(upsert(name, 1, 2, 2)), "a change")
			assert.Equal(t, tc.duplicate, apply(upsert(name, 1, 2, 2)), "a duplicate")
			assert.Equal(t, tc.stale, apply(upsert(name, 1, 1, 1)), "a stale event")
			del := upsert(name, 1, 3, 0)
			del.Kind, del.Fleet = fleet.KindDelete, fleet.State{}
			assert.Equal(t, tc.change, apply(del), "a delete")
		})
	}
}

// TestTheVersionCacheDecidesAsTheDocumentWould: one fleet's whole life —
// created, updated, repeated, reordered, deleted, a late upsert fenced by
// the tombstone, a newer one reviving it — has the same outcomes and the
// same stored document with the version cache as with a read before each
// event: an entry remembers all that the decision reads of a stored
// document, the deletion included.
func TestTheVersionCacheDecidesAsTheDocumentWould(t *testing.T) {
	c := emulator.Firestore(t, emulator.ProjectID(t))
	del := func(seq int64) fleet.Event {
		ev := upsert("", 1, seq, 0)
		ev.Kind, ev.Fleet = fleet.KindDelete, fleet.State{}
		return ev
	}
	life := []struct {
		ev   fleet.Event
		want fleet.Outcome
	}{
		{upsert("", 1, 1, 1), fleet.OutcomeCreated},
		{upsert("", 1, 2, 2), fleet.OutcomeUpdated},
		{upsert("", 1, 2, 2), fleet.OutcomeDuplicate},
		{upsert("", 1, 1, 1), fleet.OutcomeStale},
		{del(4), fleet.OutcomeDeleted},
		{upsert("", 1, 3, 9), fleet.OutcomeStale},
		{del(4), fleet.OutcomeDuplicate},
		{upsert("", 1, 5, 6), fleet.OutcomeRevived},
		{del(6), fleet.OutcomeDeleted},
		{upsert("", 1, 7, 7), fleet.OutcomeRevived},
	}
	docs := map[string]*fleet.Document{}
	for _, tc := range []struct {
		name  string
		store *firestoredb.Store
	}{
		{"read first", firestoredb.New(c, time.Hour, time.Now).WithVersionCache(0, 0)},
		{"cached", firestoredb.New(c, time.Hour, time.Now)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "life-" + strings.ReplaceAll(tc.name, " ", "-")
			for i, step := range life {
				ev := step.ev
				ev.Name = name
				if ev.Kind == fleet.KindUpsert {
					ev.Fleet.UID = "uid-life"
				}
				res, err := tc.store.Apply(t.Context(), ev)
				require.NoError(t, err)
				assert.Equal(t, step.want, res.Outcome, "step %d: %s at %v", i, ev.Kind, ev.Version)
				// What the change feed is given: what was written, with
				// its commit time; a duplicate's state again, with none.
				switch {
				case step.want.Writes():
					stored, snap := get(t, tc.store, name)
					if assert.Len(t, res.Announce, 1, "step %d", i) {
						a := res.Announce[0]
						assert.Equal(t, stored.Version, a.Version, "step %d", i)
						assert.Equal(t, stored.Deleted, a.Deleted, "step %d", i)
						assert.Equal(t, snap.UpdateTime, a.WrittenAt, "step %d: its commit time", i)
					}
				case step.want == fleet.OutcomeDuplicate:
					if assert.Len(t, res.Announce, 1, "step %d", i) {
						assert.Equal(t, ev.Version, res.Announce[0].Version, "step %d", i)
						assert.Equal(t, ev.Kind == fleet.KindDelete, res.Announce[0].Deleted, "step %d", i)
						assert.Zero(t, res.Announce[0].WrittenAt, "step %d: a re-announcement", i)
					}
				default:
					assert.Empty(t, res.Announce, "step %d: nothing to announce", i)
				}
			}
			d, _ := get(t, tc.store, name)
			d.Name, d.DocID, d.DocIDHash, d.FeedShard = "", "", 0, 0
			d.ObservedAt, d.IngestedAt, d.WrittenAt, d.LagMillis = time.Time{}, time.Time{}, time.Time{}, 0
			docs[tc.name] = d
		})
	}
	require.Len(t, docs, 2)
	assert.Equal(t, docs["read first"], docs["cached"], "the same document, but for its name and times")
	assert.False(t, docs["cached"].Deleted)
	assert.EqualValues(t, 7, docs["cached"].Status.ReadyReplicas)
}

// TestAWrongVersionCacheIsCaughtByItsCondition: two instances apply one
// fleet's events in turn, each caching what it wrote; each one's entry is
// wrong once the other wrote. Its write is then refused (the update time
// changed), the entry forgotten, and the event applied from a read: the
// document ends at the newest version, whichever instance saw what, and a
// duplicate judged from a wrong entry is still a duplicate.
func TestAWrongVersionCacheIsCaughtByItsCondition(t *testing.T) {
	var rpcs emulator.RPCs
	c := emulator.Firestore(t, emulator.ProjectID(t), rpcs.FirestoreOptions(t)...)
	a, b := firestoredb.New(c, time.Hour, time.Now), firestoredb.New(c, time.Hour, time.Now)
	for seq := int64(1); seq <= 6; seq++ {
		s := []*firestoredb.Store{a, b}[seq%2]
		res, err := s.Apply(t.Context(), upsert("shared", 1, seq, seq))
		require.NoError(t, err)
		assert.Equal(t, 1, res.Writes, "seq %d", seq)
	}
	d, _ := get(t, a, "shared")
	assert.Equal(t, fleet.Version{Term: 1, Seq: 6}, d.Version)
	assert.EqualValues(t, 6, d.Status.ReadyReplicas)
	assert.Positive(t, a.VersionCache().Wrong+b.VersionCache().Wrong, "entries went wrong and were caught")

	// a wrote seq 6 last; b's entry says 5. A redelivery of 5 is a
	// duplicate from b's (wrong) entry, and a's entry answers 6: neither
	// reads.
	rpcs.Take()
	res, err := b.Apply(t.Context(), upsert("shared", 1, 5, 5))
	require.NoError(t, err)
	assert.Equal(t, fleet.OutcomeDuplicate, res.Outcome)
	res, err = a.Apply(t.Context(), upsert("shared", 1, 6, 6))
	require.NoError(t, err)
	assert.Equal(t, fleet.OutcomeDuplicate, res.Outcome)
	assert.Empty(t, rpcs.Take(), "neither read")
}

// TestARefreshReadsWhatTheCacheKnowsTooLong: an entry answers for its TTL
// only, so a fleet's refresh (the same version, re-sent to heal) reads
// the document and re-creates it when it was deleted behind the ingest's
// back.
func TestARefreshReadsWhatTheCacheKnowsTooLong(t *testing.T) {
	c := emulator.Firestore(t, emulator.ProjectID(t))
	clock := time.Now()
	s := firestoredb.New(c, time.Hour, func() time.Time { return clock }).WithVersionCache(1<<20, time.Minute)
	ev := upsert("healed", 1, 1, 1)
	_, err := s.Apply(t.Context(), ev)
	require.NoError(t, err)
	_, err = s.FleetRef(ev.Key()).Delete(t.Context())
	require.NoError(t, err)
	res, err := s.Apply(t.Context(), ev)
	require.NoError(t, err)
	assert.Equal(t, fleet.OutcomeDuplicate, res.Outcome, "within the TTL, the entry answers")
	clock = clock.Add(time.Minute)
	res, err = s.Apply(t.Context(), ev)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Writes, "past it, the refresh reads, finds nothing and creates it")
	d, _ := get(t, s, "healed")
	assert.Equal(t, ev.Version, d.Version)
}

// TestAWriteReplacesTheWholeDocument: a conditional write leaves exactly
// the new state: fields the new state omits, and fields of no version of
// the schema, are gone; writtenAt is the commit time of each write.
func TestAWriteReplacesTheWholeDocument(t *testing.T) {
	s, c := newStore(t)
	_, err := s.Apply(t.Context(), upsert("f", 1, 1, 1))
	require.NoError(t, err)
	first, snap := get(t, s, "f")
	require.NotEmpty(t, first.Labels)
	_, err = snap.Ref.Update(t.Context(), []firestore.Update{{Path: "legacy", Value: "x"}})
	require.NoError(t, err)

	next := upsert("f", 1, 2, 5)
	next.Fleet.Labels = nil
	before := time.Now().Truncate(time.Millisecond)
	_, err = s.Apply(t.Context(), next)
	require.NoError(t, err)
	d, snap := get(t, s, "f")
	assert.Nil(t, d.Labels)
	assert.NotContains(t, snap.Data(), "labels")
	assert.NotContains(t, snap.Data(), "legacy")
	assert.EqualValues(t, 5, d.Status.ReadyReplicas)
	assert.True(t, d.WrittenAt.After(first.WrittenAt), "stamped again")
	// By the server, during the write: after the call began, and no later
	// than the commit (the emulator's stamp is a little earlier than its
	// update time; how much depends on the machine's load).
	assert.False(t, d.WrittenAt.Before(before), "stamped %s, before the write began at %s", d.WrittenAt, before)
	assert.False(t, d.WrittenAt.After(snap.UpdateTime), "stamped %s, after the commit at %s", d.WrittenAt, snap.UpdateTime)

	// A tombstone written the same way keeps only what a tombstone has.
	del := upsert("f", 1, 3, 0)
	del.Kind, del.Fleet = fleet.KindDelete, fleet.State{}
	_, err = s.Apply(t.Context(), del)
	require.NoError(t, err)
	snap, err = snap.Ref.Get(t.Context())
	require.NoError(t, err)
	want, _ := fleet.ApplyFleetEvent(d, del, time.Now(), time.Hour)
	require.NotNil(t, want)
	got := map[string]bool{}
	for k := range snap.Data() {
		got[k] = true
	}
	wantFields := map[string]bool{}
	ref := c.Collection("scratch").Doc("tombstone")
	_, err = ref.Set(t.Context(), want)
	require.NoError(t, err)
	setSnap, err := ref.Get(t.Context())
	require.NoError(t, err)
	for k := range setSnap.Data() {
		wantFields[k] = true
	}
	assert.Equal(t, wantFields, got, "the fields Set would have written")
}

// TestAPartThatAgreesReadsNoDocument: when its range's live documents are
// its fleets, a snapshot part costs one aggregation (one read per 1 000
// documents) and the cluster document's read and write; a live document it
// does not list makes it read the range and tombstone it; a document
// written before documents carried their ID is given it, after which parts
// agree again.
func TestAPartThatAgreesReadsNoDocument(t *testing.T) {
	var rpcs emulator.RPCs
	c := emulator.Firestore(t, emulator.ProjectID(t), rpcs.FirestoreOptions(t)...)
	s := firestoredb.New(c, time.Hour, time.Now).WithFullReconcileEvery(1 << 30)
	ctx := t.Context()
	entries := applyFleets(t, s, 50, "f%02d")
	seq := int64(100)
	part := func(entries []fleet.SnapshotEntry) (fleet.Applied, map[string]int, int64) {
		t.Helper()
		seq++
		rpcs.Take()
		reads := s.Billing().Reads[firestoredb.CauseReconcile]
		res, err := s.Apply(ctx, snapshot(1, seq, fleet.SplitSnapshot(entries, fleet.DefaultSnapshotPartBytes), 0))
		require.NoError(t, err)
		return res, rpcs.Take(), s.Billing().Reads[firestoredb.CauseReconcile] - reads
	}
	res, calls, reads := part(entries)
	assert.Zero(t, res.Tombstoned)
	assert.Equal(t, map[string]int{"RunAggregationQuery": 1, "BatchGetDocuments": 1, "Commit": 1}, calls)
	assert.EqualValues(t, 1, reads, "the aggregation; the cluster document's is the other read")

	// f07 was deleted while no publisher ran: the part no longer lists it.
	res, calls, _ = part(append(slices.Clone(entries[:7]), entries[8:]...))
	assert.Equal(t, 1, res.Tombstoned)
	assert.Equal(t, 1, calls["RunQuery"], "the range read")
	d, _ := get(t, s, "f07")
	assert.True(t, d.Deleted)

	// A live document of an older version of fleetcast, without docID.
	entries = slices.Delete(entries, 7, 8)
	_, err := s.FleetRef(fleet.Key{Cluster: "pc", Namespace: "default", Name: "f07"}).Set(ctx, map[string]any{
		"cluster": "pc", "namespace": "default", "name": "f07", "deleted": false, "version": map[string]any{"term": 1, "seq": 99}})
	require.NoError(t, err)
	entries = slices.Insert(entries, 7, fleet.SnapshotEntry{Namespace: "default", Name: "f07", Version: fleet.Version{Term: 1, Seq: 99}})
	res, calls, _ = part(entries)
	assert.Zero(t, res.Tombstoned)
	assert.Equal(t, 1, calls["RunQuery"], "the aggregation disagreed")
	d, _ = get(t, s, "f07")
	assert.Equal(t, "pc,default,f07", d.DocID, "given its ID")
	_, calls, _ = part(entries)
	assert.Zero(t, calls["RunQuery"], "and the next part agrees")
}

// TestASnapshotOlderThanTheClustersCostsOneRead: a snapshot part with an
// old term and no fleets — replayed at will by anyone holding the
// cluster's credentials, or delivered long late — reads the cluster's
// document and nothing else, and changes nothing, however many fleets the
// cluster has; a current part still reconciles.
func TestASnapshotOlderThanTheClustersCostsOneRead(t *testing.T) {
	var rpcs emulator.RPCs
	c := emulator.Firestore(t, emulator.ProjectID(t), rpcs.FirestoreOptions(t)...)
	s := firestoredb.New(c, time.Hour, time.Now)
	ctx := t.Context()
	entries := applyFleets(t, s, 300, "f%03d")
	current := snapshot(2, 1, fleet.SplitSnapshot(entries, fleet.DefaultSnapshotPartBytes), 0)
	_, err := s.Apply(ctx, current)
	require.NoError(t, err)

	old := snapshot(1, 1000, fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes), 0)
	for range 3 {
		rpcs.Take()
		before := s.Billing()
		res, err := s.Apply(ctx, old)
		require.NoError(t, err)
		after := s.Billing()
		assert.Equal(t, fleet.OutcomeStale, res.Outcome)
		assert.Zero(t, res.Writes)
		assert.Equal(t, map[string]int{"BatchGetDocuments": 1}, rpcs.Take(), "the cluster document's read, and nothing else")
		var reads int64
		for cause, n := range after.Reads {
			reads += n - before.Reads[cause]
		}
		assert.EqualValues(t, 1, reads)
	}
	d, _ := get(t, s, "f150")
	assert.False(t, d.Deleted)

	// The current snapshot's other deliveries still reconcile: one
	// aggregation, no document read.
	rpcs.Take()
	res, err := s.Apply(ctx, current)
	require.NoError(t, err)
	assert.Empty(t, res.Outcome)
	calls := rpcs.Take()
	assert.Equal(t, 1, calls["RunAggregationQuery"]+calls["RunQuery"], "its range is checked: %v", calls)
}

// TestAMissingIndexIsRetriedNotDropped: Firestore refuses a query whose
// composite index is missing or still building with FAILED_PRECONDITION
// (the emulator never does: the test makes the aggregation fail as
// production would). That is no fault of the event, which succeeds once
// the index is ready: transient, and the operator's to fix — not a
// permanent refusal, which would acknowledge every snapshot unapplied and
// turn every cluster stale.
func TestAMissingIndexIsRetriedNotDropped(t *testing.T) {
	var rpcs emulator.RPCs
	c := emulator.Firestore(t, emulator.ProjectID(t), rpcs.FirestoreOptions(t)...)
	s := firestoredb.New(c, time.Hour, time.Now).WithFullReconcileEvery(1 << 30)
	entries := applyFleets(t, s, 3, "f%d")
	part := snapshot(1, 10, fleet.SplitSnapshot(entries, fleet.DefaultSnapshotPartBytes), 0)

	rpcs.Fail("RunAggregationQuery", status.Error(codes.FailedPrecondition,
		"The query requires an index. That index is currently building and cannot be used yet."))
	_, err := s.Apply(t.Context(), part)
	require.ErrorIs(t, err, fleet.ErrStoreNotReady)
	assert.NotErrorIs(t, err, fleet.ErrPermanent)

	rpcs.Fail("RunAggregationQuery", nil) // built
	res, err := s.Apply(t.Context(), part)
	require.NoError(t, err)
	assert.True(t, res.ClusterUpdated, "the redelivery records the heartbeat")
}

// TestBillingSplitsByCause: every billed read and write is counted, under
// the cause that made it.
func TestBillingSplitsByCause(t *testing.T) {
	s, _ := newStore(t)
	s.WithFullReconcileEvery(1 << 30)
	ctx := t.Context()
	entries := applyFleets(t, s, 3, "f%d")
	for i := range 3 {
		_, err := s.Apply(ctx, upsert(fmt.Sprintf("f%d", i), 1, int64(i+1), 1)) // a duplicate, known: nothing
		require.NoError(t, err)
	}
	// The part lists f0 and f1: f2 is gone.
	_, err := s.Apply(ctx, snapshot(1, 10, fleet.SplitSnapshot(entries[:2], fleet.DefaultSnapshotPartBytes), 0))
	require.NoError(t, err)
	assert.Equal(t, firestoredb.Billing{
		Reads:  map[string]int64{firestoredb.CauseApply: 3, firestoredb.CauseReconcile: 1 + 3 + 1, firestoredb.CauseCluster: 1, firestoredb.CauseView: 0, firestoredb.CauseListen: 0},
		Writes: map[string]int64{firestoredb.CauseApply: 3, firestoredb.CauseReconcile: 1, firestoredb.CauseCluster: 1, firestoredb.CauseView: 0, firestoredb.CauseListen: 0},
	}, s.Billing(), "reconcile: the aggregation, the range of 3, the tombstone's read")
}

// applyFleets upserts n fleets named by format and returns them as a
// snapshot's entries.
func applyFleets(tb testing.TB, s *firestoredb.Store, n int, format string) []fleet.SnapshotEntry {
	tb.Helper()
	var entries []fleet.SnapshotEntry
	for i := range n {
		ev := upsert(fmt.Sprintf(format, i), 1, int64(i+1), 1)
		_, err := s.Apply(tb.Context(), ev)
		require.NoError(tb, err)
		entries = append(entries, fleet.SnapshotEntry{Namespace: "default", Name: ev.Name, Version: ev.Version})
	}
	return entries
}

// TestTheFeedFollowsEveryShard: a store of fleet.MaxFeedShards shards
// writes fleets of every shard; each document carries its shard, and both
// the sync's query and the listener deliver every one of them, in the
// order they were written — a document written before the shards were
// raised (by a store of one shard) included.
func TestTheFeedFollowsEveryShard(t *testing.T) {
	one, c := newStore(t)
	ctx := t.Context()
	since := time.Now().Add(-time.Minute)
	_, err := one.Apply(ctx, upsert("older", 1, 1, 1))
	require.NoError(t, err)
	d, _ := get(t, one, "older")
	require.Zero(t, d.FeedShard, "one shard: every document in the first")
	s := firestoredb.New(c, time.Hour, time.Now).WithFeedShards(fleet.MaxFeedShards)
	names := []string{"older"}
	seen := map[int64]bool{}
	for i := 0; len(seen) < fleet.MaxFeedShards; i++ {
		name := fmt.Sprintf("f%03d", i)
		shard := fleet.FeedShard(fleet.Key{Cluster: "pc", Namespace: "default", Name: name}.DocID(), fleet.MaxFeedShards)
		if seen[shard] {
			continue
		}
		seen[shard] = true
		_, err := s.Apply(ctx, upsert(name, 1, 1, 1))
		require.NoError(t, err)
		d, _ := get(t, s, name)
		require.Equal(t, shard, d.FeedShard, "%s is stored with its shard", name)
		names = append(names, name)
	}
	del := upsert(names[1], 1, 2, 0)
	del.Kind, del.Fleet = fleet.KindDelete, fleet.State{}
	_, err = s.Apply(ctx, del)
	require.NoError(t, err)
	want := append(append([]string{names[0]}, names[2:]...), names[1]) // the tombstone last

	namesOf := func(docs []*fleet.Document) []string {
		var out []string
		for _, d := range docs {
			out = append(out, d.Name)
		}
		return out
	}
	page, err := s.FleetsWrittenSince(ctx, since)
	require.NoError(t, err)
	assert.Equal(t, want, namesOf(page.Docs), "the sync's query: every shard, oldest write first")

	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := make(chan []*fleet.Document, 1)
	go func() {
		_ = s.FollowFleets(lctx, since, func(p fleet.Page[fleet.Document], _ time.Time) {
			select {
			case first <- p.Docs:
			default:
			}
		})
	}()
	select {
	case docs := <-first:
		assert.ElementsMatch(t, want, namesOf(docs), "the listener's first results: every shard")
	case <-time.After(time.Minute):
		t.Fatal("the listener delivered nothing within a minute")
	}
}

// TestAPartitionReadsItsClustersOnly: a Partition's loads, its syncs'
// reads and its listener return the documents of its clusters alone —
// Firestore returns no other, so an instance holding a share of the
// deployment reads only that share — and its change feed still holds
// tombstones and is oldest first.
func TestAPartitionReadsItsClustersOnly(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	since := time.Now().Add(-time.Minute)
	for _, c := range []string{"pc", "ps5", "xbox"} {
		for _, name := range []string{"a", "b"} {
			ev := upsert(name, 1, 1, 1)
			ev.Cluster = c
			_, err := s.Apply(ctx, ev)
			require.NoError(t, err)
		}
		parts := fleet.SplitSnapshot([]fleet.SnapshotEntry{
			{Namespace: "default", Name: "a", Version: fleet.Version{Term: 1, Seq: 1}},
			{Namespace: "default", Name: "b", Version: fleet.Version{Term: 1, Seq: 1}},
		}, fleet.DefaultSnapshotPartBytes)
		snap := snapshot(1, 2, parts, 0)
		snap.Cluster = c
		_, err := s.Apply(ctx, snap)
		require.NoError(t, err)
	}
	del := upsert("b", 1, 3, 0)
	del.Cluster, del.Kind, del.Fleet = "ps5", fleet.KindDelete, fleet.State{}
	_, err := s.Apply(ctx, del)
	require.NoError(t, err)

	p, err := s.Partition([]string{"pc", "ps5"})
	require.NoError(t, err)
	keys := func(docs []*fleet.Document) []string {
		var out []string
		for _, d := range docs {
			out = append(out, d.Cluster+"/"+d.Name)
		}
		return out
	}
	var live []*fleet.Document
	_, err = p.LiveFleets(ctx, func(d *fleet.Document) { live = append(live, d) })
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"pc/a", "pc/b", "ps5/a"}, keys(live), "the load")

	clusters, err := p.Clusters(ctx)
	require.NoError(t, err)
	written, err := p.ClustersWrittenSince(ctx, since)
	require.NoError(t, err)
	for _, page := range []fleet.Page[fleet.ClusterDocument]{clusters, written} {
		var names []string
		for _, c := range page.Docs {
			names = append(names, c.Cluster)
		}
		assert.ElementsMatch(t, []string{"pc", "ps5"}, names)
	}

	feed, err := p.FleetsWrittenSince(ctx, since)
	require.NoError(t, err)
	assert.Equal(t, []string{"pc/a", "pc/b", "ps5/a", "ps5/b"}, keys(feed.Docs), "the sync's read, oldest first, the tombstone last")
	assert.True(t, feed.Docs[3].Deleted)

	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := make(chan []*fleet.Document, 1)
	go func() {
		_ = p.FollowFleets(lctx, since, func(pg fleet.Page[fleet.Document], _ time.Time) {
			select {
			case first <- pg.Docs:
			default:
			}
		})
	}()
	select {
	case docs := <-first:
		assert.ElementsMatch(t, []string{"pc/a", "pc/b", "ps5/a", "ps5/b"}, keys(docs), "the listener")
	case <-time.After(time.Minute):
		t.Fatal("the listener delivered nothing within a minute")
	}

	for _, bad := range [][]string{nil, {"pc", "pc"}, {"Not_A_Name"}, make([]string, 31)} {
		_, err := s.Partition(bad)
		assert.Error(t, err, "%q", bad)
	}
}

// TestTheVersionCacheStandsAsideWhenMostlyWrong: two instances take turns
// on one fleet's changes, as instances without affinity do, so that every
// entry either holds is wrong: each write from an entry is refused, then
// read and written again, three RPCs where a read first costs two. Once
// most of an instance's recent writes were refused it writes its changes
// from a read, but for a probe now and then, and the changes cost about
// two RPCs again; the document ends at the newest version all the same.
func TestTheVersionCacheStandsAsideWhenMostlyWrong(t *testing.T) {
	var rpcs emulator.RPCs
	c := emulator.Firestore(t, emulator.ProjectID(t), rpcs.FirestoreOptions(t)...)
	a, b := firestoredb.New(c, time.Hour, time.Now), firestoredb.New(c, time.Hour, time.Now)
	perChange := func(from, to int64) float64 {
		rpcs.Take()
		for seq := from; seq < to; seq++ {
			_, err := []*firestoredb.Store{a, b}[seq%2].Apply(t.Context(), upsert("contended", 1, seq, seq))
			require.NoError(t, err)
		}
		n := 0
		for _, v := range rpcs.Take() {
			n += v
		}
		return float64(n) / float64(to-from)
	}
	first := perChange(1, 41)
	assert.Greater(t, first, 2.5, "while it trusts its wrong entries, a change costs the refused write too")
	later := perChange(200, 400)
	assert.Less(t, later, 2.2, "standing aside, a change costs a read and a write, and a probe now and then")
	assert.Positive(t, a.VersionCache().Aside+b.VersionCache().Aside)
	d, _ := get(t, a, "contended")
	assert.Equal(t, fleet.Version{Term: 1, Seq: 399}, d.Version)

	// Alone again, an instance's entries are right: its probes succeed
	// and it trusts them once more.
	alone := func(from, to int64) float64 {
		rpcs.Take()
		for seq := from; seq < to; seq++ {
			_, err := a.Apply(t.Context(), upsert("contended", 1, seq, seq))
			require.NoError(t, err)
		}
		n := 0
		for _, v := range rpcs.Take() {
			n += v
		}
		return float64(n) / float64(to-from)
	}
	alone(400, 1000)
	assert.InDelta(t, 1.0, alone(1000, 1100), 0.01, "trusted again: a change is its conditional write alone")
}
