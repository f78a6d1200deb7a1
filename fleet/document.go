package fleet

import (
	"fmt"
	"hash/fnv"
	"time"
)

// DefaultTombstoneRetention is how long a deleted fleet's tombstone is kept
// before Firestore's TTL policy on expireAt removes it. It must exceed the
// longest time an event can spend in Pub/Sub for a late upsert to be fenced
// off; snapshots heal anything later.
const DefaultTombstoneRetention = 24 * time.Hour

// Document is a fleets/{Key.DocID} document: the newest state of one fleet,
// or a tombstone that fences off late, older events once it is deleted.
// Its JSON form is described by schemas/fleet_document.schema.json.
type Document struct {
	Cluster   string  `json:"cluster" firestore:"cluster"`
	Namespace string  `json:"namespace" firestore:"namespace"`
	Name      string  `json:"name" firestore:"name"`
	Deleted   bool    `json:"deleted" firestore:"deleted"`
	Version   Version `json:"version" firestore:"version"`
	// DocID is the document's ID (Key.DocID), and DocIDHash its IDHash:
	// a snapshot part checks its range with one aggregation over them
	// (count and sum), reading documents only when they disagree.
	DocID     string `json:"docID" firestore:"docID"`
	DocIDHash int64  `json:"docIDHash" firestore:"docIDHash"`
	// FeedShard is FeedShard(DocID, shards) of the deployment's shards:
	// readers follow the documents written since a point through one
	// index range per shard, so that no single range takes every write
	// (see MaxFeedShards). The store sets it as it writes. Absent (0) on
	// documents written before it existed, which is the first shard.
	FeedShard int64 `json:"feedShard" firestore:"feedShard"`

	// The fleet's state; empty on tombstones.
	UID         string            `json:"uid,omitempty" firestore:"uid,omitempty"`
	Labels      map[string]string `json:"labels,omitempty" firestore:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty" firestore:"annotations,omitempty"`
	Spec        *Spec             `json:"spec,omitempty" firestore:"spec,omitempty"`
	Status      *DocStatus        `json:"status,omitempty" firestore:"status,omitempty"`
	// Degraded says what the publisher dropped from the state, and why.
	Degraded string `json:"degraded,omitempty" firestore:"degraded,omitempty"`
	// Rollout is absent while unknown (no set seen, or an older publisher);
	// Autoscalers absent when none targets the fleet.
	Rollout     *Rollout     `json:"rollout,omitempty" firestore:"rollout,omitempty"`
	Autoscalers []Autoscaler `json:"autoscalers,omitempty" firestore:"autoscalers,omitempty"`
	// GameServerLabels are the labels of the fleet's game servers, as its
	// template gives them (State.GameServerLabels); absent when none.
	GameServerLabels map[string]string `json:"gameServerLabels,omitempty" firestore:"gameServerLabels,omitempty"`

	Publisher Publisher `json:"publisher" firestore:"publisher"`
	// ObservedAt is when the publisher saw this state (its clock);
	// IngestedAt when the ingest function wrote it; LagMillis the difference.
	ObservedAt time.Time `json:"observedAt" firestore:"observedAt"`
	IngestedAt time.Time `json:"ingestedAt" firestore:"ingestedAt"`
	LagMillis  int64     `json:"lagMillis" firestore:"lagMillis"`
	// ExpireAt is set on tombstones only, for the Firestore TTL policy.
	ExpireAt *time.Time `json:"expireAt,omitempty" firestore:"expireAt,omitempty"`
	// WrittenAt is Firestore's commit time of the write (a server
	// timestamp, set because the field is zero when written): readers
	// follow changes by it, tombstones included.
	WrittenAt time.Time `json:"writtenAt,omitzero" firestore:"writtenAt,serverTimestamp"`
}

// DocStatus is a fleet's Status with the capacity still available, derived
// for querying ("at least 10 rooms free").
type DocStatus struct {
	Replicas          int64                   `json:"replicas" firestore:"replicas"`
	ReadyReplicas     int64                   `json:"readyReplicas" firestore:"readyReplicas"`
	ReservedReplicas  int64                   `json:"reservedReplicas" firestore:"reservedReplicas"`
	AllocatedReplicas int64                   `json:"allocatedReplicas" firestore:"allocatedReplicas"`
	Allocations       int64                   `json:"allocations" firestore:"allocations"`
	Players           DocCapacity             `json:"players" firestore:"players"`
	Counters          map[string]DocAggregate `json:"counters" firestore:"counters"`
	Lists             map[string]DocAggregate `json:"lists" firestore:"lists"`
}

// DocCapacity is a count against a capacity, with what is still available.
type DocCapacity struct {
	Count     int64 `json:"count" firestore:"count"`
	Capacity  int64 `json:"capacity" firestore:"capacity"`
	Available int64 `json:"available" firestore:"available"`
}

// DocAggregate is an Aggregate with Available = max(0, Capacity - Count).
type DocAggregate struct {
	Count             int64 `json:"count" firestore:"count"`
	Capacity          int64 `json:"capacity" firestore:"capacity"`
	AllocatedCount    int64 `json:"allocatedCount" firestore:"allocatedCount"`
	AllocatedCapacity int64 `json:"allocatedCapacity" firestore:"allocatedCapacity"`
	Available         int64 `json:"available" firestore:"available"`
}

// ClusterDocument is a clusters/{cluster} document. Only snapshots write it
// (every --snapshot-interval), never fleet events: many concurrent
// transactions on one document abort in Firestore.
type ClusterDocument struct {
	Cluster   string            `json:"cluster" firestore:"cluster"`
	Labels    map[string]string `json:"labels" firestore:"labels"`
	Publisher Publisher         `json:"publisher" firestore:"publisher"`
	// SnapshotVersion is the version of the newest snapshot applied.
	SnapshotVersion Version `json:"snapshotVersion" firestore:"snapshotVersion"`
	SnapshotParts   int64   `json:"snapshotParts" firestore:"snapshotParts"`
	// HeartbeatAt is when the publisher took that snapshot (its clock, for
	// information); IngestedAt when the ingest function wrote it (its
	// clock), which staleness is judged by.
	HeartbeatAt time.Time `json:"heartbeatAt" firestore:"heartbeatAt"`
	IngestedAt  time.Time `json:"ingestedAt" firestore:"ingestedAt"`
	FleetCount  int64     `json:"fleetCount" firestore:"fleetCount"`
	Totals      DocStatus `json:"totals" firestore:"totals"`
	// TotalsTruncated reports that Totals hold only the MaxAggregates
	// counters and lists of the largest capacity.
	TotalsTruncated bool `json:"totalsTruncated,omitempty" firestore:"totalsTruncated,omitempty"`
	// AllocatorEndpoint is the snapshot's: the cluster's Agones allocator
	// service, host:port, or empty.
	AllocatorEndpoint string `json:"allocatorEndpoint,omitempty" firestore:"allocatorEndpoint,omitempty"`
	// WrittenAt is Firestore's commit time of the write, as on Document.
	WrittenAt time.Time `json:"writtenAt,omitzero" firestore:"writtenAt,serverTimestamp"`
}

// Key returns the document's fleet key.
func (d *Document) Key() Key { return Key{Cluster: d.Cluster, Namespace: d.Namespace, Name: d.Name} }

// Outcome says what applying an event to a stored document did.
type Outcome string

// Outcomes of applying an event.
const (
	// OutcomeCreated: the fleet had no document; it has one now.
	OutcomeCreated Outcome = "created"
	// OutcomeUpdated: a newer state replaced the stored one.
	OutcomeUpdated Outcome = "updated"
	// OutcomeRevived: a newer upsert replaced a tombstone (re-created fleet).
	OutcomeRevived Outcome = "revived"
	// OutcomeDeleted: the document became (or stays, newer) a tombstone.
	OutcomeDeleted Outcome = "deleted"
	// OutcomeDuplicate: the stored version equals the event's; no write.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeStale: the stored version is newer than the event's; no write.
	OutcomeStale Outcome = "stale"
)

// Applied reports what applying one event to the store did.
type Applied struct {
	// Outcome of an upsert or delete. Of a snapshot part: OutcomeStale
	// when the cluster already has a newer snapshot (nothing was done),
	// and empty otherwise.
	Outcome Outcome
	// Writes counts the documents written.
	Writes int
	// Tombstoned counts the fleets a snapshot part found gone.
	Tombstoned int
	// ClusterUpdated reports whether a snapshot wrote the cluster document.
	ClusterUpdated bool
	// LagMillis is ingestion time minus the event's observedAt.
	LagMillis int64
	// Unreadable lists (a few of) the fleet documents of a snapshot part's
	// range that could not be decoded: left as they are, and not holding
	// up the rest of the part or the heartbeat.
	Unreadable []string
	// ClusterRepaired reports that the cluster document could not be
	// decoded and was rewritten from the snapshot.
	ClusterRepaired bool
	// Announce are the fleet documents the change feed (fleetfeed)
	// carries for this event: each fleet document written, its WrittenAt
	// the commit's time (the upsert's or delete's, a snapshot's
	// tombstones); and for a duplicate upsert or delete the event's state
	// again, with no WrittenAt: a re-announcement, which repairs a lost
	// announcement of the first delivery and changes no reader that holds
	// that version.
	Announce []*Document
}

// Writes reports whether the outcome writes the document.
func (o Outcome) Writes() bool {
	return o != OutcomeDuplicate && o != OutcomeStale
}

// ApplyFleetEvent decides what an upsert or delete does to the stored
// document (nil when there is none) and returns the document to write, or
// nil when nothing may be written.
//
// Only a strictly newer version is applied. A newer version is applied even
// when it carries the state already stored: the stored version is the fence
// against older events still in flight, and not advancing it would let one
// of them overwrite the newer state. (A state S at 1, S' at 2 and S again at
// 3, delivered 1, 3, 2, must end as S.) Redeliveries of one event carry the
// same version and write nothing.
func ApplyFleetEvent(stored *Document, ev Event, now time.Time, retention time.Duration) (*Document, Outcome) {
	if stored != nil {
		switch c := ev.Version.Compare(stored.Version); {
		case c == 0:
			return nil, OutcomeDuplicate
		case c < 0:
			return nil, OutcomeStale
		}
	}
	now = now.Truncate(time.Microsecond).UTC()
	observed := ev.ObservedAt.Time()
	if ev.Kind == KindDelete {
		return Tombstone(ev.Key(), ev.Version, ev.Publisher, observed, now, retention), OutcomeDeleted
	}
	id := ev.Key().DocID()
	d := &Document{
		Cluster:          ev.Cluster,
		Namespace:        ev.Namespace,
		Name:             ev.Name,
		Version:          ev.Version,
		DocID:            id,
		DocIDHash:        IDHash(id),
		UID:              ev.Fleet.UID,
		Labels:           ev.Fleet.Labels,
		Annotations:      ev.Fleet.Annotations,
		Spec:             &ev.Fleet.Spec,
		Status:           NewDocStatus(ev.Fleet.Status),
		Degraded:         ev.Fleet.Degraded,
		Autoscalers:      ev.Fleet.Autoscalers,
		GameServerLabels: ev.Fleet.GameServerLabels,
		Publisher:        ev.Publisher,
		ObservedAt:       observed,
		IngestedAt:       now,
		LagMillis:        now.Sub(observed).Milliseconds(),
	}
	if ev.Fleet.Rollout.Known() {
		d.Rollout = &ev.Fleet.Rollout
	}
	switch {
	case stored == nil:
		return d, OutcomeCreated
	case stored.Deleted:
		return d, OutcomeRevived
	default:
		return d, OutcomeUpdated
	}
}

// MaxFeedShards is the most shards the fleet documents' change feed can be
// spread over. Readers follow the fleets written since a point by
// writtenAt, a field every write increases: Firestore sustains about 500
// writes a second into one index range whose values increase like that,
// so the feed's index leads with the shard and each shard's range takes
// its own share — 500 writes a second per shard, 15 000 at 30
// (docs/capacity.md). 30 is Firestore's limit on the values of one "in"
// filter: one query, and one realtime listener, still follow every shard.
const MaxFeedShards = 30

// DefaultFeedShards is the feed's shards unless a deployment asks for
// more (FEED_SHARDS; Terraform's feed_shards): one range, 500 writes a
// second, five times the reference deployment's changes.
const DefaultFeedShards = 1

// FeedShard is a fleet document's shard among shards (1 to
// MaxFeedShards): its ID's IDHash modulo shards, so that the fleets, not
// their writes in time, spread the feed, and a fleet stays in one shard.
func FeedShard(docID string, shards int) int64 { return IDHash(docID) % int64(max(shards, 1)) }

// ValidateFeedShards checks a deployment's feed shards.
func ValidateFeedShards(shards int) error {
	if shards < 1 || shards > MaxFeedShards {
		return fmt.Errorf("%w: feed shards %d: want 1 to %d (Firestore's limit on an \"in\" filter)", ErrInvalid, shards, MaxFeedShards)
	}
	return nil
}

// IDHash is a document ID's 32-bit FNV-1a hash: a sum of them over a
// snapshot part's fleets fits an int64 for any number of fleets.
func IDHash(docID string) int64 {
	h := fnv.New32a()
	h.Write([]byte(docID))
	return int64(h.Sum32())
}

// Tombstone returns the document of a deleted fleet at version v.
func Tombstone(k Key, v Version, p Publisher, observed, now time.Time, retention time.Duration) *Document {
	now = now.Truncate(time.Microsecond).UTC()
	expire := now.Add(retention)
	return &Document{
		Cluster:    k.Cluster,
		Namespace:  k.Namespace,
		Name:       k.Name,
		Deleted:    true,
		Version:    v,
		DocID:      k.DocID(),
		DocIDHash:  IDHash(k.DocID()),
		Publisher:  p,
		ObservedAt: observed,
		IngestedAt: now,
		LagMillis:  now.Sub(observed).Milliseconds(),
		ExpireAt:   &expire,
	}
}

// ReconcileSnapshot decides whether a snapshot part makes the stored
// document a tombstone: when it is live, inside the part's range, absent from
// it, and older than the snapshot. A fleet the publisher had when it took
// the snapshot is listed; one it created later has a newer version. What is
// left was deleted before the snapshot, possibly while no publisher ran.
func ReconcileSnapshot(stored *Document, snap Event, now time.Time, retention time.Duration) *Document {
	ref := stored.Key().Ref()
	if stored.Deleted || stored.Cluster != snap.Cluster || !snap.Snapshot.Covers(ref) ||
		snap.Snapshot.Lists(ref) || stored.Version.Compare(snap.Version) >= 0 {
		return nil
	}
	return Tombstone(stored.Key(), snap.Version, snap.Publisher, snap.ObservedAt.Time(), now, retention)
}

// ApplySnapshotToCluster returns the cluster document a snapshot part
// writes, or nil when the stored one is from the same or a newer snapshot
// (the other parts of one snapshot write nothing more).
func ApplySnapshotToCluster(stored *ClusterDocument, snap Event, now time.Time) *ClusterDocument {
	if stored != nil && snap.Version.Compare(stored.SnapshotVersion) <= 0 {
		return nil
	}
	now = now.Truncate(time.Microsecond).UTC()
	return &ClusterDocument{
		Cluster:           snap.Cluster,
		Labels:            nonNil(snap.Snapshot.ClusterLabels),
		Publisher:         snap.Publisher,
		SnapshotVersion:   snap.Version,
		SnapshotParts:     int64(snap.Snapshot.Parts),
		HeartbeatAt:       snap.ObservedAt.Time(),
		IngestedAt:        now,
		FleetCount:        snap.Snapshot.FleetCount,
		Totals:            *NewDocStatus(snap.Snapshot.Totals),
		TotalsTruncated:   snap.Snapshot.TotalsTruncated,
		AllocatorEndpoint: snap.Snapshot.AllocatorEndpoint,
	}
}

// NewDocStatus derives the stored status, with available capacities.
func NewDocStatus(s Status) *DocStatus {
	return &DocStatus{
		Replicas:          s.Replicas,
		ReadyReplicas:     s.ReadyReplicas,
		ReservedReplicas:  s.ReservedReplicas,
		AllocatedReplicas: s.AllocatedReplicas,
		Allocations:       s.Allocations,
		Players:           DocCapacity{Count: s.Players.Count, Capacity: s.Players.Capacity, Available: available(s.Players.Capacity, s.Players.Count)},
		Counters:          docAggregates(s.Counters),
		Lists:             docAggregates(s.Lists),
	}
}

func docAggregates(m map[string]Aggregate) map[string]DocAggregate {
	out := make(map[string]DocAggregate, len(m))
	for k, a := range m {
		out[k] = DocAggregate{
			Count:             a.Count,
			Capacity:          a.Capacity,
			AllocatedCount:    a.AllocatedCount,
			AllocatedCapacity: a.AllocatedCapacity,
			Available:         available(a.Capacity, a.Count),
		}
	}
	return out
}

// available is capacity - count, never negative: a game server may report
// a count above its capacity while it shrinks, and "-3 rooms free" would
// make sums of availability lie.
func available(capacity, count int64) int64 { return max(0, capacity-count) }

// Page is what one read of the store returned: the documents it could
// decode, and the IDs of those it could not (left as they are, reported).
type Page[T any] struct {
	Docs       []*T
	Unreadable []string
}
