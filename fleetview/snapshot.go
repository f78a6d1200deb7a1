package fleetview

import (
	"iter"
	"time"

	"github.com/google/btree"

	"github.com/fleetcast/fleetcast/fleet"
)

// entry is one live fleet of the view. Entries are never changed once a
// snapshot holds them: a change replaces the entry.
type entry struct {
	id    string // the document ID: (cluster, namespace, name) order
	doc   *fleet.Document
	hash  uint64
	bytes int    // DocBytes(doc)
	slot  uint32 // its place in the index's sets
}

func lessEntry(a, b *entry) bool { return a.id < b.id }

// treeDegree is the B-tree's degree: nodes of up to 63 entries, so that a
// change copies a few short nodes, and a scan of 10 000 fleets walks about
// 200 of them.
const treeDegree = 32

// Snapshot is the view at one sync: every live fleet the view holds, by
// document ID, and what it knows of each cluster. A Snapshot is immutable:
// readers share it without a lock, for as long as they like, while the
// engine builds the next one from it, sharing what did not change. Its
// documents are the engine's own: read them, never change them.
type Snapshot struct {
	loaded   bool
	fleets   *btree.BTreeG[*entry]
	postings *btree.BTreeG[*posting] // the index
	table    []*slotChunk            // the index's entries by slot
	slots    uint32                  // the index's slots, free or not
	clusters map[string]*fleet.ClusterDocument
	names    []string // of clusters, sorted
	shown    map[string]shown
	stale    map[string]bool // judged at the sync
	over     map[string]bool // clusters left out for their size
	digest   uint64
	bytes    int
	feed     feed
	updated  <-chan struct{}
	epoch    uint64
	syncedAt time.Time
	version  uint64
}

// Loaded reports whether the view has loaded: until then it holds nothing.
func (s *Snapshot) Loaded() bool { return s.loaded }

// Version numbers the snapshots of an Engine, in the order it published
// them.
func (s *Snapshot) Version() uint64 { return s.version }

// Digest is the XOR of the hashes of every live fleet and cluster: two
// views holding the same documents have the same digest, whatever their
// history.
func (s *Snapshot) Digest() uint64 { return s.digest }

// Len is the number of live fleets held.
func (s *Snapshot) Len() int { return s.fleets.Len() }

// Bytes is what the view's budget (Options.MaxViewBytes) counts of the
// fleets held.
func (s *Snapshot) Bytes() int { return s.bytes }

// Fleet returns the live fleet with this document ID.
func (s *Snapshot) Fleet(id string) (*fleet.Document, bool) {
	e, ok := s.fleets.Get(&entry{id: id})
	if !ok {
		return nil, false
	}
	return e.doc, true
}

// Fleets yields every live fleet, in document ID order: (cluster,
// namespace, name).
func (s *Snapshot) Fleets() iter.Seq[*fleet.Document] {
	return func(yield func(*fleet.Document) bool) {
		s.fleets.Ascend(func(e *entry) bool { return yield(e.doc) })
	}
}

func (s *Snapshot) ascendCluster(cluster string, f func(*entry) bool) {
	lo, hi := fleet.ClusterPrefix(cluster)
	s.fleets.AscendRange(&entry{id: lo}, &entry{id: hi}, f)
}

// Cluster returns a cluster's newest document.
func (s *Snapshot) Cluster(name string) (*fleet.ClusterDocument, bool) {
	c, ok := s.clusters[name]
	return c, ok
}

// Clusters yields every cluster with a document, by name.
func (s *Snapshot) Clusters() iter.Seq2[string, *fleet.ClusterDocument] {
	return func(yield func(string, *fleet.ClusterDocument) bool) {
		for _, n := range s.names {
			if !yield(n, s.clusters[n]) {
				return
			}
		}
	}
}

// ClusterCount counts the clusters with a document.
func (s *Snapshot) ClusterCount() int { return len(s.names) }

// OverBudget reports whether a cluster's fleets are left out of the view
// for their size (Options.MaxViewBytes), until its next full load finds
// room.
func (s *Snapshot) OverBudget(cluster string) bool { return s.over[cluster] }

// Updated is closed when the engine publishes a snapshot with changes this
// one does not have.
func (s *Snapshot) Updated() <-chan struct{} { return s.updated }

// StaleAt reports whether a cluster is stale at now: its heartbeat is
// older than staleAfter, it has none, or its fleets are over budget.
func (s *Snapshot) StaleAt(cluster string, now time.Time, staleAfter time.Duration) bool {
	c := s.clusters[cluster]
	return IsStale(c, now, staleAfter) || s.over[cluster]
}

// IsStale reports whether a cluster's last heartbeat was ingested more than
// staleAfter before now (or it never sent one). It is judged on the ingest
// function's clock (ingestedAt), never on the publisher's (heartbeatAt): a
// publisher whose clock is slow would make its live cluster stale at every
// snapshot, and a fast one would keep a dead cluster fresh.
func IsStale(c *fleet.ClusterDocument, now time.Time, staleAfter time.Duration) bool {
	return c == nil || now.Sub(c.IngestedAt) > staleAfter
}

// shown is what the API shows of a cluster: its document, and a hash of it.
type shown struct {
	hash uint64
	doc  *fleet.ClusterDocument
}

// clusterNow is a cluster's state in the snapshot, as a watch sees it.
func (s *Snapshot) clusterNow(name string) clusterState {
	st, known := s.stale[name]
	sh := s.shown[name]
	return clusterState{known: known, stale: !known || st, shown: sh.hash, doc: sh.doc}
}

// fromID yields the entries after id (all when id is ""), in ID order.
func (s *Snapshot) fromID(id string, f func(*entry) bool) {
	if id == "" {
		s.fleets.Ascend(f)
		return
	}
	s.fleets.AscendGreaterOrEqual(&entry{id: id}, func(e *entry) bool {
		if e.id == id {
			return true
		}
		return f(e)
	})
}

// Entries yields every live fleet with its document ID, in ID order.
func (s *Snapshot) Entries() iter.Seq2[string, *fleet.Document] {
	return func(yield func(string, *fleet.Document) bool) {
		s.fleets.Ascend(func(e *entry) bool { return yield(e.id, e.doc) })
	}
}

// ClusterEntries yields the live fleets of one cluster with their
// document IDs, in ID order.
func (s *Snapshot) ClusterEntries(cluster string) iter.Seq2[string, *fleet.Document] {
	return func(yield func(string, *fleet.Document) bool) {
		s.ascendCluster(cluster, func(e *entry) bool { return yield(e.id, e.doc) })
	}
}

// StaleAtSync reports whether a cluster was stale when the snapshot's sync
// judged it, as the watches see it (StaleAt judges at any time): a cluster
// without a document is.
func (s *Snapshot) StaleAtSync(cluster string) bool { return s.clusterNow(cluster).stale }
