package fleetapitest

import (
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetcast/fleetcast/fleet"
)

// World is a Memory written as the ingest function writes Firestore, on a
// fake clock: three clusters (pc, ps5, xbox) with fresh heartbeats
// reporting a counter "rooms" and a list "slots", and every document
// written at the next version. Tests of the view and of the read model
// share it.
type World struct {
	Mem   *Memory
	Clock *testingclock.FakeClock
	seq   int64
}

// NewWorld returns a World at 2026-11-30 12:00 UTC.
func NewWorld() *World {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	w := &World{Mem: NewMemory(clk.Now), Clock: clk}
	for _, c := range []string{"pc", "ps5", "xbox"} {
		w.Heartbeat(c, 0)
	}
	return w
}

// Next returns the next version's sequence number.
func (w *World) Next() int64 {
	w.seq++
	return w.seq
}

// Heartbeat writes a cluster document ingested age ago.
func (w *World) Heartbeat(cluster string, age time.Duration) {
	w.Mem.PutCluster(fleet.ClusterDocument{
		Cluster: cluster, Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: w.Next()}, SnapshotParts: 1,
		IngestedAt: w.Clock.Now().Add(-age), HeartbeatAt: w.Clock.Now().Add(-age),
		Totals: fleet.DocStatus{Counters: map[string]fleet.DocAggregate{"rooms": {}}, Lists: map[string]fleet.DocAggregate{"slots": {}}},
	})
}

// Put writes a live fleet at the next version.
func (w *World) Put(d *fleet.Document) {
	d.Version = fleet.Version{Term: 1, Seq: w.Next()}
	w.Mem.PutFleet(*d)
}

// Settle lets more than a view's CommitLag pass: what was written before
// is behind the next sync's point.
func (w *World) Settle() { w.Clock.Step(time.Second) }

// Remove writes a fleet's tombstone.
func (w *World) Remove(cluster, ns, name string) {
	w.Mem.PutFleet(*fleet.Tombstone(fleet.Key{Cluster: cluster, Namespace: ns, Name: name}, fleet.Version{Term: 1, Seq: w.Next()},
		fleet.Publisher{ID: "p"}, w.Clock.Now(), w.Clock.Now(), time.Hour))
}
