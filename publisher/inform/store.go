// Package inform is the publisher's single-cluster mode: the read model
// over the publisher's own informer cache, and the server that answers
// fleetcast.v1.InformationService from it over TLS — mutual when a client
// CA is given — as agones-allocator answers allocations. A studio with one
// cluster asks that cluster what it can serve without Pub/Sub or
// Firestore; with several, every publisher serves its own cluster beside
// the multi-cluster query side.
//
// The Store is written as the ingest function writes Firestore, by the
// domain's own rules (fleet.ApplyFleetEvent, fleet.ApplySnapshotToCluster),
// so that fleetapi's view, filters, pages and watches answer from it
// exactly as they answer from Firestore. Its versions are the instance's
// own: term 1, and a sequence that grows with every change it sees.
package inform

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
)

// Store holds one cluster's fleets as documents, kept current by the
// publisher's informers (Upsert, Delete) and its heartbeat (Heartbeat). It
// is a fleetapi.Follower: a view follows its writes as they happen. It
// writes nothing when a fleet's state did not change, so a watch hears of
// real changes only. Tombstones are kept for fleet.DefaultTombstoneRetention,
// as Firestore's TTL policy keeps them, then dropped.
type Store struct {
	cluster   string
	publisher fleet.Publisher
	labels    map[string]string
	allocator string // the advertised allocator endpoint
	now       func() time.Time

	mu         sync.Mutex
	seq        int64
	fleets     map[string]*fleet.Document // by document ID, tombstones included
	states     map[string]fleet.State     // the live fleets' states, for the totals
	clusterDoc *fleet.ClusterDocument
	listeners  map[*listener]struct{}
	// stamped is the newest writtenAt given: every write is stamped after
	// the one before, as Firestore's commit times are.
	stamped time.Time
}

var _ fleetapi.Follower = (*Store)(nil)

// NewStore returns an empty store of cluster, whose documents name
// publisher and whose heartbeats carry labels; now is its clock.
func NewStore(cluster string, publisher fleet.Publisher, labels map[string]string, now func() time.Time) *Store {
	return &Store{cluster: cluster, publisher: publisher, labels: maps.Clone(labels), now: now,
		fleets: map[string]*fleet.Document{}, states: map[string]fleet.State{}, listeners: map[*listener]struct{}{}}
}

// SetAllocatorEndpoint sets the allocator endpoint the cluster's record
// advertises (before the store serves).
func (s *Store) SetAllocatorEndpoint(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allocator = e
}

// stamp returns the next write's time: now, or just after the previous
// write's when the clock has not moved on (or stepped back). Held: mu.
func (s *Store) stamp() time.Time {
	t := s.now().UTC().Truncate(time.Microsecond)
	if !t.After(s.stamped) {
		t = s.stamped.Add(time.Microsecond)
	}
	s.stamped = t
	return t
}

// Upsert records a fleet's state as the informers see it now; nothing is
// written when it is the state already held.
func (s *Store) Upsert(k fleet.Key, st fleet.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := k.DocID()
	if old, ok := s.states[id]; ok && old.Equal(st) {
		return
	}
	s.apply(fleet.Event{Kind: fleet.KindUpsert, Namespace: k.Namespace, Name: k.Name, Fleet: st.Clone()})
	s.states[id] = st.Clone()
}

// Delete records that a fleet is gone.
func (s *Store) Delete(k fleet.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := k.DocID()
	if _, ok := s.states[id]; !ok {
		return
	}
	delete(s.states, id)
	s.apply(fleet.Event{Kind: fleet.KindDelete, Namespace: k.Namespace, Name: k.Name})
}

// apply writes an event's document as the ingest function would. Held: mu.
func (s *Store) apply(ev fleet.Event) {
	s.seq++
	now := s.stamp()
	ev.SchemaVersion, ev.Cluster, ev.Version = fleet.SchemaVersion, s.cluster, fleet.Version{Term: 1, Seq: s.seq}
	ev.Publisher, ev.ObservedAt = s.publisher, fleet.MicrosOf(now)
	id := ev.Key().DocID()
	d, _ := fleet.ApplyFleetEvent(s.fleets[id], ev, now, fleet.DefaultTombstoneRetention)
	if d == nil {
		return // never: every version is newer than the last
	}
	d.WrittenAt = now
	s.fleets[id] = d
	for l := range s.listeners {
		l.push(d)
	}
	s.expire(now)
}

// expire drops the tombstones past their retention. Held: mu.
func (s *Store) expire(now time.Time) {
	for id, d := range s.fleets {
		if d.Deleted && d.ExpireAt != nil && now.After(*d.ExpireAt) {
			delete(s.fleets, id)
		}
	}
}

// Heartbeat writes the cluster's document as a snapshot would: its
// labels, the live fleets' count and totals, and the heartbeat time, now.
// The read model judges the cluster stale when heartbeats stop (the
// informers stopped syncing).
func (s *Store) Heartbeat() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var totals fleet.Status
	for _, st := range s.states {
		totals.Add(st.Status)
	}
	truncated := totals.Bound()
	s.seq++
	now := s.stamp()
	part := fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)[0]
	part.ClusterLabels, part.FleetCount, part.Totals, part.TotalsTruncated = s.labels, int64(len(s.states)), totals, truncated
	part.AllocatorEndpoint = s.allocator
	c := fleet.ApplySnapshotToCluster(s.clusterDoc, fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindSnapshot,
		Cluster: s.cluster, Version: fleet.Version{Term: 1, Seq: s.seq}, ObservedAt: fleet.MicrosOf(now), Publisher: s.publisher, Snapshot: part}, now)
	if c == nil {
		return // never: every version is newer than the last
	}
	c.WrittenAt = now
	s.clusterDoc = c
}

// LiveFleets implements fleetapi.Source.
func (s *Store) LiveFleets(_ context.Context, each func(*fleet.Document)) ([]string, error) {
	s.mu.Lock()
	var live []*fleet.Document
	for _, d := range s.fleets {
		if !d.Deleted {
			live = append(live, d)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(live, func(a, b *fleet.Document) int { return cmp.Compare(a.DocID, b.DocID) })
	for _, d := range live {
		each(d)
	}
	return nil, nil
}

// Clusters implements fleetapi.Source: this cluster, once it has had a
// heartbeat.
func (s *Store) Clusters(context.Context) (fleet.Page[fleet.ClusterDocument], error) {
	return s.clustersSince(time.Time{}), nil
}

// ClustersWrittenSince implements fleetapi.Source.
func (s *Store) ClustersWrittenSince(_ context.Context, since time.Time) (fleet.Page[fleet.ClusterDocument], error) {
	return s.clustersSince(since), nil
}

func (s *Store) clustersSince(since time.Time) fleet.Page[fleet.ClusterDocument] {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p fleet.Page[fleet.ClusterDocument]
	if s.clusterDoc != nil && !s.clusterDoc.WrittenAt.Before(since) {
		p.Docs = append(p.Docs, s.clusterDoc)
	}
	return p
}

// FleetsWrittenSince implements fleetapi.Source: tombstones included, in
// the order they were written.
func (s *Store) FleetsWrittenSince(_ context.Context, since time.Time) (fleet.Page[fleet.Document], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fleet.Page[fleet.Document]{Docs: s.writtenSince(since)}, nil
}

// writtenSince lists the documents written at or after since, oldest
// first. Held: mu.
func (s *Store) writtenSince(since time.Time) []*fleet.Document {
	var docs []*fleet.Document
	for _, d := range s.fleets {
		if !d.WrittenAt.Before(since) {
			docs = append(docs, d)
		}
	}
	slices.SortFunc(docs, func(a, b *fleet.Document) int { return a.WrittenAt.Compare(b.WrittenAt) })
	return docs
}

// FollowFleets implements fleetapi.Follower: the documents written at or
// after since, then each write as it happens, until ctx ends. Documents
// are never changed once written (a write replaces one), so they are
// shared with the view, not copied.
func (s *Store) FollowFleets(ctx context.Context, since time.Time, apply func(fleet.Page[fleet.Document], time.Time)) error {
	l := &listener{queue: map[string]*fleet.Document{}, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	first := s.writtenSince(since)
	readTime := s.stamped
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	apply(fleet.Page[fleet.Document]{Docs: first}, readTime)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.wake:
		}
		l.mu.Lock()
		docs, readTime := slices.Collect(maps.Values(l.queue)), l.readTime
		l.queue = map[string]*fleet.Document{}
		l.mu.Unlock()
		slices.SortFunc(docs, func(a, b *fleet.Document) int { return a.WrittenAt.Compare(b.WrittenAt) })
		if len(docs) > 0 {
			apply(fleet.Page[fleet.Document]{Docs: docs}, readTime)
		}
	}
}

// listener is one FollowFleets: the writes it has yet to deliver. The
// queue holds at most one document per fleet, its newest: a listener
// behind holds what the store holds, never a backlog.
type listener struct {
	mu       sync.Mutex
	queue    map[string]*fleet.Document // by document ID
	readTime time.Time
	wake     chan struct{} // holds a signal while there is news
}

func (l *listener) push(d *fleet.Document) {
	l.mu.Lock()
	l.queue[d.DocID] = d
	l.readTime = d.WrittenAt
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}
