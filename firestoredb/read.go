package firestoredb

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// a newer writtenAt, spread over the feed's shards (Store.WithFeedShards)
// instead of one range.
var FleetIndexes = [][]string{
	{fieldDeleted, fieldDocID, fieldDocIDHash},
	{fieldFeedShard, fieldWrittenAt},
}

// PartitionFleetIndexes are the composite indexes a Partition's queries
// need beside FleetIndexes: its change feed (cluster in, a writtenAt
// range, ordered by writtenAt), whose index leads with the cluster, so
// that each cluster's writes take a range of their own. Terraform creates
// it only for a deployment with partitions (query_partitions): every
// index costs every write an entry.
var PartitionFleetIndexes = [][]string{{fieldCluster, fieldWrittenAt}}

// Reads returns the documents this store has read for a view, as
// Firestore bills them: one per document returned, and at least one per
// query (a query that returns nothing is billed one read); and one per
// document a listener delivered (FollowFleets). They are the view's
// (CauseView and CauseListen): Billing has every cause. A Partition's
// reads are its Store's.
func (s *Store) Reads() int64 { return s.billed.reads[byView].Load() + s.billed.reads[byListen].Load() }

// MaxPartitionClusters is the most clusters a Partition holds: Firestore's
// limit on the values of one "in" filter, so that one query, and one
// listener, follow them all.
const MaxPartitionClusters = 30

// A Partition reads the fleets and clusters of some clusters only: the
// Source of a query view that holds a share of a deployment too large for
// one instance (docs/capacity.md). Its loads and its change feed ask
// Firestore for those clusters' documents alone ("cluster in"), so an
// instance reads its share, not everything; its feed's index
// (PartitionFleetIndexes) leads with the cluster, so each cluster's writes
// take their own index range.
type Partition struct {
	s *Store
	// clusters: nil reads every cluster, through the feed's shards.
	clusters []string
}

// Partition returns the reads of clusters' documents (ValidatePartition).
func (s *Store) Partition(clusters []string) (*Partition, error) {
	if err := ValidatePartition(clusters); err != nil {
		return nil, err
	}
	return &Partition{s: s, clusters: slices.Clone(clusters)}, nil
}

// ValidatePartition checks a partition's clusters: 1 to
// MaxPartitionClusters distinct cluster names.
func ValidatePartition(clusters []string) error {
	switch {
	case len(clusters) == 0:
		return fmt.Errorf("a partition holds at least one cluster")
	case len(clusters) > MaxPartitionClusters:
		return fmt.Errorf("a partition holds at most %d clusters (Firestore's limit on an \"in\" filter), not %d", MaxPartitionClusters, len(clusters))
	}
	for i, c := range clusters {
		if err := fleet.ValidateClusterName(c); err != nil {
			return fmt.Errorf("partition: %w", err)
		}
		if slices.Contains(clusters[:i], c) {
			return fmt.Errorf("partition: cluster %q named twice", c)
		}
	}
	return nil
}

// every is the partition of every cluster, which the Store's own reads are.
func (s *Store) every() *Partition { return &Partition{s: s} }

// Reads returns the reads of p's Store for views (Store.Reads).
func (p *Partition) Reads() int64 { return p.s.Reads() }

// LiveFleets calls each with every live fleet, in document ID order
// (cluster, namespace, name), as it is read — the full load of a
// reader's view, which need not hold what it does not keep — and returns
// the IDs of those it could not decode.
func (s *Store) LiveFleets(ctx context.Context, each func(*fleet.Document)) ([]string, error) {
	return s.every().LiveFleets(ctx, each)
}

// LiveFleets is Store.LiveFleets of p's clusters.
func (p *Partition) LiveFleets(ctx context.Context, each func(*fleet.Document)) ([]string, error) {
	return eachDoc(p.s, LiveFleetsQuery(p.s.client, p.clusters).Documents(ctx), each)
}

// ClusterDigest counts the live fleet documents of cluster and sums their
// docIDHash, in one aggregation query over the snapshot reconcile's index:
// billed one read per 1 000 documents. A view compares it with its own
// (fleetview.Checker). sum is -1 when Firestore answers it as a double,
// which no int64 sum of 32-bit hashes is.
func (s *Store) ClusterDigest(ctx context.Context, cluster string) (count, sum int64, err error) {
	lo, hi := fleet.ClusterPrefix(cluster)
	return s.liveIDHashes(ctx, byView, lo, hi)
}

// ClusterFleets calls each with every live fleet of cluster, as
// LiveFleets does for every cluster's.
func (s *Store) ClusterFleets(ctx context.Context, cluster string, each func(*fleet.Document)) ([]string, error) {
	return eachDoc(s, LiveFleetsQuery(s.client, []string{cluster}).Documents(ctx), each)
}

// ClusterDigest is Store.ClusterDigest, of one of p's clusters.
func (p *Partition) ClusterDigest(ctx context.Context, cluster string) (count, sum int64, err error) {
	return p.s.ClusterDigest(ctx, cluster)
}

// ClusterFleets is Store.ClusterFleets, of one of p's clusters.
func (p *Partition) ClusterFleets(ctx context.Context, cluster string, each func(*fleet.Document)) ([]string, error) {
	return p.s.ClusterFleets(ctx, cluster, each)
}

// Clusters returns every cluster document.
func (s *Store) Clusters(ctx context.Context) (fleet.Page[fleet.ClusterDocument], error) {
	return s.every().Clusters(ctx)
}

// Clusters is Store.Clusters of p's clusters.
func (p *Partition) Clusters(ctx context.Context) (fleet.Page[fleet.ClusterDocument], error) {
	q := ClustersQuery(p.s.client)
	if p.clusters != nil {
		q = q.Where(fieldCluster, "in", p.clusters)
	}
	return readAll[fleet.ClusterDocument](p.s, q.Documents(ctx))
}

// FleetsWrittenSince returns the fleet documents, tombstones included,
// whose writtenAt is at or after since, oldest first.
func (s *Store) FleetsWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.Document], error) {
	return s.every().FleetsWrittenSince(ctx, since)
}

// FleetsWrittenSince is Store.FleetsWrittenSince of p's clusters.
func (p *Partition) FleetsWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.Document], error) {
	return readAll[fleet.Document](p.s, p.fleetsWrittenSince(since).Documents(ctx))
}

// ClustersWrittenSince returns the cluster documents written at or after
// since, as FleetsWrittenSince.
func (s *Store) ClustersWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.ClusterDocument], error) {
	return s.every().ClustersWrittenSince(ctx, since)
}

// ClustersWrittenSince is Store.ClustersWrittenSince of p's clusters. It
// reads every cluster's (a deployment writes a cluster document per
// snapshot interval, a few a second at most) and keeps p's, which spares
// the clusters an index of their own.
func (p *Partition) ClustersWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.ClusterDocument], error) {
	page, err := readAll[fleet.ClusterDocument](p.s, writtenSince(p.s.client.Collection(ClustersCollection), since).Documents(ctx))
	if err != nil || p.clusters == nil {
		return page, err
	}
	page.Docs = slices.DeleteFunc(page.Docs, func(c *fleet.ClusterDocument) bool { return !slices.Contains(p.clusters, c.Cluster) })
	return page, nil
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
	return s.every().FollowFleets(ctx, since, apply)
}

// FollowFleets is Store.FollowFleets of p's clusters.
func (p *Partition) FollowFleets(ctx context.Context, since time.Time, apply func(fleet.Page[fleet.Document], time.Time)) error {
	it := p.fleetsWrittenSince(since).Snapshots(ctx)
	defer it.Stop()
	for first := true; ; first = false {
		snap, err := it.Next()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("listen to the fleets written since %s: %w", since.Format(time.RFC3339Nano), err)
		}
		var page fleet.Page[fleet.Document]
		n := int64(0)
		for _, c := range snap.Changes {
			if c.Kind == firestore.DocumentRemoved {
				continue // only an expired tombstone leaves these results
			}
			n++
			d, err := decode[fleet.Document](c.Doc)
			if err != nil {
				page.Unreadable = append(page.Unreadable, c.Doc.Ref.ID)
				continue
			}
			page.Docs = append(page.Docs, d)
		}
		if first {
			n = max(1, n)
		}
		p.s.billed.read(byListen, n)
		apply(page, snap.ReadTime)
	}
}

func writtenSince(c *firestore.CollectionRef, since time.Time) firestore.Query {
	return c.Where(fieldWrittenAt, ">=", since).OrderBy(fieldWrittenAt, firestore.Asc)
}

// fleetsWrittenSince is p's change feed: the fleet documents written at
// or after since, oldest first. Of every cluster, through every shard
// (FleetIndexes' second index); of a partition's, through its clusters
// (PartitionFleetIndexes).
func (p *Partition) fleetsWrittenSince(since time.Time) firestore.Query {
	q := writtenSince(p.s.client.Collection(FleetsCollection), since)
	if p.clusters != nil {
		return q.Where(fieldCluster, "in", p.clusters)
	}
	shards := make([]int64, p.s.feedShards)
	for i := range shards {
		shards[i] = int64(i)
	}
	return q.Where(fieldFeedShard, "in", shards)
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
