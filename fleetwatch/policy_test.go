package fleetwatch_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// TestPolicies: Pick draws in proportion to ready replicas, a counter's, a
// list's or the players' available capacity, or a caller's function;
// prefers clusters by their labels, in order, falling back to any; and
// never picks a fleet without capacity.
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
	client := fleetcastv1connect.NewInformationServiceClient(testhttp.Client, w.srv.URL)
	v, err := fleetwatch.WatchAPI(t.Context(), client, fleetwatch.Options{})
	require.NoError(t, err)

	game := labels.SelectorFromSet(labels.Set{"game": "x"})
	rnd := rand.New(rand.NewPCG(1, 2))
	pick := func(p fleetwatch.Policy) (string, int) {
		t.Helper()
		p.Rand = rnd
		f, tier, err := v.Choose(game, p)
		require.NoError(t, err)
		return f.Name, tier
	}
	// shares picks n times and checks how often each fleet came, and that
	// every pick came from tier.
	shares := func(p fleetwatch.Policy, tier int, want map[string]float64, msg string) {
		t.Helper()
		const n = 4000
		got := map[string]float64{}
		for range n {
			name, gotTier := pick(p)
			require.Equal(t, tier, gotTier, msg)
			got[name] += 1.0 / n
		}
		require.Len(t, got, len(want), "%s: %v", msg, got)
		for k, w := range want {
			assert.InDelta(t, w, got[k], 0.03, "%s: %s of %v", msg, k, got)
		}
	}
	shares(fleetwatch.Policy{}, 0, map[string]float64{"a": 5.0 / 9, "b": 3.0 / 9, "c": 1.0 / 9}, "by ready")
	shares(fleetwatch.Policy{Counter: "rooms"}, 0, map[string]float64{"a": 0.1, "b": 0.9}, "by rooms: c has none")
	shares(fleetwatch.Policy{Rank: fleetwatch.ByCounter("rooms")}, 0, map[string]float64{"a": 0.1, "b": 0.9}, "ByCounter")
	shares(fleetwatch.Policy{Rank: fleetwatch.ByList("slots")}, 0, map[string]float64{"b": 0.2, "c": 0.8}, "ByList")
	shares(fleetwatch.Policy{Rank: fleetwatch.ByPlayers}, 0, map[string]float64{"a": 0.7, "c": 0.3}, "ByPlayers")
	shares(fleetwatch.Policy{Rank: func(f fleetapi.Fleet) int64 { return 10 - f.ReadyReplicas }}, 0,
		map[string]float64{"a": 5.0 / 21, "b": 7.0 / 21, "c": 9.0 / 21}, "a caller's function")

	us := labels.SelectorFromSet(labels.Set{"region": "us"})
	ap := labels.SelectorFromSet(labels.Set{"region": "ap"})
	mars := labels.SelectorFromSet(labels.Set{"region": "mars"})
	shares(fleetwatch.Policy{Prefer: []labels.Selector{us, ap}}, 0, map[string]float64{"b": 1}, "the first preference with a fleet")
	shares(fleetwatch.Policy{Rank: fleetwatch.ByPlayers, Prefer: []labels.Selector{us, ap}}, 1, map[string]float64{"c": 1},
		"us has no player capacity: the next preference")
	shares(fleetwatch.Policy{Prefer: []labels.Selector{mars}}, 1, map[string]float64{"a": 5.0 / 9, "b": 3.0 / 9, "c": 1.0 / 9},
		"no preferred cluster has one: any cluster, from the fallback")

	// A cluster that claims more ready game servers than it runs is
	// ranked by those it runs.
	w.seq++
	w.mem.PutFleet(fleet.Document{Cluster: "ps5", Namespace: "games", Name: "liar", UID: "u", Version: fleet.Version{Term: 1, Seq: w.seq},
		Labels: map[string]string{"game": "x"}, Spec: &fleet.Spec{Replicas: 2},
		Status: &fleet.DocStatus{Replicas: 2, ReadyReplicas: math.MaxInt64}})
	require.Eventually(t, func() bool { return len(v.Fleets(game)) == 4 }, 10*time.Second, 10*time.Millisecond)
	shares(fleetwatch.Policy{}, 0, map[string]float64{"a": 5.0 / 11, "b": 3.0 / 11, "c": 1.0 / 11, "liar": 2.0 / 11},
		"ready is clamped to the replicas: 2, not MaxInt64")
	assert.Equal(t, int64(2), fleetwatch.ByReady(fleetapi.Fleet{CurrentReplicas: 2, ReadyReplicas: math.MaxInt64}))

	// One that claims, consistently, the most game servers a number holds
	// weighs twice the median fleet (3), not MaxInt64 (fleetapi.CapacityBound).
	w.seq++
	w.mem.PutFleet(fleet.Document{Cluster: "xbox", Namespace: "games", Name: "huge", UID: "u", Version: fleet.Version{Term: 1, Seq: w.seq},
		Labels: map[string]string{"game": "x"}, Spec: &fleet.Spec{Replicas: math.MaxInt64},
		Status: &fleet.DocStatus{Replicas: math.MaxInt64, ReadyReplicas: math.MaxInt64}})
	require.Eventually(t, func() bool { return len(v.Fleets(game)) == 5 }, 10*time.Second, 10*time.Millisecond)
	shares(fleetwatch.Policy{}, 0, map[string]float64{"a": 5.0 / 17, "b": 3.0 / 17, "c": 1.0 / 17, "liar": 2.0 / 17, "huge": 6.0 / 17},
		"a claim beyond twice the median weighs twice the median")

	_, err = v.Pick(game, fleetwatch.Policy{Counter: "nope"})
	assert.ErrorIs(t, err, fleetwatch.ErrNoFleet, "no capacity anywhere")
}
