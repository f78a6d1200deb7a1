package firestoredb

import "sync/atomic"

// Causes of billed Firestore operations, the keys of Billing's maps.
const (
	// CauseView: the query function's view, loading and polling the
	// documents (read.go).
	CauseView = "view"
	// CauseListen: the view's realtime listener (FollowFleets): one read
	// per document it delivers, at least one when it starts.
	CauseListen = "listen"
	// CauseApply: upserts and deletes, their read and their write.
	CauseApply = "apply"
	// CauseReconcile: snapshot parts' aggregations, range reads,
	// tombstones and ID backfills.
	CauseReconcile = "reconcile"
	// CauseCluster: snapshot parts' read and write of the cluster
	// document.
	CauseCluster = "cluster"
)

// cause indexes a Store's counters; causeNames names each.
type cause int

const (
	byView cause = iota
	byListen
	byApply
	byReconcile
	byCluster
	causeCount
)

var causeNames = [causeCount]string{CauseView, CauseListen, CauseApply, CauseReconcile, CauseCluster}

// Billing counts a Store's billed operations by cause: reads as Firestore
// bills them (one per document read or returned, at least one per query,
// one per 1 000 index entries of an aggregation) and writes (every write
// of a document, tombstones included: each tombstone also costs a TTL
// delete when it expires).
type Billing struct {
	Reads, Writes map[string]int64
}

// counters are a Store's billing counters, by cause.
type counters struct {
	reads, writes [causeCount]atomic.Int64
}

func (c *counters) read(by cause, n int64)  { c.reads[by].Add(n) }
func (c *counters) wrote(by cause, n int64) { c.writes[by].Add(n) }

// Billing returns the operations billed so far, by cause.
func (s *Store) Billing() Billing {
	b := Billing{Reads: map[string]int64{}, Writes: map[string]int64{}}
	for i, name := range causeNames {
		b.Reads[name], b.Writes[name] = s.billed.reads[i].Load(), s.billed.writes[i].Load()
	}
	return b
}
