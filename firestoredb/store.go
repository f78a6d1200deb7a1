// Package firestoredb applies fleet events to Firestore: one document per
// fleet in "fleets", one per cluster in "clusters". Every write is a
// compare-and-set on one document (a read, then a write on the condition
// that the document is still as read: two RPCs), so duplicates and
// reordered deliveries converge on the newest state and nothing is written
// when the stored document already reflects the event.
package firestoredb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"cloud.google.com/go/firestore"
	firestorepb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleet"
)

// reconcileWorkers bounds the tombstone transactions one snapshot part runs
// at once: they touch distinct documents, so they do not contend.
const reconcileWorkers = 8

// DefaultFullReconcileEvery: one snapshot part in this many, on average,
// reads its range's documents even when the aggregation agrees. An
// aggregation that agrees means the live documents are the part's fleets
// (but for a 2^-32 collision of hash sums), so the full check is a backstop:
// 240 at the default 30 s snapshot interval checks each range about every
// 2 hours, and adds 1 000 / 240, about 4 reads, to the average part of
// 1 000 fleets.
const DefaultFullReconcileEvery = 240

// Store applies events to one Firestore database.
type Store struct {
	client    *firestore.Client
	retention time.Duration
	now       func() time.Time
	billed    counters
	// fullEvery: see DefaultFullReconcileEvery; 1 reads every part's
	// documents.
	fullEvery int
	// versions spares the ingest its read of a fleet document it knows
	// (nil: off).
	versions *versions
	// feedShards are the change feed's shards: each fleet document
	// written carries its shard among them, and the feed follows them all.
	feedShards int
}

// New returns a Store writing through client. Tombstones expire retention
// after they are written; now is the clock for ingestedAt and expireAt.
func New(client *firestore.Client, retention time.Duration, now func() time.Time) *Store {
	return &Store{client: client, retention: retention, now: now, fullEvery: DefaultFullReconcileEvery,
		versions: newVersions(DefaultVersionCacheBytes, DefaultVersionCacheTTL), feedShards: fleet.DefaultFeedShards}
}

// WithFeedShards spreads the fleets' change feed over n shards (1 to
// fleet.MaxFeedShards; fleet.ValidateFeedShards): the fleet documents it
// writes carry their shard among n, and its feed follows n shards. The
// ingest and the readers of a deployment take the same n (FEED_SHARDS).
// Raising n is safe at any time: every document's shard is below the new
// n. Lowering it leaves the documents of the shards dropped out of the
// feed until they are written again, or a reader's next full load.
func (s *Store) WithFeedShards(n int) *Store {
	s.feedShards = min(max(n, 1), fleet.MaxFeedShards)
	return s
}

// sharded gives d, a fleet document about to be written, its feed shard.
func (s *Store) sharded(d *fleet.Document) *fleet.Document {
	if d != nil {
		d.FeedShard = fleet.FeedShard(d.Key().DocID(), s.feedShards)
	}
	return d
}

// WithVersionCache bounds the cache of fleet document versions by maxBytes
// (0 turns it off: every upsert reads its document first), its entries
// answering for ttl after they are learned.
func (s *Store) WithVersionCache(maxBytes int, ttl time.Duration) *Store {
	s.versions = newVersions(maxBytes, ttl)
	return s
}

// WithFullReconcileEvery sets how many snapshot parts, on average, one
// reads its range's documents although the aggregation agrees (at least
// 1: every part).
func (s *Store) WithFullReconcileEvery(n int) *Store {
	s.fullEvery = max(n, 1)
	return s
}

// maxUnreadable bounds the unreadable documents an Applied names.
const maxUnreadable = 10

// Apply applies one validated event. An error wrapping fleet.ErrPermanent
// cannot be fixed by retrying (Firestore refused the request, or a stored
// document cannot be decoded); any other is transient (Firestore
// unavailable, transaction contention beyond its retries, cancellation):
// the caller should have the message redelivered.
func (s *Store) Apply(ctx context.Context, ev fleet.Event) (fleet.Applied, error) {
	var res fleet.Applied
	var err error
	switch ev.Kind {
	case fleet.KindUpsert, fleet.KindDelete:
		res, err = s.applyFleetEvent(ctx, ev)
	case fleet.KindSnapshot:
		res, err = s.applySnapshot(ctx, ev)
	default:
		return fleet.Applied{}, fmt.Errorf("apply: %w: kind %q", fleet.ErrInvalid, ev.Kind)
	}
	switch {
	case err == nil, errors.Is(err, fleet.ErrPermanent):
	case status.Code(err) == codes.FailedPrecondition:
		// The writes' preconditions are the compare-and-set's own, and
		// retried there: this is a query Firestore has no index for,
		// missing or still building (FAILED_PRECONDITION "The query
		// requires an index"). The same event succeeds once it is built.
		err = fmt.Errorf("%w (a composite index, which terraform apply creates): %w", fleet.ErrStoreNotReady, err)
	case status.Code(err) == codes.InvalidArgument:
		// Firestore refused the request itself, which sending it again
		// cannot change.
		err = fmt.Errorf("%w: %w", fleet.ErrPermanent, err)
	}
	return res, err
}

// unreadable wraps a stored document's decoding error.
func unreadable(path string, err error) error {
	return fmt.Errorf("%w: decode %s: %w", fleet.ErrPermanent, path, err)
}

// Client returns the Firestore client the store writes through.
func (s *Store) Client() *firestore.Client { return s.client }

// FleetRef returns the document reference of a fleet.
func (s *Store) FleetRef(k fleet.Key) *firestore.DocumentRef {
	return s.client.Collection(FleetsCollection).Doc(k.DocID())
}

// ClusterRef returns the document reference of a cluster.
func (s *Store) ClusterRef(cluster string) *firestore.DocumentRef {
	return s.client.Collection(ClustersCollection).Doc(cluster)
}

func (s *Store) applyFleetEvent(ctx context.Context, ev fleet.Event) (fleet.Applied, error) {
	ref := s.FleetRef(ev.Key())
	if res, done, err := s.applyKnown(ctx, ref, ev); done || err != nil {
		return res, err
	}
	var res fleet.Applied
	var known, next *fleet.Document // what the document is once decided; what was written
	wrote, err := compareAndSetFrom(ctx, s, byApply, ref, nil, decodeFleet, func(stored *fleet.Document) (*fleet.Document, error) {
		now := s.now()
		var outcome fleet.Outcome
		next, outcome = fleet.ApplyFleetEvent(stored, ev, now, s.retention)
		next = s.sharded(next)
		res = fleet.Applied{Outcome: outcome, LagMillis: now.Sub(ev.ObservedAt.Time()).Milliseconds()}
		known = cmp.Or(next, stored)
		return next, nil
	}, func(st casState) {
		s.versions.put(ref.ID, known, st, s.now())
		if next != nil {
			next = written(next, st.UpdateTime)
		}
	})
	if err != nil {
		return fleet.Applied{}, fmt.Errorf("apply %s %s at %v: %w", ev.Kind, ev.Key(), ev.Version, err)
	}
	if wrote {
		res.Writes = 1
		res.Announce = []*fleet.Document{next}
	}
	return s.reannounced(res, ev), nil
}

// written is d as stored by a write committed at t.
func written(d *fleet.Document, t time.Time) *fleet.Document {
	w := *d
	w.WrittenAt = t
	return &w
}

// reannounced gives a duplicate's result the event's state to announce
// again (fleet.Applied.Announce): the state the store holds at that
// version, but for the times it was written with.
func (s *Store) reannounced(res fleet.Applied, ev fleet.Event) fleet.Applied {
	if res.Outcome == fleet.OutcomeDuplicate {
		d, _ := fleet.ApplyFleetEvent(nil, ev, s.now(), s.retention)
		res.Announce = []*fleet.Document{s.sharded(d)}
	}
	return res
}

// applyKnown applies ev from the version cache, with no read: nothing at
// all when the cached version already holds it (a duplicate, a stale
// event), else one write on the condition that the document's update time
// is the cached one. done is false when the cache cannot answer: no entry,
// the document changed since (another instance, a snapshot's tombstone),
// whose entry is then forgotten, or the cache stands aside for changes
// while its entries are mostly wrong (versions.trusted).
func (s *Store) applyKnown(ctx context.Context, ref *firestore.DocumentRef, ev fleet.Event) (res fleet.Applied, done bool, err error) {
	known, ok := s.versions.get(ref.ID, s.now())
	if !ok {
		return fleet.Applied{}, false, nil
	}
	now := s.now()
	// ApplyFleetEvent decides from the stored version and deletion alone.
	next, outcome := fleet.ApplyFleetEvent(&fleet.Document{Version: known.version, Deleted: known.deleted}, ev, now, s.retention)
	next = s.sharded(next)
	res = fleet.Applied{Outcome: outcome, LagMillis: now.Sub(ev.ObservedAt.Time()).Milliseconds()}
	if next == nil {
		return s.reannounced(res, ev), true, nil
	}
	if !s.versions.trusted() {
		return fleet.Applied{}, false, nil
	}
	stored := make(map[string]any, len(known.extra))
	for _, f := range known.extra {
		stored[f] = nil
	}
	wr, err := ref.Update(ctx, replacement(next, stored), firestore.LastUpdateTime(known.updateTime))
	switch status.Code(err) {
	case codes.OK:
		s.billed.wrote(byApply, 1)
		s.versions.wrote(false)
		s.versions.put(ref.ID, next, casState{Exists: true, UpdateTime: wr.UpdateTime}, now)
		res.Writes = 1
		res.Announce = []*fleet.Document{written(next, wr.UpdateTime)}
		return res, true, nil
	case codes.FailedPrecondition, codes.NotFound:
		s.versions.forget(ref.ID)
		return fleet.Applied{}, false, nil
	default:
		return fleet.Applied{}, false, fmt.Errorf("apply %s %s at %v: %w", ev.Kind, ev.Key(), ev.Version, err)
	}
}

// applySnapshot reconciles the part's key range, then records the heartbeat
// on the cluster document. Both steps are idempotent, so a redelivered part
// repeats nothing that was done.
//
// A part older than the cluster's newest snapshot changes nothing and is
// not reconciled: one read. That newer snapshot's parts cover every key,
// and whatever this one would tombstone (a live document older than it, in
// its range and not listed) is older than them and not listed by them
// either (a fleet re-created since has a newer version). So a replayed or
// long-delayed snapshot, which anyone holding the cluster's credentials
// could send at will, costs one read, not one per fleet of its range.
func (s *Store) applySnapshot(ctx context.Context, ev fleet.Event) (fleet.Applied, error) {
	now := s.now()
	res := fleet.Applied{LagMillis: now.Sub(ev.ObservedAt.Time()).Milliseconds()}
	ref := s.ClusterRef(ev.Cluster)
	cluster := getDoc(ctx, s, byCluster, ref)
	if status.Code(cluster.err) != codes.NotFound && cluster.err != nil {
		return res, fmt.Errorf("read cluster %s before snapshot at %v: %w", ev.Cluster, ev.Version, cluster.err)
	}
	if supersedes(cluster.snap, ev.Version) {
		res.Outcome = fleet.OutcomeStale
		return res, nil
	}
	tombstones, bad, err := s.reconcile(ctx, ev)
	res.Tombstoned, res.Writes, res.Unreadable, res.Announce = len(tombstones), len(tombstones), bad, tombstones
	if err != nil {
		return res, fmt.Errorf("reconcile snapshot %s at %v part %d/%d: %w", ev.Cluster, ev.Version, ev.Snapshot.Part+1, ev.Snapshot.Parts, err)
	}
	decode := func(snap *firestore.DocumentSnapshot) (*fleet.ClusterDocument, error) {
		stored := new(fleet.ClusterDocument)
		if err := snap.DataTo(stored); err != nil {
			// The cluster document is derived from the newest
			// snapshot alone: rewrite it rather than lose the
			// heartbeat.
			res.ClusterRepaired = true
			return nil, nil
		}
		return stored, nil
	}
	res.ClusterUpdated, err = compareAndSetFrom(ctx, s, byCluster, ref, &cluster, decode, func(stored *fleet.ClusterDocument) (*fleet.ClusterDocument, error) {
		return fleet.ApplySnapshotToCluster(stored, ev, s.now()), nil
	}, nil)
	if err != nil {
		return res, fmt.Errorf("update cluster %s from snapshot at %v: %w", ev.Cluster, ev.Version, err)
	}
	if res.ClusterUpdated {
		res.Writes++
	}
	return res, nil
}

// supersedes reports whether a cluster's document holds a snapshot newer
// than v. A missing or undecodable document holds none.
func supersedes(snap *firestore.DocumentSnapshot, v fleet.Version) bool {
	var c fleet.ClusterDocument
	if snap == nil || !snap.Exists() || snap.DataTo(&c) != nil {
		return false
	}
	return c.SnapshotVersion.Compare(v) > 0
}

// reconcile tombstones the live fleets in the part's range that the part
// does not list and that are older than the snapshot. It first asks
// Firestore for the count and the sum of IDHash of the live documents in
// the range (one read per 1 000 of them): when both are the part's, the
// live documents are the part's fleets and there is nothing to tombstone.
// Otherwise, and for one part in fullEvery (chosen by its version, so that
// every redelivery agrees), it reads the documents, only the fields the
// decision needs; a live document written before documents carried their
// ID is given it, so that later parts agree. Documents that cannot be
// decoded are skipped and named in the second result. It returns the
// tombstones it wrote, as written.
func (s *Store) reconcile(ctx context.Context, ev fleet.Event) ([]*fleet.Document, []string, error) {
	lo, hi := fleet.ClusterPrefix(ev.Cluster)
	if start := ev.Snapshot.Start; !start.IsZero() {
		lo = start.Key(ev.Cluster).DocID()
	}
	if end := ev.Snapshot.End; !end.IsZero() {
		hi = end.Key(ev.Cluster).DocID()
	}
	coll := s.client.Collection(FleetsCollection)
	if !s.fullCheck(ev) {
		count, sum, err := s.liveIDHashes(ctx, byReconcile, lo, hi)
		if err != nil {
			return nil, nil, fmt.Errorf("aggregate fleets of %s in [%s, %s): %w", ev.Cluster, lo, hi, err)
		}
		if wantCount, wantSum := ev.Snapshot.IDHashes(ev.Cluster); count == wantCount && sum == wantSum {
			return nil, nil, nil
		}
	}
	it := coll.Where(firestore.DocumentID, ">=", coll.Doc(lo)).
		Where(firestore.DocumentID, "<", coll.Doc(hi)).
		Select(fieldCluster, fieldNamespace, fieldName, fieldDeleted, fieldVersion, fieldDocID).
		Documents(ctx)
	defer it.Stop()
	read := int64(0)
	defer func() { s.billed.read(byReconcile, max(1, read)) }()

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(reconcileWorkers)
	var mu sync.Mutex
	var bad []string
	var tombstones []*fleet.Document
	skip := func(id string) {
		mu.Lock()
		defer mu.Unlock()
		if len(bad) < maxUnreadable {
			bad = append(bad, id)
		}
	}
	for {
		snap, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			_ = g.Wait()
			return tombstones, bad, fmt.Errorf("list fleets of %s in [%s, %s): %w", ev.Cluster, lo, hi, err)
		}
		read++
		var d fleet.Document
		if err := snap.DataTo(&d); err != nil {
			skip(snap.Ref.ID)
			continue
		}
		ref := snap.Ref
		if fleet.ReconcileSnapshot(&d, ev, s.now(), s.retention) == nil {
			if d.DocID == "" && !d.Deleted {
				g.Go(func() error { return s.backfillDocID(gctx, ref) })
			}
			continue
		}
		g.Go(func() error {
			t, err := s.tombstone(gctx, ref, ev)
			if errors.Is(err, fleet.ErrPermanent) {
				skip(ref.ID)
				return nil
			}
			if t != nil {
				mu.Lock()
				tombstones = append(tombstones, t)
				mu.Unlock()
			}
			return err
		})
	}
	err := g.Wait()
	return tombstones, bad, err
}

// fullCheck reports whether a part reads its range's documents whatever
// the aggregation says: one in fullEvery, by its version and part.
func (s *Store) fullCheck(ev fleet.Event) bool {
	if s.fullEvery <= 1 {
		return true
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%d", ev.Version.Term, ev.Version.Seq, ev.Snapshot.Part)
	return h.Sum64()%uint64(s.fullEvery) == 0
}

// liveIDHashes counts the live fleet documents with an ID in [lo, hi) and
// sums their IDHash, in one aggregation query: billed one read per 1 000
// index entries it scans.
func (s *Store) liveIDHashes(ctx context.Context, by cause, lo, hi string) (count, sum int64, err error) {
	q := s.client.Collection(FleetsCollection).Where(fieldDocID, ">=", lo).Where(fieldDocID, "<", hi).Where(fieldDeleted, "==", false)
	res, err := q.NewAggregationQuery().WithCount("count").WithSum(fieldDocIDHash, "sum").Get(ctx)
	if err != nil {
		return 0, 0, err
	}
	c, ok := res["count"].(*firestorepb.Value)
	if !ok {
		return 0, 0, fmt.Errorf("aggregation answered no count: %v", res)
	}
	count = c.GetIntegerValue()
	s.billed.read(by, max(1, (count+999)/1000))
	switch v := res["sum"].(type) {
	case *firestorepb.Value:
		if _, isInt := v.GetValueType().(*firestorepb.Value_IntegerValue); !isInt && count > 0 {
			return count, -1, nil // a double: no part's sum, so the documents are read
		}
		sum = v.GetIntegerValue()
	default:
		return 0, 0, fmt.Errorf("aggregation answered no sum: %v", res)
	}
	return count, sum, nil
}

// backfillDocID gives a live document written before documents carried
// their ID its DocID and DocIDHash, so that aggregations count it.
func (s *Store) backfillDocID(ctx context.Context, ref *firestore.DocumentRef) error {
	_, err := compareAndSet(ctx, s, byReconcile, ref, decodeFleet, func(stored *fleet.Document) (*fleet.Document, error) {
		if stored == nil || stored.DocID != "" || stored.Deleted {
			return nil, nil
		}
		next := *stored
		next.DocID, next.DocIDHash = ref.ID, fleet.IDHash(ref.ID)
		return s.sharded(&next), nil
	})
	if errors.Is(err, fleet.ErrPermanent) {
		return nil // undecodable: the reconcile names it
	}
	return err
}

// tombstone re-reads one document in a transaction and tombstones it if the
// snapshot still says so: an upsert may have landed since the query. It
// returns the tombstone as written, or nil when none was.
func (s *Store) tombstone(ctx context.Context, ref *firestore.DocumentRef, ev fleet.Event) (*fleet.Document, error) {
	var next *fleet.Document
	done, err := compareAndSetFrom(ctx, s, byReconcile, ref, nil, decodeFleet, func(stored *fleet.Document) (*fleet.Document, error) {
		next = nil
		if stored == nil {
			return nil, nil
		}
		next = s.sharded(fleet.ReconcileSnapshot(stored, ev, s.now(), s.retention))
		return next, nil
	}, func(st casState) {
		if next != nil {
			next = written(next, st.UpdateTime)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("tombstone %s: %w", ref.ID, err)
	}
	if !done {
		return nil, nil
	}
	return next, nil
}

// decodeFleet decodes a stored fleet document.
func decodeFleet(snap *firestore.DocumentSnapshot) (*fleet.Document, error) {
	var d fleet.Document
	if err := snap.DataTo(&d); err != nil {
		return nil, unreadable(snap.Ref.Path, err)
	}
	return &d, nil
}
