package fleetview

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
)

// world is an in-memory store with three clusters whose heartbeats are
// fresh on clk.
type world struct {
	mem *fleetapitest.Memory
	clk *testingclock.FakeClock
	seq int64
}

func newWorld(tb testing.TB) *world {
	tb.Helper()
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	w := &world{mem: fleetapitest.NewMemory(clk.Now), clk: clk}
	for _, c := range []string{"pc", "ps5", "xbox"} {
		w.heartbeat(c, 0)
	}
	return w
}

// engine returns an Engine over src on w's clock; unless opts say
// otherwise, every read is strict.
func (w *world) engine(src Source, opts Options) *Engine {
	opts.Now = w.clk.Now
	if opts.MaxStaleness == 0 {
		opts.MaxStaleness = -1
	}
	return New(src, opts)
}

// heartbeat writes a cluster document ingested age ago.
func (w *world) heartbeat(cluster string, age time.Duration) {
	w.seq++
	w.mem.PutCluster(fleet.ClusterDocument{
		Cluster: cluster, Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: w.seq}, SnapshotParts: 1,
		IngestedAt: w.clk.Now().Add(-age), HeartbeatAt: w.clk.Now().Add(-age),
	})
}

// put writes a live fleet at the next version.
func (w *world) put(d *fleet.Document) {
	w.seq++
	d.Version = fleet.Version{Term: 1, Seq: w.seq}
	w.mem.PutFleet(*d)
}

// settle lets more than CommitLag pass: what was written before is
// behind the next round's point.
func (w *world) settle() { w.clk.Step(time.Second) }

// remove writes a fleet's tombstone.
func (w *world) remove(cluster, ns, name string) {
	w.seq++
	w.mem.PutFleet(*fleet.Tombstone(fleet.Key{Cluster: cluster, Namespace: ns, Name: name}, fleet.Version{Term: 1, Seq: w.seq},
		fleet.Publisher{ID: "p"}, w.clk.Now(), w.clk.Now(), time.Hour))
}

func doc(cluster, ns, name string, labels map[string]string, ready int64) *fleet.Document {
	return &fleet.Document{
		Cluster: cluster, Namespace: ns, Name: name, Labels: labels, Version: fleet.Version{Term: 1, Seq: 1},
		UID: "u", Spec: &fleet.Spec{Replicas: ready},
		Status: &fleet.DocStatus{ReadyReplicas: ready, Lists: map[string]fleet.DocAggregate{}},
	}
}

// read returns a snapshot of a read now, failing the test on an error.
func read(tb testing.TB, e *Engine) *Snapshot {
	tb.Helper()
	s, err := e.Read(tb.Context())
	require.NoError(tb, err)
	return s
}

// ids are the document IDs of a snapshot's fleets, in its order.
func ids(s *Snapshot) []string {
	var out []string
	for id := range s.Entries() {
		out = append(out, id)
	}
	return out
}

// key is a fleet's document ID.
func key(cluster, ns, name string) string {
	return fleet.Key{Cluster: cluster, Namespace: ns, Name: name}.DocID()
}

// sorted returns the keys of names in the pc cluster's games namespace,
// sorted.
func sorted(names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, key("pc", "games", n))
	}
	slices.Sort(out)
	return out
}
