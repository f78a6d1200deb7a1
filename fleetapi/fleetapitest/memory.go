// Package fleetapitest provides an in-memory fleetapi.Source for tests of
// the read model that need no Firestore.
package fleetapitest

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fleetcast/fleetcast/firestoredb"
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
	// Err, if set, fails every read.
	Err error
}

// NewMemory returns an empty store stamping writes with now.
func NewMemory(now func() time.Time) *Memory {
	return &Memory{now: now, fleets: map[string]fleet.Document{}, clusters: map[string]fleet.ClusterDocument{}}
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

// LiveFleets implements fleetapi.Source.
func (m *Memory) LiveFleets(context.Context) (firestoredb.Page[fleet.Document], error) {
	return read(m, m.fleets, func(d fleet.Document) bool { return !d.Deleted }, fleetWritten)
}

// Clusters implements fleetapi.Source.
func (m *Memory) Clusters(context.Context) (firestoredb.Page[fleet.ClusterDocument], error) {
	return read(m, m.clusters, func(fleet.ClusterDocument) bool { return true }, clusterWritten)
}

// FleetsWrittenSince implements fleetapi.Source.
func (m *Memory) FleetsWrittenSince(_ context.Context, since time.Time) (firestoredb.Page[fleet.Document], error) {
	return read(m, m.fleets, func(d fleet.Document) bool { return !d.WrittenAt.Before(since) }, fleetWritten)
}

// ClustersWrittenSince implements fleetapi.Source.
func (m *Memory) ClustersWrittenSince(_ context.Context, since time.Time) (firestoredb.Page[fleet.ClusterDocument], error) {
	return read(m, m.clusters, func(c fleet.ClusterDocument) bool { return !c.WrittenAt.Before(since) }, clusterWritten)
}

func fleetWritten(d *fleet.Document) time.Time          { return d.WrittenAt }
func clusterWritten(c *fleet.ClusterDocument) time.Time { return c.WrittenAt }

func read[T any](m *Memory, docs map[string]T, keep func(T) bool, written func(*T) time.Time) (firestoredb.Page[T], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++ // a query is billed at least one read
	if m.Err != nil {
		return firestoredb.Page[T]{}, m.Err
	}
	var p firestoredb.Page[T]
	for _, d := range docs {
		if keep(d) {
			p.Docs = append(p.Docs, new(d))
		}
	}
	m.reads += int64(max(0, len(p.Docs)-1))
	slices.SortFunc(p.Docs, func(a, b *T) int { return cmp.Compare(written(a).UnixNano(), written(b).UnixNano()) })
	return p, nil
}
