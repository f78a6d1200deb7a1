package fleetview

import (
	"iter"
	"math/bits"
	"slices"
	"strings"

	"github.com/google/btree"

	"github.com/fleetcast/fleetcast/fleet"
)

// The view's index, after Prometheus' postings: each fleet of the view has
// a slot, a small number reused once the fleet leaves, and the index lists,
// for each label (key and value), each label key and each cluster, the
// slots of the fleets that have it, sorted. A query turns the lists its
// filters name into Sets and combines them, so that it reads only the
// fleets they leave, not every fleet of the view.
//
// The lists are copied on write, as the fleets' tree is: a sync changes
// in place only the lists it already copied since the previous publish
// (generation), and a snapshot shares every other one.

// posting is one list: the slots of the fleets with a label, a key or of
// a cluster.
type posting struct {
	key   string   // postingKey
	slots []uint32 // sorted
	gen   uint64   // the generation that may change slots in place
}

func lessPosting(a, b *posting) bool { return a.key < b.key }

// Kinds of posting, the first byte of its key.
const (
	postingAll     = "*"
	postingLabel   = "l"
	postingKey     = "k"
	postingCluster = "c"
)

func labelPosting(key, value string) string { return postingLabel + key + "\x00" + value }
func keyPosting(key string) string          { return postingKey + key }
func clusterPosting(name string) string     { return postingCluster + name }

// indexBytesPerLabel is what a label costs the index at most (DocBytes
// counts it): its slot in two lists, and, when no other fleet has it,
// the list of its own.
const indexBytesPerLabel = 2*4 + 96

// index is the writer's postings, and its table of the entries by slot.
type index struct {
	postings *btree.BTreeG[*posting]
	table    []*slotChunk
	gen      uint64
	free     []uint32 // slots of fleets that left, to reuse
	next     uint32   // slots ever given out
}

// slotChunkLen is how many slots a chunk of the table holds: a change
// copies one chunk (4 KiB of pointers) once per snapshot, a snapshot
// copies the chunks' list (8 bytes a chunk).
const slotChunkLen = 512

// slotChunk is a run of the table: the entry in each slot (nil when
// free), copied on write as the postings are.
type slotChunk struct {
	entries [slotChunkLen]*entry
	gen     uint64
}

// place puts e (nil: none) in its slot of the table.
func (x *index) place(slot uint32, e *entry) {
	i := int(slot / slotChunkLen)
	for i >= len(x.table) {
		x.table = append(x.table, &slotChunk{gen: x.gen})
	}
	c := x.table[i]
	if c.gen != x.gen {
		c = &slotChunk{entries: c.entries, gen: x.gen}
		x.table[i] = c
	}
	c.entries[slot%slotChunkLen] = e
}

func newIndex() *index {
	return &index{postings: btree.NewG(treeDegree, lessPosting), gen: 1}
}

// slot gives a new fleet its slot.
func (x *index) slot() uint32 {
	if n := len(x.free); n > 0 {
		s := x.free[n-1]
		x.free = x.free[:n-1]
		return s
	}
	x.next++
	return x.next - 1
}

// postingKeys are the lists a fleet is on.
func postingKeys(d *fleet.Document) []string {
	keys := make([]string, 0, 2+2*len(d.Labels))
	keys = append(keys, postingAll, clusterPosting(d.Cluster))
	for k, v := range d.Labels {
		keys = append(keys, keyPosting(k), labelPosting(k, v))
	}
	return keys
}

// add puts a new entry on its lists, giving it a slot.
func (x *index) add(e *entry) {
	e.slot = x.slot()
	x.place(e.slot, e)
	for _, k := range postingKeys(e.doc) {
		x.insert(k, e.slot)
	}
}

// remove takes an entry off its lists, and frees its slot.
func (x *index) remove(e *entry) {
	for _, k := range postingKeys(e.doc) {
		x.delete(k, e.slot)
	}
	x.place(e.slot, nil)
	x.free = append(x.free, e.slot)
}

// replace moves an entry's slot to the entry that replaces it, and
// changes only the lists of the labels that changed.
func (x *index) replace(old, e *entry) {
	e.slot = old.slot
	x.place(e.slot, e)
	was, is := postingKeys(old.doc), postingKeys(e.doc)
	for _, k := range was {
		if !slices.Contains(is, k) {
			x.delete(k, e.slot)
		}
	}
	for _, k := range is {
		if !slices.Contains(was, k) {
			x.insert(k, e.slot)
		}
	}
}

// own returns the list of key that this generation may change, copying
// the published one; nil when there is none and create is false.
func (x *index) own(key string, create bool) *posting {
	p, ok := x.postings.Get(&posting{key: key})
	switch {
	case ok && p.gen == x.gen:
		return p
	case ok:
		p = &posting{key: key, slots: slices.Clone(p.slots), gen: x.gen}
	case create:
		p = &posting{key: key, gen: x.gen}
	default:
		return nil
	}
	x.postings.ReplaceOrInsert(p)
	return p
}

func (x *index) insert(key string, slot uint32) {
	p := x.own(key, true)
	if i, found := slices.BinarySearch(p.slots, slot); !found {
		p.slots = slices.Insert(p.slots, i, slot)
	}
}

func (x *index) delete(key string, slot uint32) {
	p := x.own(key, false)
	if p == nil {
		return
	}
	if i, found := slices.BinarySearch(p.slots, slot); found {
		p.slots = slices.Delete(p.slots, i, i+1)
	}
	if len(p.slots) == 0 {
		x.postings.Delete(p)
	}
}

// publish returns the postings and the table for a snapshot; later
// changes copy what they change.
func (x *index) publish() (*btree.BTreeG[*posting], []*slotChunk, uint32) {
	x.gen++
	return x.postings.Clone(), slices.Clone(x.table), x.next
}

// A Set is a set of a snapshot's fleets, for narrowing what a query reads
// (Snapshot.In): the fleets with a label, a label key or of a cluster, and
// what Or, And and AndNot make of them. The zero Set is empty. Sets are
// values of one snapshot: combining those of two is meaningless.
type Set struct {
	words []uint64
}

func (s *Snapshot) set(key string) Set {
	out := Set{words: make([]uint64, (s.slots+63)/64)}
	if p, ok := s.postings.Get(&posting{key: key}); ok {
		for _, slot := range p.slots {
			out.words[slot/64] |= 1 << (slot % 64)
		}
	}
	return out
}

// listLen is how many fleets the list of key holds.
func (s *Snapshot) listLen(key string) int {
	if p, ok := s.postings.Get(&posting{key: key}); ok {
		return len(p.slots)
	}
	return 0
}

// LabeledCount is how many fleets have label key=value: Labeled's Len,
// read from the index without making the set.
func (s *Snapshot) LabeledCount(key, value string) int { return s.listLen(labelPosting(key, value)) }

// KeyedCount is how many fleets have a label key: Keyed's Len, read from
// the index without making the set.
func (s *Snapshot) KeyedCount(key string) int { return s.listLen(keyPosting(key)) }

// Sparse reports whether In reads a set of n fleets by slot, at the cost
// of what it holds rather than of the view's size.
func (s *Snapshot) Sparse(n int) bool { return n <= sparseIn(s.fleets.Len()) }

// Every is the set of every fleet of the snapshot.
func (s *Snapshot) Every() Set { return s.set(postingAll) }

// Labeled is the set of the fleets with label key=value.
func (s *Snapshot) Labeled(key, value string) Set { return s.set(labelPosting(key, value)) }

// Keyed is the set of the fleets with a label key, whatever its value.
func (s *Snapshot) Keyed(key string) Set { return s.set(keyPosting(key)) }

// InCluster is the set of the fleets of a cluster.
func (s *Snapshot) InCluster(name string) Set { return s.set(clusterPosting(name)) }

// ClusterSizes yields each cluster the snapshot holds fleets of, in name
// order, with how many: read from the index's lists, not the fleets.
func (s *Snapshot) ClusterSizes() iter.Seq2[string, int] {
	return func(yield func(string, int) bool) {
		// The cluster lists' keys run from "c" to before "d".
		s.postings.AscendRange(&posting{key: postingCluster}, &posting{key: string(postingCluster[0] + 1)}, func(p *posting) bool {
			return len(p.slots) == 0 || yield(p.key[len(postingCluster):], len(p.slots))
		})
	}
}

// Or adds t's fleets to s.
func (s *Set) Or(t Set) {
	if len(t.words) > len(s.words) {
		s.words = append(s.words, make([]uint64, len(t.words)-len(s.words))...)
	}
	for i, w := range t.words {
		s.words[i] |= w
	}
}

// And keeps the fleets of s that t holds.
func (s *Set) And(t Set) {
	for i := range s.words {
		if i < len(t.words) {
			s.words[i] &= t.words[i]
		} else {
			s.words[i] = 0
		}
	}
}

// AndNot takes t's fleets out of s.
func (s *Set) AndNot(t Set) {
	for i := range min(len(s.words), len(t.words)) {
		s.words[i] &^= t.words[i]
	}
}

// Len is the number of fleets in s.
func (s Set) Len() int {
	n := 0
	for _, w := range s.words {
		n += bits.OnesCount64(w)
	}
	return n
}

func (s Set) has(slot uint32) bool {
	i := slot / 64
	return int(i) < len(s.words) && s.words[i]&(1<<(slot%64)) != 0
}

// In yields the fleets of set after the document ID after (every one when
// ""), with their IDs, in ID order. A set of few fleets is read from the
// table of slots and sorted, whatever the view's size: a selector that
// matches 100 fleets of a million reads 100 entries. A larger one is read
// walking the fleets in order, which stops as soon as the caller has
// what it wants, reading only the entries (not the documents) of those
// left out.
func (s *Snapshot) In(set Set, after string) iter.Seq2[string, *fleet.Document] {
	if !s.Sparse(set.Len()) {
		return s.inByWalk(set, after)
	}
	return s.inBySlot(set, after)
}

// inByWalk is In walking the view's fleets in ID order.
func (s *Snapshot) inByWalk(set Set, after string) iter.Seq2[string, *fleet.Document] {
	return func(yield func(string, *fleet.Document) bool) {
		s.fromID(after, func(e *entry) bool {
			return !set.has(e.slot) || yield(e.id, e.doc)
		})
	}
}

// inBySlot is In reading set's entries from the table, sorted by ID.
func (s *Snapshot) inBySlot(set Set, after string) iter.Seq2[string, *fleet.Document] {
	return func(yield func(string, *fleet.Document) bool) {
		for _, e := range s.entriesOf(set) {
			if e.id > after && !yield(e.id, e.doc) {
				return
			}
		}
	}
}

// sparseIn is how many fleets of a view of n a set may hold for In to
// read them by slot and sort them rather than walk the view: sorting k
// costs about k·log k, a walk up to n.
func sparseIn(n int) int { return max(64, n/16) }

// entriesOf returns the entries of set's fleets, in ID order.
func (s *Snapshot) entriesOf(set Set) []*entry {
	out := make([]*entry, 0, set.Len())
	for i, w := range set.words {
		for w != 0 {
			slot := uint32(i*64 + bits.TrailingZeros64(w))
			w &= w - 1
			if c := int(slot / slotChunkLen); c < len(s.table) {
				if e := s.table[c].entries[slot%slotChunkLen]; e != nil {
					out = append(out, e)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b *entry) int { return strings.Compare(a.id, b.id) })
	return out
}
