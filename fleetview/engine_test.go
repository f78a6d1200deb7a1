package fleetview

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
)

// gatedSource holds each FleetsWrittenSince until released, and counts
// the calls.
type gatedSource struct {
	*fleetapitest.Memory
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int64
}

func (g *gatedSource) FleetsWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.Document], error) {
	g.calls.Add(1)
	g.entered <- struct{}{}
	<-g.release
	return g.Memory.FleetsWrittenSince(ctx, since)
}

// TestAReadNeverWaitsForARoundUnderWay: a default read while a round
// reads answers at once from the newest snapshot, however old, and starts
// no round of its own; a strict read waits for a round that begins after
// it, which starts once the running one ends.
func TestAReadNeverWaitsForARoundUnderWay(t *testing.T) {
	w := newWorld(t)
	src := &gatedSource{Memory: w.Mem, entered: make(chan struct{}, 8), release: make(chan struct{})}
	e := New(src, Options{Now: w.Clock.Now, MaxStaleness: time.Second, ClusterRefresh: time.Hour})
	assert.Empty(t, ids(read(t, e)), "the load: no FleetsWrittenSince")

	w.Clock.Step(900 * time.Millisecond)
	w.Put(doc("pc", "games", "a", nil, 1))
	synced := make(chan error, 1)
	go func() { synced <- e.Sync(context.Background()) }()
	<-src.entered // a round began 900 ms after the load, and reads

	w.Clock.Step(5 * time.Second) // the snapshot is 5.9 s old
	assert.Empty(t, ids(read(t, e)), "answered at once from the snapshot, the round under way notwithstanding")

	strict := make(chan error, 1)
	go func() { strict <- e.Sync(context.Background()) }()
	require.Never(t, func() bool { return len(strict) > 0 }, 50*time.Millisecond, time.Millisecond,
		"a strict read waits for the round after the running one")
	close(src.release)
	require.NoError(t, <-synced)
	require.NoError(t, <-strict)
	assert.Equal(t, int64(2), src.calls.Load(), "the running round, then the strict one: no other")
	assert.Equal(t, []string{key("pc", "games", "a")}, ids(e.Current()))
}

// TestMaxStaleness: within half of MaxStaleness a read costs nothing;
// past it, it starts a round in the background and answers at once; an
// idle view older than MaxStaleness waits for the round it starts.
func TestMaxStaleness(t *testing.T) {
	w := newWorld(t)
	e := w.engine(w.Mem, Options{MaxStaleness: time.Second, ClusterRefresh: time.Hour})
	read(t, e)
	w.Clock.Step(2 * time.Second)
	w.Put(doc("pc", "games", "a", nil, 1))
	assert.Equal(t, sorted("a"), ids(read(t, e)), "an idle view older than MaxStaleness: the read waits")

	w.Clock.Step(100 * time.Millisecond)
	w.Put(doc("pc", "games", "b", nil, 1))
	before := w.Mem.Reads()
	assert.Equal(t, sorted("a"), ids(read(t, e)), "within half of MaxStaleness: answered from the snapshot")
	assert.Zero(t, w.Mem.Reads()-before)

	w.Clock.Step(600 * time.Millisecond)
	assert.Equal(t, sorted("a"), ids(read(t, e)), "past half: answered at once")
	require.Eventually(t, func() bool { return len(ids(e.Current())) == 2 }, 5*time.Second, time.Millisecond,
		"and a round in the background brings b")
}

// TestAPolledViewStartsNoRoundOfItsOwn: while watches poll the view at
// least every MaxStaleness, a read past half of it starts no round (the
// polls' are enough, and each costs reads); one past MaxStaleness on an
// idle view still waits for one.
func TestAPolledViewStartsNoRoundOfItsOwn(t *testing.T) {
	w := newWorld(t)
	// The poll's ticker runs on real time: an hour is never, here.
	e := w.engine(w.Mem, Options{MaxStaleness: time.Hour, WatchPoll: time.Hour, ClusterRefresh: 100 * time.Hour, StaleAfter: 100 * time.Hour})
	read(t, e)
	syncing := func() bool {
		e.schedMu.Lock()
		defer e.schedMu.Unlock()
		return e.running != nil
	}
	require.False(t, syncing(), "the load's round is over once its readers are woken")
	stop, err := e.Watching()
	require.NoError(t, err)
	w.Clock.Step(40 * time.Minute)
	w.Put(doc("pc", "games", "a", nil, 1))
	assert.Empty(t, ids(read(t, e)), "answered from the snapshot")
	assert.False(t, syncing(), "the poll syncs; the read does not")

	w.Clock.Step(30 * time.Minute)
	assert.Equal(t, sorted("a"), ids(read(t, e)), "past MaxStaleness the idle view's read waits for a round")

	stop()
	w.Clock.Step(40 * time.Minute)
	before := w.Mem.Reads()
	read(t, e)
	assert.Eventually(t, func() bool { return w.Mem.Reads() > before }, 5*time.Second, time.Millisecond,
		"without watches, a read past half starts one")
}

// TestStartLoadsTheView: an instance that starts its engine loads the
// view before any read asks for it.
func TestStartLoadsTheView(t *testing.T) {
	w := newWorld(t)
	w.Put(doc("pc", "games", "a", nil, 1))
	e := w.engine(w.Mem, Options{MaxStaleness: time.Hour})
	assert.False(t, e.Current().Loaded())
	e.Start()
	require.Eventually(t, func() bool { return e.Current().Loaded() }, 5*time.Second, time.Millisecond)
	assert.Equal(t, sorted("a"), ids(e.Current()))
}

// TestSnapshotsAreImmutable: the writer builds each snapshot from the
// previous one, sharing what did not change; every snapshot a reader kept
// still holds exactly what the view held when it was published, whatever
// was written since.
func TestSnapshotsAreImmutable(t *testing.T) {
	w := newWorld(t)
	e := w.engine(w.Mem, Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	type kept struct {
		s    *Snapshot
		want map[string]int64 // id → ready
	}
	var snaps []kept
	model := map[string]int64{}
	for round := range 60 {
		for range 1 + rng.IntN(40) {
			name := fmt.Sprintf("f%03d", rng.IntN(300))
			if rng.IntN(4) == 0 {
				w.Remove("pc", "games", name)
				delete(model, key("pc", "games", name))
				continue
			}
			ready := int64(rng.IntN(1000))
			w.Put(doc("pc", "games", name, nil, ready))
			model[key("pc", "games", name)] = ready
		}
		w.Settle()
		s := read(t, e)
		want := make(map[string]int64, len(model))
		for k, v := range model {
			want[k] = v
		}
		snaps = append(snaps, kept{s, want})
		require.Equal(t, len(want), s.Len(), "round %d", round)
	}
	for i, k := range snaps {
		got := map[string]int64{}
		for id, d := range k.s.Entries() {
			got[id] = d.Status.ReadyReplicas
		}
		require.Equal(t, k.want, got, "snapshot %d changed after it was published", i)
		assert.Equal(t, uint64(i), k.s.Version()-snaps[0].s.Version(), "published in order")
	}
}

// TestTheFeedFollowsTheView: every change a round applies is in the feed,
// with the state before and after, a reload records what it changed, a
// cluster turning stale or fresh is recorded, and watches are woken once
// per snapshot that changed something.
func TestTheFeedFollowsTheView(t *testing.T) {
	w := newWorld(t)
	e := w.engine(w.Mem, Options{TombstoneRetention: time.Hour, Resync: 24 * time.Hour})
	w.Put(doc("pc", "games", "a", nil, 1))
	read(t, e)
	changes := func(from uint64) []change {
		s := e.Current()
		require.True(t, s.feed.holds(from))
		var out []change
		for c := range s.feed.between(from, s.feed.seq) {
			out = append(out, *c)
		}
		return out
	}
	assert.Empty(t, changes(0), "the first load is the starting point, not a change")

	woken := e.Current().Updated()
	w.Settle()
	w.Put(doc("pc", "games", "b", nil, 1))
	w.Put(doc("pc", "games", "a", nil, 2))
	read(t, e)
	requireClosed(t, woken, "a round that changed the view wakes its watches")
	got := changes(0)
	require.Len(t, got, 2)
	kinds := map[string][2]int64{} // name → before and after ready, -1 when absent
	ready := func(d *fleet.Document) int64 {
		if d == nil {
			return -1
		}
		return d.Status.ReadyReplicas
	}
	for _, c := range got {
		name := cmp.Or(c.after, c.before).Name
		kinds[name] = [2]int64{ready(c.before), ready(c.after)}
	}
	assert.Equal(t, map[string][2]int64{"b": {-1, 1}, "a": {1, 2}}, kinds)

	// A new heartbeat changes what the API shows of its cluster: each is
	// recorded, staleness unchanged.
	woken = e.Current().Updated()
	w.Settle()
	w.Clock.Step(time.Second)
	w.Heartbeat("pc", 0)
	w.Heartbeat("ps5", 0)
	w.Heartbeat("xbox", 0)
	read(t, e)
	requireClosed(t, woken, "a round that saw new heartbeats wakes its watches")
	beats := changes(2)
	require.Len(t, beats, 3)
	for _, c := range beats {
		assert.Equal(t, c.was.stale, c.is.stale, "%s: the heartbeat changes no staleness", c.cluster)
		assert.NotEqual(t, c.was.shown, c.is.shown, "%s: what the API shows changed", c.cluster)
	}

	// A round that reads nothing new wakes nobody.
	woken = e.Current().Updated()
	w.Settle()
	read(t, e)
	select {
	case <-woken:
		t.Fatal("a round that changed nothing wakes nobody")
	default:
	}

	w.Settle()
	w.Remove("pc", "games", "b")
	read(t, e)
	more := changes(5)
	require.Len(t, more, 1)
	assert.Equal(t, "b", more[0].before.Name)
	assert.Nil(t, more[0].after, "a tombstone: the fleet left")

	// A cluster whose heartbeat ages past StaleAfter turns stale; a new
	// one appears; the others' heartbeats are recorded.
	w.Clock.Step(DefaultStaleAfter)
	w.Heartbeat("pc", 0)
	w.Heartbeat("ps5", 0)
	w.Heartbeat("switch", 0)
	s := read(t, e)
	more = changes(6)
	require.Len(t, more, 4)
	assert.ElementsMatch(t, []string{"pc", "ps5"}, []string{more[0].cluster, more[1].cluster}, "heartbeats")
	sw, xbox := s.shown["switch"], s.shown["xbox"]
	assert.Equal(t, change{seq: 9, cluster: "switch", was: clusterState{stale: true, shown: sw.hash, doc: sw.doc}, is: clusterState{known: true, shown: sw.hash, doc: sw.doc}}, more[2])
	assert.Equal(t, change{seq: 10, cluster: "xbox", was: clusterState{known: true, shown: xbox.hash, doc: xbox.doc}, is: clusterState{known: true, stale: true, shown: xbox.hash, doc: xbox.doc}}, more[3])

	// A fleet deleted while the view was idle, whose tombstone expired:
	// the reload records that it left.
	w.Clock.Step(time.Hour)
	w.Remove("pc", "games", "a")
	w.Mem.Expire(fleet.Key{Cluster: "pc", Namespace: "games", Name: "a"})
	for _, c := range []string{"pc", "ps5", "xbox", "switch"} {
		w.Heartbeat(c, 0)
	}
	read(t, e)
	more = changes(10)
	var fleets, fresh, beat []string
	for _, c := range more {
		switch {
		case c.cluster == "":
			fleets = append(fleets, cmp.Or(c.after, c.before).Name)
			assert.Nil(t, c.after)
		case c.was.stale != c.is.stale:
			fresh = append(fresh, c.cluster)
			assert.False(t, c.is.stale)
		default:
			beat = append(beat, c.cluster)
		}
	}
	assert.Equal(t, []string{"a"}, fleets, "the fleet left")
	assert.Equal(t, []string{"xbox"}, fresh, "fresh again")
	assert.ElementsMatch(t, []string{"pc", "ps5", "switch", "xbox"}, beat, "every cluster's new heartbeat")
}

// requireClosed fails the test unless ch is closed.
func requireClosed(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Fatal(msg)
	}
}

// TestTheFeedIsBounded: the feed keeps about the newest FeedSize changes
// (whole chunks); a watch further behind is told to start again.
func TestTheFeedIsBounded(t *testing.T) {
	f := newFeedWriter(0)
	d := doc("pc", "games", "a", nil, 1)
	for range FeedSize + 10 {
		f.record(change{after: d})
	}
	snap, _, _ := f.publish()
	assert.GreaterOrEqual(t, snap.held(), FeedSize, "at least FeedSize")
	assert.Less(t, snap.held(), FeedSize+chunkSize, "no more than a chunk past it")
	assert.False(t, snap.holds(snap.base-1))
	require.True(t, snap.holds(snap.base))
	var seqs []uint64
	for c := range snap.between(snap.base, snap.seq) {
		seqs = append(seqs, c.seq)
	}
	assert.Len(t, seqs, snap.held())
	assert.Equal(t, snap.base+1, seqs[0])
	assert.EqualValues(t, FeedSize+10, seqs[len(seqs)-1])
	assert.False(t, snap.holds(snap.seq+1), "a seq this feed has not reached")
}

// TestTheFeedIsBoundedInBytes: the documents the feed alone keeps alive
// (the states changes replaced) stay within its bound but for one chunk,
// the oldest changes going first; what it holds, it holds whole.
func TestTheFeedIsBoundedInBytes(t *testing.T) {
	f := newFeedWriter(1 << 20)
	big := doc("pc", "games", "a", map[string]string{}, 1)
	for i := range 100 {
		big.Labels[fmt.Sprintf("example.com/label-%03d", i)] = strings.Repeat("v", 63)
	}
	per := DocBytes(big)
	require.Greater(t, per, 10_000)
	for range 1000 {
		f.record(change{before: big, after: big})
	}
	assert.LessOrEqual(t, f.bytes, 1<<20+chunkSize*per, "within the bound, but for the newest chunk")
	snap, _, _ := f.publish()
	assert.LessOrEqual(t, snap.held(), (1<<20)/per+chunkSize, "about as many of the newest as fit")
	assert.GreaterOrEqual(t, snap.held(), (1<<20)/per-chunkSize)
	assert.False(t, snap.holds(snap.base-1), "older ones are gone: a watch that far behind restarts")
	n := 0
	for c := range snap.between(snap.base, snap.seq) {
		require.NotNil(t, c.before)
		n++
	}
	assert.Equal(t, snap.held(), n)
}

// everything is a Filter of every live fleet of every cluster.
type everything struct{}

func (everything) Matches(d *fleet.Document, stale bool) bool { return !d.Deleted }
func (everything) HasCluster(string) bool                     { return true }

// TestAWokenWatchFindsItsChange: a watch woken by a snapshot's Updated
// finds the change it was woken for in the current snapshot at once, for
// watches are woken only once the snapshot holding it is the current one.
// Woken before, they stepped again at once, found nothing, and went round
// for as long as the publisher took to store it: on a loaded machine a
// thousand of them so starved the publisher that a change reached them
// 5 to 11 s late.
func TestAWokenWatchFindsItsChange(t *testing.T) {
	f := newFeedWriter(0)
	_, woken, _ := f.publish()
	f.record(change{after: doc("pc", "games", "a", nil, 1)})
	_, _, announce := f.publish()
	select {
	case <-woken:
		t.Fatal("the watches were woken before the snapshot was made current")
	default:
	}
	announce()
	requireClosed(t, woken, "announcing wakes them")

	w := newWorld(t)
	e := w.engine(w.Mem, Options{TombstoneRetention: time.Hour, Resync: 24 * time.Hour})
	w.Put(doc("pc", "games", "a", nil, 1))
	read(t, e)
	const watches, changes = 50, 100
	var empty, wakes atomic.Int64
	done := make(chan struct{})
	var running, started sync.WaitGroup
	for range watches {
		wt, err := e.Watch(everything{}, "all", "")
		require.NoError(t, err)
		started.Add(1)
		running.Go(func() {
			st := wt.Step() // the initial set
			for st.More {
				st = wt.Step()
			}
			started.Done()
			for {
				select {
				case <-done:
					return
				case <-st.Updated:
				}
				wakes.Add(1)
				if st = wt.Step(); len(st.Events) == 0 {
					empty.Add(1)
				}
				for st.More {
					st = wt.Step()
				}
			}
		})
	}
	started.Wait() // every watch has its initial set: each change after it wakes them
	for i := range changes {
		w.Settle()
		w.Put(doc("pc", "games", "a", nil, int64(i+2)))
		read(t, e)
	}
	// A watch scheduled late is woken once for many changes; done must
	// not cut that short.
	require.Eventually(t, func() bool { return wakes.Load() >= watches }, time.Minute, time.Millisecond, "every watch is woken by the changes")
	close(done)
	running.Wait()
	assert.Zero(t, empty.Load(), "of %d wakes, some found no change", wakes.Load())
}
