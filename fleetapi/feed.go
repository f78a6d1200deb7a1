package fleetapi

import "github.com/fleetcast/fleetcast/fleet"

// feedSize bounds the changes a view keeps for readers that catch up,
// whatever the rate of change: 65 536 changes of pointers, about 1.5 MiB.
const feedSize = 1 << 16

// Change is one change of a live fleet in the view: its state before (nil
// when it was not in the view) and after (nil when it left it). Seq orders
// the changes of one Service.
type Change struct {
	Seq    uint64
	Before *fleet.Document
	After  *fleet.Document
}

// feed keeps the newest feedSize changes of the view, for streams that
// follow it, and wakes them when a sync adds some. The Service's lock
// guards it.
type feed struct {
	seq       uint64   // of the newest change
	ring      []Change // change n at ring[(n-1) % feedSize]
	published uint64   // seq when updated was last closed
	updated   chan struct{}
}

func (f *feed) record(before, after *fleet.Document) {
	f.seq++
	c := Change{Seq: f.seq, Before: before, After: after}
	if len(f.ring) < feedSize {
		f.ring = append(f.ring, c)
		return
	}
	f.ring[(f.seq-1)%feedSize] = c
}

// publish wakes the readers waiting on updated, if a change was recorded
// since the last time.
func (f *feed) publish() {
	if f.seq == f.published {
		return
	}
	close(f.updated)
	f.updated = make(chan struct{})
	f.published = f.seq
}

// after returns the changes with a Seq above seq, oldest first; false when
// some of them are no longer kept, or seq is not one of this feed's.
func (f *feed) after(seq uint64) ([]Change, bool) {
	if seq > f.seq || f.seq-seq > uint64(len(f.ring)) {
		return nil, false
	}
	out := make([]Change, 0, f.seq-seq)
	for n := seq + 1; n <= f.seq; n++ {
		out = append(out, f.ring[(n-1)%feedSize])
	}
	return out, true
}

// Seq returns the Seq of the newest change in this reading: Changes after
// it are the view's changes since.
func (r *Read) Seq() uint64 { return r.s.view.feed.seq }

// Changes returns the changes of the view after seq (a Read's Seq, once
// the Read is closed, or a Change's), oldest first, and a channel closed
// when a sync adds more. It does not sync. False means some of them are
// no longer kept (more than 65 536 changes since): start again from a
// Read.
func (s *Service) Changes(seq uint64) ([]Change, <-chan struct{}, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	changes, ok := s.view.feed.after(seq)
	return changes, s.view.feed.updated, ok
}
