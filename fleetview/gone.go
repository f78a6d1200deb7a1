package fleetview

import (
	"time"

	"github.com/fleetcast/fleetcast/fleet"
)

// removals remember the version of each fleet's tombstone the view read,
// so that a read which began before the tombstone and is applied after it
// (a listener's first snapshot delivered after a round read the
// tombstone, a load that read the live document) cannot bring the fleet
// back: the view never steps a fleet back, removed or not.
//
// A stale read is at most a round or a listener's first snapshot old, so
// a removal is kept for Resync (a full load reads every live fleet again
// anyway), and no more of them than fit in a sixteenth of the view's
// budget, the oldest forgotten first: a burst of deletes costs bounded
// memory, and at worst lets through a read older than the burst.
type removals struct {
	byID  map[string]removal
	order []removed // oldest first; an ID removed again is in it twice
	bytes int       // of order's entries (and byID's, which share them)
	seq   uint64
	// keep and maxBytes bound them; now is the clock.
	keep     time.Duration
	maxBytes int
	now      func() time.Time
}

type removal struct {
	version fleet.Version
	seq     uint64 // of its entry in order
}

type removed struct {
	id  string
	seq uint64
	at  time.Time
}

// removalBytes is what one removal costs besides its ID: its entries in
// the map and in order.
const removalBytes = 112

func newRemovals(o Options) removals {
	o = o.WithDefaults()
	return removals{byID: map[string]removal{}, keep: o.Resync, maxBytes: o.MaxViewBytes / 16, now: o.Now}
}

// covers reports whether d is not newer than the fleet's tombstone the
// view read: d must not be applied.
func (r *removals) covers(id string, d *fleet.Document) bool {
	g, ok := r.byID[id]
	return ok && d.Version.Compare(g.version) <= 0
}

// add remembers a fleet's tombstone.
func (r *removals) add(id string, version fleet.Version) {
	if old, ok := r.byID[id]; ok && version.Compare(old.version) <= 0 {
		return
	}
	now := r.now()
	r.seq++
	r.byID[id] = removal{version: version, seq: r.seq}
	r.order = append(r.order, removed{id: id, seq: r.seq, at: now})
	r.bytes += len(id) + removalBytes
	r.prune(now)
}

// forget drops a fleet's removal: it lives again, at a newer version.
func (r *removals) forget(id string) { delete(r.byID, id) }

// prune forgets the removals older than keep, and the oldest past
// maxBytes.
func (r *removals) prune(now time.Time) {
	i := 0
	for ; i < len(r.order) && (now.Sub(r.order[i].at) >= r.keep || r.bytes > r.maxBytes); i++ {
		o := r.order[i]
		if g, ok := r.byID[o.id]; ok && g.seq == o.seq {
			delete(r.byID, o.id)
		}
		r.bytes -= len(o.id) + removalBytes
	}
	r.order = r.order[i:]
	if i > 0 && cap(r.order) > 2*len(r.order)+64 {
		r.order = append([]removed(nil), r.order...) // let the dropped go
	}
}
