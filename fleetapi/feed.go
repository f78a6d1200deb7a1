package fleetapi

import (
	"cmp"
	"iter"

	"github.com/fleetcast/fleetcast/fleet"
)

// feedSize bounds the changes a view keeps for watches that catch up or
// resume, whatever the rate of change: 16 384 changes, 1 MiB of pointers.
// A watch further behind restarts.
const feedSize = 1 << 14

// DefaultFeedMaxBytes bounds, in bytes, the documents the feed keeps
// alive that the view no longer holds: each change keeps the fleet's state
// before it (the states replaced since). At the 1 KiB of a typical fleet
// document 16 384 changes hold 16 MiB; at fleet.MaxStateBytes they would
// hold 200 MiB, so the oldest changes go first past this bound.
const DefaultFeedMaxBytes = 32 << 20

// change is one change of the view: a live fleet's state before (nil
// when it was not in the view) and after (nil when it left it), or, when
// cluster is set, a cluster that appeared or turned stale or fresh. seq
// orders the changes of one Service.
type change struct {
	seq           uint64
	before, after *fleet.Document
	cluster       string
	// The cluster's state before and after; a cluster without a
	// document is unknown, and stale.
	was, is clusterState
	// bytes: of before, which only the feed may keep alive.
	bytes int
}

// clusterState is what a watch needs of a cluster: whether the view has
// its document, whether its heartbeat is too old, and what the API shows
// of the document then (doc, and its shownHash), so that a watch hears of
// every heartbeat that changes the cluster's fleet count, totals or labels,
// with the document as it was at the point the watch reaches.
type clusterState struct {
	known, stale bool
	shown        uint64
	doc          *fleet.ClusterDocument // nil while unknown
}

// same reports whether a watch holding a sees nothing new in b.
func (a clusterState) same(b clusterState) bool {
	return a.known == b.known && a.stale == b.stale && a.shown == b.shown
}

// fleetID returns the document ID of the fleet a fleet change is about.
func (c *change) fleetID() string { return cmp.Or(c.after, c.before).Key().DocID() }

// feed keeps the newest changes of the view — at most feedSize, and no
// more than maxBytes of the documents they alone keep alive — for the
// watches that follow it, and wakes them when a sync adds some. The
// Service's lock guards it.
type feed struct {
	seq       uint64   // of the newest change
	ring      []change // change n at ring[(n-1) % feedSize]
	held      int      // the newest changes held: seq-held+1 to seq
	bytes     int      // of the documents the held changes keep alive
	maxBytes  int      // DefaultFeedMaxBytes when 0
	published uint64   // seq when updated was last closed
	updated   chan struct{}
}

func (f *feed) record(c change) {
	f.seq++
	c.seq = f.seq
	c.bytes = docBytes(c.before)
	if len(f.ring) < feedSize {
		f.ring = append(f.ring, c)
	} else {
		if f.held == feedSize {
			f.forget() // the oldest, overwritten
		}
		f.ring[(f.seq-1)%feedSize] = c
	}
	f.held++
	f.bytes += c.bytes
	limit := cmp.Or(f.maxBytes, DefaultFeedMaxBytes)
	for f.bytes > limit && f.held > 1 {
		f.forget()
	}
}

// forget drops the oldest change held, and what it keeps alive.
func (f *feed) forget() {
	i := (f.seq - uint64(f.held)) % feedSize
	f.bytes -= f.ring[i].bytes
	f.ring[i] = change{seq: f.ring[i].seq}
	f.held--
}

// publish wakes the watches waiting on updated, if a change was recorded
// since the last time.
func (f *feed) publish() {
	if f.seq == f.published {
		return
	}
	close(f.updated)
	f.updated = make(chan struct{})
	f.published = f.seq
}

// holds reports whether every change after seq is still kept.
func (f *feed) holds(seq uint64) bool {
	return seq <= f.seq && f.seq-seq <= uint64(f.held)
}

// between yields the changes with a seq in (from, to], oldest first;
// holds(from) and to <= seq must be true.
func (f *feed) between(from, to uint64) iter.Seq[*change] {
	return func(yield func(*change) bool) {
		for n := from + 1; n <= to; n++ {
			if !yield(&f.ring[(n-1)%feedSize]) {
				return
			}
		}
	}
}
