package firestoredb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/api/iterator"

	"github.com/fleetcast/fleetcast/fleet"
)

// The collections and the fields queries filter on. Every query of
// fleetcast's documents is built in this package.
const (
	FleetsCollection   = "fleets"
	ClustersCollection = "clusters"

	fieldCluster   = "cluster"
	fieldNamespace = "namespace"
	fieldName      = "name"
	fieldDeleted   = "deleted"
	fieldVersion   = "version"
	fieldWrittenAt = "writtenAt"
	fieldDocID     = "docID"
	fieldDocIDHash = "docIDHash"
	fieldFeedShard = "feedShard"
)

// QueriedFleetFields are the fleet document's fields that a query filters
// or orders on through their single-field indexes. The others a query
// uses are in FleetIndexes, the composite indexes. Terraform exempts
// every other field from single-field indexing
// (google_firestore_field.fleet_unindexed), writtenAt above all, and
// creates the composite indexes; terraform/plan_test.go checks that it
// agrees with both lists.
var QueriedFleetFields = []string{fieldCluster, fieldDeleted}

// FleetIndexes are the composite indexes the queries of fleet documents
// need, each as its fields in order, all ascending: a snapshot part's
// aggregation (deleted ==, a docID range, the sum of docIDHash), and the
// change feed (feedShard in, a writtenAt range, ordered by writtenAt),
// whose index leads with the shard so that the writes, each stamped with
// a newer writtenAt, spread over fleet.FeedShards ranges instead of one.
var FleetIndexes = [][]string{
	{fieldDeleted, fieldDocID, fieldDocIDHash},
	{fieldFeedShard, fieldWrittenAt},
}

// feedShards are the values of the change feed's "in" filter: every shard.
var feedShards = func() []int64 {
	out := make([]int64, fleet.FeedShards)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}()

// Reads returns the documents this store has read for a view, as
// Firestore bills them: one per document returned, and at least one per
// query (a query that returns nothing is billed one read); and one per
// document a listener delivered (FollowFleets). They are the view's
// (CauseView and CauseListen): Billing has every cause.
func (s *Store) Reads() int64 { return s.billed.reads[byView].Load() + s.billed.reads[byListen].Load() }

// LiveFleets calls each with every live fleet, in document ID order
// (cluster, namespace, name), as it is read — the full load of a
// reader's view, which need not hold what it does not keep — and returns
// the IDs of those it could not decode.
func (s *Store) LiveFleets(ctx context.Context, each func(*fleet.Document)) ([]string, error) {
	return eachDoc(s, s.client.Collection(FleetsCollection).Where(fieldDeleted, "==", false).Documents(ctx), each)
}

// Clusters returns every cluster document.
func (s *Store) Clusters(ctx context.Context) (fleet.Page[fleet.ClusterDocument], error) {
	return readAll[fleet.ClusterDocument](s, s.client.Collection(ClustersCollection).Documents(ctx))
}

// FleetsWrittenSince returns the fleet documents, tombstones included,
// whose writtenAt is at or after since, oldest first.
func (s *Store) FleetsWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.Document], error) {
	return readAll[fleet.Document](s, fleetsWrittenSince(s.client, since).Documents(ctx))
}

// ClustersWrittenSince returns the cluster documents written at or after
// since, as FleetsWrittenSince.
func (s *Store) ClustersWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.ClusterDocument], error) {
	return readAll[fleet.ClusterDocument](s, writtenSince(s.client.Collection(ClustersCollection), since).Documents(ctx))
}

// FollowFleets follows the fleet documents, tombstones included, whose
// writtenAt is at or after since, with a Firestore realtime listener: it
// calls apply with those there when it starts, then with each change as
// it commits, and with the read time at which the listener's results held
// every write committed before it. A listener sends nothing while nothing
// changes, so a read time says nothing of the time since. Firestore bills
// a read per document delivered, and at least one for the first results.
// apply runs on the caller's goroutine, one call at a time. It returns nil
// when ctx ends, and the error that stopped the listener otherwise.
func (s *Store) FollowFleets(ctx context.Context, since time.Time, apply func(fleet.Page[fleet.Document], time.Time)) error {
	it := fleetsWrittenSince(s.client, since).Snapshots(ctx)
	defer it.Stop()
	for first := true; ; first = false {
		snap, err := it.Next()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("listen to the fleets written since %s: %w", since.Format(time.RFC3339Nano), err)
		}
		var p fleet.Page[fleet.Document]
		n := int64(0)
		for _, c := range snap.Changes {
			if c.Kind == firestore.DocumentRemoved {
				continue // only an expired tombstone leaves these results
			}
			n++
			d, err := decode[fleet.Document](c.Doc)
			if err != nil {
				p.Unreadable = append(p.Unreadable, c.Doc.Ref.ID)
				continue
			}
			p.Docs = append(p.Docs, d)
		}
		if first {
			n = max(1, n)
		}
		s.billed.read(byListen, n)
		apply(p, snap.ReadTime)
	}
}

func writtenSince(c *firestore.CollectionRef, since time.Time) firestore.Query {
	return c.Where(fieldWrittenAt, ">=", since).OrderBy(fieldWrittenAt, firestore.Asc)
}

// fleetsWrittenSince is the fleets' change feed: the documents of every
// shard written at or after since, oldest first (FleetIndexes' second).
func fleetsWrittenSince(c *firestore.Client, since time.Time) firestore.Query {
	return writtenSince(c.Collection(FleetsCollection), since).Where(fieldFeedShard, "in", feedShards)
}

// LiveFleetsQuery is the query a realtime listener on the live fleets runs:
// all of them, or those of up to 30 clusters (Firestore's limit on "in").
func LiveFleetsQuery(client *firestore.Client, clusters []string) firestore.Query {
	q := client.Collection(FleetsCollection).Where(fieldDeleted, "==", false)
	switch len(clusters) {
	case 0:
		return q
	case 1:
		return q.Where(fieldCluster, "==", clusters[0])
	default:
		return q.Where(fieldCluster, "in", clusters)
	}
}

// ClustersQuery is the query a realtime listener on the clusters runs.
func ClustersQuery(client *firestore.Client) firestore.Query {
	return client.Collection(ClustersCollection).Query
}

// DecodeFleet decodes a fleet document read by a listener.
func DecodeFleet(snap *firestore.DocumentSnapshot) (*fleet.Document, error) {
	return decode[fleet.Document](snap)
}

// DecodeCluster decodes a cluster document read by a listener.
func DecodeCluster(snap *firestore.DocumentSnapshot) (*fleet.ClusterDocument, error) {
	return decode[fleet.ClusterDocument](snap)
}

func decode[T any](snap *firestore.DocumentSnapshot) (*T, error) {
	v := new(T)
	if err := snap.DataTo(v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", snap.Ref.Path, err)
	}
	return v, nil
}

// readAll decodes every document of it, counting the reads.
func readAll[T any](s *Store, it *firestore.DocumentIterator) (fleet.Page[T], error) {
	var p fleet.Page[T]
	bad, err := eachDoc(s, it, func(d *T) { p.Docs = append(p.Docs, d) })
	if err != nil {
		return fleet.Page[T]{}, err
	}
	p.Unreadable = bad
	return p, nil
}

// eachDoc calls each with every document it reads, decoded, and returns
// the IDs of those it could not decode.
func eachDoc[T any](s *Store, it *firestore.DocumentIterator, each func(*T)) ([]string, error) {
	defer it.Stop()
	var bad []string
	n := int64(0)
	defer func() { s.billed.read(byView, max(1, n)) }()
	for {
		snap, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return bad, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list documents: %w", err)
		}
		n++
		v, err := decode[T](snap)
		if err != nil {
			bad = append(bad, snap.Ref.ID)
			continue
		}
		each(v)
	}
}
