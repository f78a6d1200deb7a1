package fleetview

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
)

// world is fleetapitest's World, and an Engine over it.
type world struct{ *fleetapitest.World }

func newWorld(tb testing.TB) *world {
	tb.Helper()
	return &world{fleetapitest.NewWorld()}
}

// engine returns an Engine over src on w's clock; unless opts say
// otherwise, every read is strict.
func (w *world) engine(src Source, opts Options) *Engine {
	opts.Now = w.Clock.Now
	if opts.MaxStaleness == 0 {
		opts.MaxStaleness = -1
	}
	return New(src, opts)
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
