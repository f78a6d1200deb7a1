// Package fleetapitest provides an in-memory fleetapi.Source for tests of
// the read model that need no Firestore.
package fleetapitest

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetcast/fleetcast/fleet"
)

// Memory is a fleetapi.Source over documents held in memory. Like
// Firestore, it stamps every write's writtenAt with its clock (to the
// millisecond), answers WrittenSince reads with an inclusive bound, and
// bills one read per document returned and at least one per query. A
// write can be held back, visible only later than its stamp, as a
// commit is between its server timestamp and its visibility.
type Memory struct {
	now      func() time.Time
	mu       sync.Mutex
	fleets   map[string]fleet.Document
	clusters map[string]fleet.ClusterDocument
	reads    int64
	// listeners are the running FollowFleets of Listening.
	listeners map[*listener]struct{}
	// Err, if set, fails every read.
	Err error
}

// NewMemory returns an empty store stamping writes with now.
func NewMemory(now func() time.Time) *Memory {
	return &Memory{now: now, fleets: map[string]fleet.Document{}, clusters: map[string]fleet.ClusterDocument{},
		listeners: map[*listener]struct{}{}}
}

// PutFleet writes a fleet document (a tombstone when d.Deleted).
func (m *Memory) PutFleet(d fleet.Document) { m.HoldFleet(d)() }

// HoldFleet stamps a fleet document now and returns the function that
// makes it visible.
func (m *Memory) HoldFleet(d fleet.Document) (commit func()) {
	d.WrittenAt = m.now().Truncate(time.Millisecond)
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.fleets[d.Key().DocID()] = d
		for l := range m.listeners {
			l.push(d)
		}
	}
}

// PutCluster writes a cluster document.
func (m *Memory) PutCluster(c fleet.ClusterDocument) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c.WrittenAt = m.now().Truncate(time.Millisecond)
	m.clusters[c.Cluster] = c
}

// Expire removes a fleet document without a trace, as Firestore's TTL
// policy removes an expired tombstone.
func (m *Memory) Expire(k fleet.Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.fleets, k.DocID())
}

// Reads returns the reads billed so far.
func (m *Memory) Reads() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads
}

// LiveFleets implements fleetapi.Source: in document ID order.
func (m *Memory) LiveFleets(_ context.Context, each func(*fleet.Document)) ([]string, error) {
	p, err := read(m, m.fleets, func(d fleet.Document) bool { return !d.Deleted }, fleetWritten)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(p.Docs, func(a, b *fleet.Document) int { return strings.Compare(a.Key().DocID(), b.Key().DocID()) })
	for _, d := range p.Docs {
		each(d)
	}
	return p.Unreadable, nil
}

// Clusters implements fleetapi.Source.
func (m *Memory) Clusters(context.Context) (fleet.Page[fleet.ClusterDocument], error) {
	return read(m, m.clusters, func(fleet.ClusterDocument) bool { return true }, clusterWritten)
}

// FleetsWrittenSince implements fleetapi.Source.
func (m *Memory) FleetsWrittenSince(_ context.Context, since time.Time) (fleet.Page[fleet.Document], error) {
	return read(m, m.fleets, func(d fleet.Document) bool { return !d.WrittenAt.Before(since) }, fleetWritten)
}

// ClustersWrittenSince implements fleetapi.Source.
func (m *Memory) ClustersWrittenSince(_ context.Context, since time.Time) (fleet.Page[fleet.ClusterDocument], error) {
	return read(m, m.clusters, func(c fleet.ClusterDocument) bool { return !c.WrittenAt.Before(since) }, clusterWritten)
}

func fleetWritten(d *fleet.Document) time.Time          { return d.WrittenAt }
func clusterWritten(c *fleet.ClusterDocument) time.Time { return c.WrittenAt }

func read[T any](m *Memory, docs map[string]T, keep func(T) bool, written func(*T) time.Time) (fleet.Page[T], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++ // a query is billed at least one read
	if m.Err != nil {
		return fleet.Page[T]{}, m.Err
	}
	var p fleet.Page[T]
	for _, d := range docs {
		if keep(d) {
			p.Docs = append(p.Docs, new(d))
		}
	}
	m.reads += int64(max(0, len(p.Docs)-1))
	slices.SortFunc(p.Docs, func(a, b *T) int { return cmp.Compare(written(a).UnixNano(), written(b).UnixNano()) })
	return p, nil
}

// Listening is a Memory that is also a fleetapi.Follower: a listener
// delivers each fleet write when it becomes visible, in order, and bills
// a read per document delivered and at least one when it starts, as a
// Firestore realtime listener does.
type Listening struct{ *Memory }

// FollowFleets implements fleetapi.Follower. Its read times are the
// Memory's clock when it delivers.
func (l Listening) FollowFleets(ctx context.Context, since time.Time, apply func(fleet.Page[fleet.Document], time.Time)) error {
	m := l.Memory
	ln := &listener{wake: make(chan struct{}, 1)}
	m.mu.Lock()
	if m.Err != nil {
		m.mu.Unlock()
		return m.Err
	}
	var first fleet.Page[fleet.Document]
	for _, d := range m.fleets {
		if !d.WrittenAt.Before(since) {
			first.Docs = append(first.Docs, new(d))
		}
	}
	slices.SortFunc(first.Docs, func(a, b *fleet.Document) int { return cmp.Compare(a.WrittenAt.UnixNano(), b.WrittenAt.UnixNano()) })
	m.reads += int64(max(1, len(first.Docs)))
	m.listeners[ln] = struct{}{}
	readTime := m.now()
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.listeners, ln)
		m.mu.Unlock()
	}()
	apply(first, readTime)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ln.wake:
		}
		ln.mu.Lock()
		docs, err := ln.queue, ln.err
		ln.queue = nil
		ln.mu.Unlock()
		if len(docs) > 0 {
			m.mu.Lock()
			m.reads += int64(len(docs))
			readTime := m.now()
			m.mu.Unlock()
			apply(fleet.Page[fleet.Document]{Docs: docs}, readTime)
		}
		if err != nil {
			return err
		}
	}
}

// BreakListeners ends every running listener with err, after what they
// had to deliver.
func (m *Memory) BreakListeners(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for l := range m.listeners {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		l.signal()
	}
}

// Listeners returns how many listeners run.
func (m *Memory) Listeners() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.listeners)
}

// listener is one FollowFleets: what it has to deliver.
type listener struct {
	mu    sync.Mutex
	queue []*fleet.Document
	err   error
	wake  chan struct{} // holds a signal while there is news
}

func (l *listener) push(d fleet.Document) {
	l.mu.Lock()
	l.queue = append(l.queue, &d)
	l.mu.Unlock()
	l.signal()
}

func (l *listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}
