package fleetwatch_test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
)

// TestPolicies: Pick ranks by ready replicas, a counter's, a list's or the
// players' available capacity, or a caller's function; prefers clusters
// by their labels, in order, falling back to any; and never picks a fleet
// without capacity.
func TestPolicies(t *testing.T) {
	w := newAPIWorld(t)
	region := map[string]string{"pc": "eu", "ps5": "us", "xbox": "ap"}
	for c, r := range region {
		w.seq++
		w.mem.PutCluster(fleet.ClusterDocument{Cluster: c, Labels: map[string]string{"region": r}, SnapshotVersion: fleet.Version{Term: 1, Seq: w.seq},
			SnapshotParts: 1, IngestedAt: time.Now(), HeartbeatAt: time.Now()})
	}
	put := func(cluster, name string, ready, rooms, slots, players int64) {
		w.seq++
		w.mem.PutFleet(fleet.Document{Cluster: cluster, Namespace: "games", Name: name, UID: "u", Version: fleet.Version{Term: 1, Seq: w.seq},
			Labels: map[string]string{"game": "x"}, Spec: &fleet.Spec{Replicas: ready},
			Status: &fleet.DocStatus{Replicas: ready, ReadyReplicas: ready, Players: fleet.DocCapacity{Capacity: players, Available: players},
				Counters: map[string]fleet.DocAggregate{"rooms": {Capacity: rooms, Available: rooms}},
				Lists:    map[string]fleet.DocAggregate{"slots": {Capacity: slots, Available: slots}}}})
	}
	put("pc", "a", 5, 1, 0, 7)
	put("ps5", "b", 3, 9, 2, 0)
	put("xbox", "c", 1, 0, 8, 3)
	client := fleetcastv1connect.NewInformationServiceClient(http.DefaultClient, w.srv.URL)
	v, err := fleetwatch.WatchAPI(t.Context(), client, fleetwatch.Options{})
	require.NoError(t, err)

	game := labels.SelectorFromSet(labels.Set{"game": "x"})
	pick := func(p fleetwatch.Policy) (string, int) {
		t.Helper()
		f, tier, err := v.Choose(game, p)
		require.NoError(t, err)
		return f.Name, tier
	}
	name := func(p fleetwatch.Policy) string { n, _ := pick(p); return n }
	assert.Equal(t, "a", name(fleetwatch.Policy{}), "most ready")
	assert.Equal(t, "b", name(fleetwatch.Policy{Counter: "rooms"}))
	assert.Equal(t, "b", name(fleetwatch.Policy{Rank: fleetwatch.ByCounter("rooms")}))
	assert.Equal(t, "c", name(fleetwatch.Policy{Rank: fleetwatch.ByList("slots")}))
	assert.Equal(t, "a", name(fleetwatch.Policy{Rank: fleetwatch.ByPlayers}))
	assert.Equal(t, "c", name(fleetwatch.Policy{Rank: func(f fleetapi.Fleet) int64 { return 10 - f.ReadyReplicas }}), "a caller's function")

	us := labels.SelectorFromSet(labels.Set{"region": "us"})
	ap := labels.SelectorFromSet(labels.Set{"region": "ap"})
	mars := labels.SelectorFromSet(labels.Set{"region": "mars"})
	n, tier := pick(fleetwatch.Policy{Prefer: []labels.Selector{us, ap}})
	assert.Equal(t, "b", n, "the first preference with a fleet")
	assert.Equal(t, 0, tier)
	n, tier = pick(fleetwatch.Policy{Rank: fleetwatch.ByPlayers, Prefer: []labels.Selector{us, ap}})
	assert.Equal(t, "c", n, "us has no player capacity: the next preference")
	assert.Equal(t, 1, tier)
	n, tier = pick(fleetwatch.Policy{Prefer: []labels.Selector{mars}})
	assert.Equal(t, "a", n, "no preferred cluster has one: any cluster")
	assert.Equal(t, 1, tier, "the fallback")

	// A cluster that claims more ready game servers than it runs is
	// ranked by those it runs.
	w.seq++
	w.mem.PutFleet(fleet.Document{Cluster: "ps5", Namespace: "games", Name: "liar", UID: "u", Version: fleet.Version{Term: 1, Seq: w.seq},
		Labels: map[string]string{"game": "x"}, Spec: &fleet.Spec{Replicas: 2},
		Status: &fleet.DocStatus{Replicas: 2, ReadyReplicas: math.MaxInt64}})
	require.Eventually(t, func() bool { return len(v.Fleets(game)) == 4 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "a", name(fleetwatch.Policy{}), "ready is clamped to the replicas: 2, not MaxInt64")
	assert.Equal(t, int64(2), fleetwatch.ByReady(fleetapi.Fleet{CurrentReplicas: 2, ReadyReplicas: math.MaxInt64}))

	_, err = v.Pick(game, fleetwatch.Policy{Counter: "nope"})
	assert.ErrorIs(t, err, fleetwatch.ErrNoFleet, "no capacity anywhere")
}
