package fleetview

import (
	"cmp"
	"iter"
	"slices"

	"github.com/fleetcast/fleetcast/fleet"
)

// FeedSize bounds the changes a view keeps for watches that catch up or
// resume, whatever the rate of change: 16 384 changes. A watch further
// behind restarts.
const FeedSize = 1 << 14

// DefaultFeedMaxBytes bounds, in bytes, the documents the feed keeps
// alive that the view no longer holds: each change keeps the fleet's state
// before it (the states replaced since). At the 1 KiB of a typical fleet
// document 16 384 changes hold 16 MiB; at fleet.MaxStateBytes they would
// hold 200 MiB, so the oldest changes go first past this bound.
const DefaultFeedMaxBytes = 32 << 20

// chunkSize is how many changes the feed records in one chunk: chunks are
// what it forgets, so it holds at most one chunk's documents past its
// bound in bytes, and a snapshot copies one pointer per chunk.
const chunkSize = 64

// change is one change of the view: a live fleet's state before (nil
// when it was not in the view) and after (nil when it left it), or, when
// cluster is set, a cluster that appeared or turned stale or fresh. seq
// orders the changes of one Engine.
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
// of the document then (doc, and its shown hash), so that a watch hears of
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

// chunk holds chunkSize consecutive changes. The writer fills it in seq
// order; a snapshot reads only the changes up to its own seq, which the
// writer never writes again, so readers and the writer share chunks
// without a lock.
type chunk [chunkSize]change

// feedWriter keeps the newest changes of the view — about FeedSize, and no
// more than maxBytes of the documents they alone keep alive, give or take
// one chunk — for the watches that follow it. Only the writer (under the
// engine's write lock) uses it; snapshots take a feed of it.
type feedWriter struct {
	chunks     []*chunk
	chunkBytes []int  // of the documents each chunk keeps alive
	base       uint64 // seq of the change before chunks[0][0]
	seq        uint64 // of the newest change
	bytes      int    // of every chunk held
	maxBytes   int    // DefaultFeedMaxBytes when 0
	published  uint64 // seq when updated was last closed
	updated    chan struct{}
}

func newFeedWriter(maxBytes int) feedWriter {
	return feedWriter{maxBytes: maxBytes, updated: make(chan struct{})}
}

func (f *feedWriter) record(c change) {
	f.seq++
	c.seq = f.seq
	c.bytes = DocBytes(c.before)
	i := f.seq - f.base - 1
	if int(i/chunkSize) == len(f.chunks) {
		f.chunks = append(f.chunks, new(chunk))
		f.chunkBytes = append(f.chunkBytes, 0)
	}
	f.chunks[i/chunkSize][i%chunkSize] = c
	f.chunkBytes[i/chunkSize] += c.bytes
	f.bytes += c.bytes
	limit := cmp.Or(f.maxBytes, DefaultFeedMaxBytes)
	// Only the newest chunk can be partly filled: an older one goes
	// whole.
	for len(f.chunks) > 1 && (f.seq-f.base-chunkSize >= FeedSize || f.bytes > limit) {
		f.forget()
	}
}

// forget drops the oldest chunk, and what it keeps alive once no snapshot
// refers to it.
func (f *feedWriter) forget() {
	f.bytes -= f.chunkBytes[0]
	f.chunks[0] = nil
	f.chunks, f.chunkBytes = f.chunks[1:], f.chunkBytes[1:]
	f.base += chunkSize
}

// publish returns the feed as a snapshot sees it, the channel closed when
// a later publish has changes this one has not, and announce, which
// closes the previous one if this publish has changes it had not. The
// caller announces once the snapshot holding the feed is the engine's
// current one: a watch woken by the close must find the changes it was
// woken for, or it would step again at once, finding nothing, for as
// long as the publisher took to store the snapshot — a thousand watches
// spinning so starved the publisher, on a loaded machine, for seconds.
func (f *feedWriter) publish() (_ feed, updated <-chan struct{}, announce func()) {
	announce = func() {}
	if f.seq != f.published {
		old := f.updated
		announce = func() { close(old) }
		f.updated = make(chan struct{})
		f.published = f.seq
	}
	return feed{chunks: slices.Clone(f.chunks), base: f.base, seq: f.seq}, f.updated, announce
}

// feed is the changes a snapshot holds: from base+1 to seq.
type feed struct {
	chunks []*chunk
	base   uint64
	seq    uint64
}

// holds reports whether every change after seq is still kept.
func (f *feed) holds(seq uint64) bool { return f.base <= seq && seq <= f.seq }

// held counts the changes kept.
func (f *feed) held() int { return int(f.seq - f.base) }

func (f *feed) at(n uint64) *change {
	i := n - f.base - 1
	return &f.chunks[i/chunkSize][i%chunkSize]
}

// between yields the changes with a seq in (from, to], oldest first;
// holds(from) and to <= seq must be true.
func (f *feed) between(from, to uint64) iter.Seq[*change] {
	return func(yield func(*change) bool) {
		for n := from + 1; n <= to; n++ {
			if !yield(f.at(n)) {
				return
			}
		}
	}
}
