package fleetview

import (
	"fmt"
	"iter"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

// TestTheIndexListsWhatEachSnapshotHolds: through random changes (new
// fleets, changed labels, deletions, evictions of a cluster over the
// budget, full reloads), every snapshot's sets (every fleet, a label, a
// key, a cluster) hold exactly the fleets of that snapshot that have it,
// and go on doing so after later changes, which copy what they change
// rather than change what a snapshot holds; slots are unique within a
// snapshot, and In yields a set's fleets in ID order after a given ID.
func TestTheIndexListsWhatEachSnapshotHolds(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	clusters := []string{"pc", "ps5", "xbox"}
	keys := []string{"platform", "version", "mode", "region"}
	values := []string{"a", "b", "c"}
	v := newState(Options{Shown: func(*fleet.ClusterDocument) uint64 { return 0 }})
	seq := int64(0)
	randomDoc := func() *fleet.Document {
		labels := map[string]string{}
		for _, k := range keys {
			if rng.IntN(3) > 0 {
				labels[k] = values[rng.IntN(len(values))]
			}
		}
		seq++
		d := doc(clusters[rng.IntN(len(clusters))], "games", fmt.Sprintf("f%02d", rng.IntN(60)), labels, rng.Int64N(5))
		d.Version = fleet.Version{Term: 1, Seq: seq}
		return d
	}
	var snaps []*Snapshot
	prev := &Snapshot{}
	for round := range 60 {
		switch {
		case round%20 == 19: // a full reload of what the view holds, and more
			var docs []*fleet.Document
			for d := range prev.Fleets() {
				if rng.IntN(4) > 0 {
					docs = append(docs, d)
				}
			}
			for range 10 {
				docs = append(docs, randomDoc())
			}
			v.load(docs, nil, map[string]bool{})
		case round%13 == 12:
			v.evict(clusters[rng.IntN(len(clusters))])
		default:
			for range rng.IntN(12) {
				d := randomDoc()
				if rng.IntN(5) == 0 {
					d.Deleted = true
				}
				v.putFleet(d)
			}
		}
		s, _ := v.publish(prev, 1)
		snaps = append(snaps, s)
		prev = s
		for i, s := range snaps { // the older ones too: nothing changed them
			// In, both ways, of the newest, and now and then the first: the table
			// is copied on write as the lists are.
			in := i == len(snaps)-1 || i == 0 && round%10 == 9
			checkIndex(t, s, fmt.Sprintf("snapshot %d after round %d", i, round), clusters, keys, values, in)
		}
	}
}

func checkIndex(t *testing.T, s *Snapshot, at string, clusters, keys, values []string, in bool) {
	t.Helper()
	type want struct {
		name string
		set  Set
		has  func(d *fleet.Document) bool
	}
	wants := []want{{"every", s.Every(), func(*fleet.Document) bool { return true }}}
	for _, c := range append(clusters, "nope") {
		wants = append(wants, want{"cluster " + c, s.InCluster(c), func(d *fleet.Document) bool { return d.Cluster == c }})
	}
	for _, k := range append(keys, "nope") {
		wants = append(wants, want{"key " + k, s.Keyed(k), func(d *fleet.Document) bool { _, ok := d.Labels[k]; return ok }})
		for _, val := range values {
			wants = append(wants, want{"label " + k + "=" + val, s.Labeled(k, val), func(d *fleet.Document) bool { return d.Labels[k] == val }})
		}
	}
	slots := map[uint32]string{}
	s.fleets.Ascend(func(e *entry) bool {
		if other, ok := slots[e.slot]; ok {
			t.Fatalf("%s: %s and %s share slot %d", at, other, e.id, e.slot)
		}
		slots[e.slot] = e.id
		return true
	})
	for _, w := range wants {
		n := 0
		s.fleets.Ascend(func(e *entry) bool {
			require.Equal(t, w.has(e.doc), w.set.has(e.slot), "%s: %s: %s", at, w.name, e.id)
			if w.has(e.doc) {
				n++
			}
			return true
		})
		require.Equal(t, n, w.set.Len(), "%s: %s: no slot of a fleet gone", at, w.name)
		if !in {
			continue
		}
		// In, both ways, from the start and after each fleet of the
		// view: the set's fleets in ID order.
		var ids []string
		s.fleets.Ascend(func(e *entry) bool {
			ids = append(ids, e.id)
			return true
		})
		for _, after := range append([]string{""}, ids...) {
			var want []string
			for _, id := range ids {
				if id > after && w.set.has(s.slotOf(id)) {
					want = append(want, id)
				}
			}
			for way, in := range map[string]func(Set, string) iter.Seq2[string, *fleet.Document]{"walk": s.inByWalk, "slot": s.inBySlot} {
				var got []string
				for id, d := range in(w.set, after) {
					require.Equal(t, id, d.Key().DocID())
					got = append(got, id)
				}
				require.Equal(t, want, got, "%s: %s: In by %s after %q", at, w.name, way, after)
			}
		}
	}

	// In: a set's fleets, in ID order, after an ID.
	set := s.Keyed("platform")
	set.And(s.InCluster("pc"))
	var all []string
	for id, d := range s.In(set, "") {
		require.Equal(t, "pc", d.Cluster)
		all = append(all, id)
	}
	require.Len(t, all, set.Len(), at)
	require.IsIncreasing(t, all, at)
	if len(all) > 2 {
		var rest []string
		for id := range s.In(set, all[1]) {
			rest = append(rest, id)
		}
		require.Equal(t, all[2:], rest, "%s: after %s", at, all[1])
	}
}

// slotOf is the slot of the fleet id holds in s.
func (s *Snapshot) slotOf(id string) uint32 {
	e, _ := s.fleets.Get(&entry{id: id})
	return e.slot
}

// TestSetOperations: Or, And and AndNot of sets of different lengths.
func TestSetOperations(t *testing.T) {
	of := func(slots ...uint32) Set {
		var s Set
		for _, slot := range slots {
			for int(slot/64) >= len(s.words) {
				s.words = append(s.words, 0)
			}
			s.words[slot/64] |= 1 << (slot % 64)
		}
		return s
	}
	members := func(s Set) []uint32 {
		var out []uint32
		for i := range uint32(64 * len(s.words)) {
			if s.has(i) {
				out = append(out, i)
			}
		}
		return out
	}
	a := of(1, 70, 130)
	a.Or(of(2, 200))
	require.Equal(t, []uint32{1, 2, 70, 130, 200}, members(a))
	a.And(of(2, 70, 129))
	require.Equal(t, []uint32{2, 70}, members(a))
	a.AndNot(of(70, 300))
	require.Equal(t, []uint32{2}, members(a))
	require.Equal(t, 1, a.Len())
	require.Zero(t, Set{}.Len())
}
