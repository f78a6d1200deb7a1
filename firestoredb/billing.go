package firestoredb

import "sync/atomic"

// Causes of billed Firestore operations, as Billing splits them.
const (
	// CauseView: the query function's view, loading and following the
	// documents (read.go).
	CauseView = "view"
	// CauseApply: upserts and deletes, their read and their write.
	CauseApply = "apply"
	// CauseReconcile: snapshot parts' aggregations, range reads,
	// tombstones and ID backfills.
	CauseReconcile = "reconcile"
	// CauseCluster: snapshot parts' read and write of the cluster
	// document.
	CauseCluster = "cluster"
)

var causes = []string{CauseView, CauseApply, CauseReconcile, CauseCluster}

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
	reads, writes [4]atomic.Int64
}

func causeIndex(cause string) int {
	for i, c := range causes {
		if c == cause {
			return i
		}
	}
	panic("firestoredb: unknown cause " + cause)
}

func (c *counters) read(cause string, n int64)  { c.reads[causeIndex(cause)].Add(n) }
func (c *counters) wrote(cause string, n int64) { c.writes[causeIndex(cause)].Add(n) }

// Billing returns the operations billed so far, by cause.
func (s *Store) Billing() Billing {
	b := Billing{Reads: map[string]int64{}, Writes: map[string]int64{}}
	for i, c := range causes {
		b.Reads[c], b.Writes[c] = s.billed.reads[i].Load(), s.billed.writes[i].Load()
	}
	return b
}
