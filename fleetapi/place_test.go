package fleetapi

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

// placeWorld has clusters eu-1 and eu-2 (region=eu), us (region=us) and
// ap (region=ap, stale), each advertising an allocator.
func placeWorld(t *testing.T) *world {
	t.Helper()
	w := newWorld(t)
	for c, region := range map[string]string{"eu-1": "eu", "eu-2": "eu", "us": "us", "ap": "ap"} {
		age := time.Duration(0)
		if c == "ap" {
			age = time.Hour
		}
		w.Mem.PutCluster(fleet.ClusterDocument{Cluster: c, Labels: map[string]string{"region": region}, SnapshotVersion: fleet.Version{Term: 1, Seq: w.Next()},
			SnapshotParts: 1, IngestedAt: w.Clock.Now().Add(-age - 2*time.Second), HeartbeatAt: w.Clock.Now().Add(-age), AllocatorEndpoint: c + ".example:443",
			Totals: fleet.DocStatus{Counters: map[string]fleet.DocAggregate{"rooms": {}}, Lists: map[string]fleet.DocAggregate{"slots": {}}}})
	}
	return w
}

// fleetWith is a fleet of the game "x" with ready of replicas ready and a
// rooms counter.
func fleetWith(cluster, name string, replicas, ready int64, rooms fleet.DocAggregate) *fleet.Document {
	return &fleet.Document{Cluster: cluster, Namespace: "games", Name: name, UID: "u", Labels: map[string]string{"game": "x"},
		Spec:      &fleet.Spec{Replicas: replicas},
		Status:    &fleet.DocStatus{Replicas: replicas, ReadyReplicas: ready, Counters: map[string]fleet.DocAggregate{"rooms": rooms}},
		Publisher: fleet.Publisher{ID: "p"}, ObservedAt: time.Date(2026, 11, 30, 11, 59, 59, 0, time.UTC), LagMillis: 7}
}

func placeOf(t *testing.T, svc *Service, params string) Placements {
	t.Helper()
	v, err := url.ParseQuery(params)
	require.NoError(t, err)
	req, err := ParsePlace(v)
	require.NoError(t, err, params)
	p, err := svc.Place(t.Context(), req)
	require.NoError(t, err, params)
	return p
}

func placed(p Placements) []string {
	out := []string{}
	for _, c := range p.Placements {
		out = append(out, c.Cluster+"/"+c.Name)
	}
	return out
}

// TestPlaceRanksByPriorityThenByChance: candidates come from the lowest
// priority first; within one, in an order drawn at random; each carries
// its allocator endpoint, qualifying capacity and freshness.
func TestPlaceRanksByPriorityThenByChance(t *testing.T) {
	w := placeWorld(t)
	w.Put(fleetWith("eu-1", "a", 5, 5, fleet.DocAggregate{}))
	w.Put(fleetWith("eu-2", "b", 5, 5, fleet.DocAggregate{}))
	w.Put(fleetWith("us", "c", 10, 10, fleet.DocAggregate{}))
	w.Put(fleetWith("ap", "d", 10, 10, fleet.DocAggregate{}))
	svc := w.service(Options{})
	seen := map[string]bool{}
	for range 50 {
		p := placeOf(t, svc, "selector=game%3Dx&count=3&policy=region%3Deu:0:1&policy=region%3Dus:1")
		require.Len(t, p.Placements, 3)
		assert.ElementsMatch(t, []string{"eu-1/a", "eu-2/b"}, placed(p)[:2], "priority 0 first")
		assert.Equal(t, "us/c", placed(p)[2])
		seen[placed(p)[0]] = true
		assert.Equal(t, 3, p.Eligible)
		assert.Equal(t, []string{"region=eu:0:1", "region=us:1:1"}, p.Policy)
		assert.Equal(t, "request", p.PolicySource)
		require.Len(t, p.LeftOut, 1)
		assert.Equal(t, LeftOut{Reason: StaleCluster, Fleets: 1, Clusters: []string{"ap"}, ClusterCount: 1,
			Message: "1 fleet of stale clusters (ap): no heartbeat for 1m30s"}, p.LeftOut[0])
	}
	assert.Len(t, seen, 2, "either eu fleet comes first")

	c := placeOf(t, svc, "cluster=us").Placements[0]
	assert.Positive(t, c.DrawKey, "its draw: an exponential variate over its weight")
	c.DrawKey = 0
	assert.Equal(t, Placement{Cluster: "us", Namespace: "games", Name: "c", Labels: map[string]string{"game": "x"},
		AllocatorEndpoint: "us.example:443", Resource: ResourceGameServers, Available: 10, ReadyReplicas: 10, Priority: 0, Weight: 1,
		ObservedAt: time.Date(2026, 11, 30, 11, 59, 59, 0, time.UTC), LagMillis: 7, HeartbeatAgeMillis: 2000}, c)

	// With includeStale, a stale cluster's fleet ranks after every fresh
	// one, marked.
	p := placeOf(t, svc, "includeStale=true&count=10")
	require.Len(t, p.Placements, 4)
	assert.Equal(t, "ap/d", placed(p)[3])
	assert.True(t, p.Placements[3].Stale)
}

// TestPlaceSpreadsInProportionToCapacityAndWeight: within a priority, a
// fleet comes first in proportion to its available capacity times its
// cluster's weight.
func TestPlaceSpreadsInProportionToCapacityAndWeight(t *testing.T) {
	w := placeWorld(t)
	w.Put(fleetWith("eu-1", "a", 10, 1, fleet.DocAggregate{Capacity: 10, Available: 10}))
	w.Put(fleetWith("eu-1", "b", 10, 3, fleet.DocAggregate{Capacity: 10, Available: 2}))
	w.Put(fleetWith("eu-2", "c", 10, 6, fleet.DocAggregate{Capacity: 10, Available: 8}))
	svc := w.service(Options{})
	rnd := rand.New(rand.NewPCG(7, 11))
	share := func(params string) map[string]float64 {
		v, _ := url.ParseQuery(params)
		req, err := ParsePlace(v)
		require.NoError(t, err)
		req.Rand = rnd
		const n = 20000
		counts := map[string]float64{}
		for range n {
			p, err := svc.Place(t.Context(), req)
			require.NoError(t, err)
			counts[placed(p)[0]] += 1.0 / n
		}
		return counts
	}
	near := func(want, got map[string]float64) {
		t.Helper()
		require.Len(t, got, len(want), "%v", got)
		for k, v := range want {
			assert.InDelta(t, v, got[k], 0.015, "%s of %v", k, got)
		}
	}
	near(map[string]float64{"eu-1/a": 0.1, "eu-1/b": 0.3, "eu-2/c": 0.6}, share(""))
	near(map[string]float64{"eu-1/a": 0.5, "eu-1/b": 0.1, "eu-2/c": 0.4}, share("counter=rooms"))
}

// TestPlaceWeightsScaleAClustersShare: a cluster's weight multiplies its
// fleets' chances; weight 0 drains it.
func TestPlaceWeightsScaleAClustersShare(t *testing.T) {
	w := placeWorld(t)
	w.Put(fleetWith("eu-1", "a", 5, 5, fleet.DocAggregate{}))
	w.Put(fleetWith("us", "b", 5, 5, fleet.DocAggregate{}))
	svc := w.service(Options{})
	rnd := rand.New(rand.NewPCG(3, 5))
	first := map[string]int{}
	for range 10000 {
		p, err := svc.Place(t.Context(), PlaceRequest{Policy: &Policy{Rules: []Rule{mustRule(t, "region=eu:0:1"), mustRule(t, "region=us:0:3")}}, Rand: rnd})
		require.NoError(t, err)
		first[placed(p)[0]]++
	}
	assert.InDelta(t, 0.75, float64(first["us/b"])/10000, 0.02, "%v", first)

	p := placeOf(t, svc, "policy=region%3Deu:0:0&policy=region%3Dus:0")
	assert.Equal(t, []string{"us/b"}, placed(p))
	require.Len(t, p.LeftOut, 1)
	assert.Equal(t, NotInPolicy, p.LeftOut[0].Reason)
	assert.Equal(t, []string{"eu-1"}, p.LeftOut[0].Clusters)
}

func mustRule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	require.NoError(t, err)
	return r
}

// TestPlaceClampsSelfReportedNumbers: more ready game servers than a fleet
// runs, or more available than its capacity less its count, count as what
// it has.
func TestPlaceClampsSelfReportedNumbers(t *testing.T) {
	w := placeWorld(t)
	w.Put(fleetWith("eu-1", "liar", 2, math.MaxInt64, fleet.DocAggregate{Capacity: 10, Count: 4, Available: math.MaxInt64}))
	d := fleetWith("eu-1", "players", 3, 3, fleet.DocAggregate{Capacity: -5, Count: -9, Available: 7})
	d.Status.Players = fleet.DocCapacity{Capacity: 8, Count: 6, Available: 100}
	w.Put(d)
	svc := w.service(Options{})
	p := placeOf(t, svc, "count=5")
	require.Len(t, p.Placements, 2)
	byName := map[string]Placement{}
	for _, c := range p.Placements {
		byName[c.Name] = c
	}
	assert.Equal(t, int64(2), byName["liar"].Available)
	assert.Equal(t, int64(2), byName["liar"].ReadyReplicas)
	assert.Equal(t, int64(6), placeOf(t, svc, "cluster=eu-1&counter=rooms").Placements[0].Available, "10 - 4, not MaxInt64")
	pl := placeOf(t, svc, "players=2")
	require.Len(t, pl.Placements, 1)
	assert.Equal(t, ResourcePlayers, pl.Placements[0].Resource)
	assert.Equal(t, int64(2), pl.Placements[0].Available, "8 - 6")
	assert.Empty(t, placeOf(t, svc, "players=3").Placements)
	assert.Equal(t, int64(0), AvailableOf(fleet.DocAggregate{Capacity: math.MinInt64, Count: 1, Available: 5}), "no overflow")
}

// TestPlaceSaysWhyNothingQualifies: no candidate is an answer, with each
// reason counted, its clusters named and worded.
func TestPlaceSaysWhyNothingQualifies(t *testing.T) {
	w := placeWorld(t)
	w.Put(fleetWith("eu-1", "full", 5, 0, fleet.DocAggregate{Capacity: 4, Count: 4}))
	w.Put(fleetWith("eu-2", "few", 5, 5, fleet.DocAggregate{Capacity: 4, Count: 2, Available: 2}))
	w.Put(fleetWith("us", "drained", 5, 5, fleet.DocAggregate{Capacity: 4, Available: 4}))
	w.Put(fleetWith("ap", "stale", 5, 5, fleet.DocAggregate{Capacity: 4, Available: 4}))
	other := fleetWith("us", "other-game", 5, 5, fleet.DocAggregate{Capacity: 4, Available: 4})
	other.Labels = map[string]string{"game": "y"}
	w.Put(other)
	svc := w.service(Options{Policy: Policy{Rules: []Rule{mustRule(t, "region=eu:0"), mustRule(t, "region=ap:1")}}})
	p := placeOf(t, svc, "selector=game%3Dx&counter=rooms&minAvailable=3")
	assert.Empty(t, p.Placements)
	assert.Zero(t, p.Eligible)
	assert.Equal(t, "default", p.PolicySource)
	assert.Equal(t, []LeftOut{
		{Reason: FilteredOut, Fleets: 1, Clusters: []string{"us"}, ClusterCount: 1, Message: "1 fleet does not match the filter"},
		{Reason: StaleCluster, Fleets: 1, Clusters: []string{"ap"}, ClusterCount: 1, Message: "1 fleet of stale clusters (ap): no heartbeat for 1m30s"},
		{Reason: NotInPolicy, Fleets: 1, Clusters: []string{"us"}, ClusterCount: 1, Message: "1 fleet of clusters the policy gives no rule or weight 0 (us)"},
		{Reason: TooLittleCapacity, Fleets: 2, Clusters: []string{"eu-1", "eu-2"}, ClusterCount: 2, Message: "2 fleets have less than the match needs (3 available in counter rooms)"},
	}, p.LeftOut)

	// A counter no cluster reports is a typo, refused as /v1/fleets does.
	_, err := svc.Place(t.Context(), PlaceRequest{Need: Need{Counter: "seats"}})
	assert.ErrorContains(t, err, `parameter counter: no cluster reports a counter "seats"`)
}

// TestPlaceNamesAtMostTenClustersPerReason, and counts them all.
func TestPlaceNamesAtMostTenClustersPerReason(t *testing.T) {
	w := newWorld(t)
	for i := range 12 {
		c := fmt.Sprintf("c%02d", i)
		w.Heartbeat(c, time.Hour)
		w.Put(fleetWith(c, "f", 1, 1, fleet.DocAggregate{}))
	}
	p := placeOf(t, w.service(Options{}), "")
	require.Len(t, p.LeftOut, 1)
	assert.Equal(t, 12, p.LeftOut[0].ClusterCount)
	assert.Equal(t, []string{"c00", "c01", "c02", "c03", "c04", "c05", "c06", "c07", "c08", "c09"}, p.LeftOut[0].Clusters)
}

func TestNeedQualify(t *testing.T) {
	st := &fleet.DocStatus{Replicas: 4, ReadyReplicas: 3, Players: fleet.DocCapacity{Capacity: 10, Count: 4, Available: 6},
		Counters: map[string]fleet.DocAggregate{"rooms": {Capacity: 8, Count: 3, Available: 5}},
		Lists:    map[string]fleet.DocAggregate{"slots": {Capacity: 2, Count: 2}}}
	for _, tt := range []struct {
		need  Need
		avail int64
		ok    bool
	}{
		{Need{}, 3, true},
		{Need{GameServers: 3}, 3, true},
		{Need{GameServers: 4}, 3, false},
		{Need{Players: 6}, 6, true},
		{Need{Players: 7}, 6, false},
		{Need{Counter: "rooms"}, 5, true},
		{Need{Counter: "rooms", CounterAvailable: 6}, 5, false},
		{Need{Counter: "rooms", GameServers: 4}, 5, false},
		{Need{Counter: "seats"}, 0, false},
		{Need{List: "slots"}, 0, false},
		{Need{Counter: "rooms", List: "slots"}, 5, false},
	} {
		avail, ok := tt.need.Qualify(st)
		assert.Equal(t, []any{tt.avail, tt.ok}, []any{avail, ok}, "%+v", tt.need)
	}
	assert.Equal(t, "4 available in counter rooms, 2 ready game servers", Need{Counter: "rooms", CounterAvailable: 4, GameServers: 2}.String())
	assert.Equal(t, "1 ready game server", Need{}.String())
}

func TestParsePlace(t *testing.T) {
	for params, want := range map[string]string{
		"count=0":                    "parameter count: \"0\": want an integer from 1 to 100",
		"count=101":                  "parameter count: \"101\": want an integer from 1 to 100",
		"gameServers=-1":             "parameter gameServers: \"-1\": want a non-negative integer",
		"orderBy=ready":              "parameter orderBy: unknown parameter",
		"pageSize=3":                 "parameter pageSize: unknown parameter",
		"policy=region%3Deu":         "parameter policy: \"region=eu\": want SELECTOR:PRIORITY[:WEIGHT], e.g. region=eu-west:0:100",
		"policy=region%3Deu:-1":      "parameter policy: \"region=eu:-1\": priority \"-1\": want an integer from 0 (first) to 2147483647",
		"policy=:0:1000001":          "parameter policy: \":0:1000001\": weight \"1000001\": want an integer from 0 (never) to 1000000",
		"policy=in+(:0":              "parameter policy: \"in (:0\": the cluster selector:",
		"selector=version+in+(1":     "parameter selector:",
		"minAvailable=3":             "parameter minAvailable: needs counter, the key it applies to",
		"count=1&count=2":            "parameter count: given 2 times; give it once",
		"players=x":                  "parameter players: \"x\": want a non-negative integer",
		"policy=:0&" + manyRules(31): "parameter policy: 32 rules: at most 30",
	} {
		v, err := url.ParseQuery(params)
		require.NoError(t, err)
		_, err = ParsePlace(v)
		assert.ErrorContains(t, err, want, params)
	}
	// Values gives the request back.
	v, err := url.ParseQuery("cluster=eu-1&selector=game%3Dx&counter=rooms&minAvailable=4&list=slots&players=2&gameServers=1&count=5&policy=region%3Deu:0:100&policy=:1:1&includeStale=true")
	require.NoError(t, err)
	req, err := ParsePlace(v)
	require.NoError(t, err)
	assert.Equal(t, Need{GameServers: 1, Players: 2, Counter: "rooms", CounterAvailable: 4, List: "slots"}, req.Need)
	assert.Empty(t, req.Filter.Counter, "the counter is a need, not a filter")
	again, err := ParsePlace(req.Values())
	require.NoError(t, err)
	assert.Equal(t, req.Values(), again.Values())
	assert.Equal(t, v, req.Values())
}

func manyRules(n int) string {
	v := url.Values{}
	for i := range n {
		v.Add("policy", fmt.Sprintf(":%d", i))
	}
	return v.Encode()
}

// TestACapacityLiarDrawsAtMostTwiceItsShare: a fleet that claims the
// most capacity a number holds (through its status, or through what its
// game servers set through the SDK: counters, lists, players), among 20
// honest fleets of 500 ready game servers and 100 rooms, comes first in
// at most twice its fair share of placements (2 ÷ 21), weighed by ready
// game servers, by a counter, by players and under a policy; before the
// bound it came first in all of them.
func TestACapacityLiarDrawsAtMostTwiceItsShare(t *testing.T) {
	w := placeWorld(t)
	for i := range 20 {
		d := fleetWith([]string{"eu-1", "eu-2", "us"}[i%3], fmt.Sprintf("honest-%02d", i), 500, 500, fleet.DocAggregate{Capacity: 100, Available: 100})
		d.Status.Players = fleet.DocCapacity{Capacity: 1000, Available: 1000}
		w.Put(d)
	}
	huge := int64(math.MaxInt64)
	liar := fleetWith("eu-1", "liar", huge, huge, fleet.DocAggregate{Capacity: huge, Available: huge})
	liar.Status.Players = fleet.DocCapacity{Capacity: huge, Available: huge}
	w.Put(liar)
	svc := w.service(Options{})
	const n = 20_000
	fair := 1.0 / 21
	for _, params := range []string{"", "counter=rooms", "players=4", "counter=rooms&policy=region%3Deu:0:3&policy=region%3Dus:0:3"} {
		v, err := url.ParseQuery(params)
		require.NoError(t, err)
		req, err := ParsePlace(v)
		require.NoError(t, err)
		req.Rand = rand.New(rand.NewPCG(3, 5))
		liarFirst := 0
		for range n {
			p, err := svc.Place(t.Context(), req)
			require.NoError(t, err)
			if p.Placements[0].Name == "liar" {
				liarFirst++
			}
		}
		share := float64(liarFirst) / n
		t.Logf("%q: the liar came first in %.2f %% of %d placements (a fair share: %.2f %%)", params, 100*share, n, 100*fair)
		assert.LessOrEqual(t, share, 2*fair, "%q", params)
		assert.Greater(t, share, fair/2, "%q: the liar still takes matches", params)
	}
}

// TestNthIsTheSortedElement: the selection behind CapacityBound finds
// what sorting would, with duplicates, in every position.
func TestNthIsTheSortedElement(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 7))
	for range 500 {
		a := make([]int64, 1+rng.IntN(40))
		for i := range a {
			a[i] = rng.Int64N(int64(1 + rng.IntN(10)))
		}
		sorted := slices.Sorted(slices.Values(a))
		k := rng.IntN(len(a))
		require.Equal(t, sorted[k], nth(slices.Clone(a), k), "%v, k=%d", a, k)
	}
	assert.Equal(t, float64(0), CapacityBound(nil))
	assert.Equal(t, 2*float64(5), CapacityBound([]int64{9, 5, 1}))
	assert.Equal(t, 2*float64(9), CapacityBound([]int64{9, 1}), "of two, the larger")
}

// TestPlaceReadsTheIndexButCountsEveryFleet: Place reads only the fleets
// the view's index says a filter may match, and counts the others from
// the index's lists; whatever the filter — labels by each operator, a
// namespace, clusters, a minimum, a deleted fleet — every live fleet is
// either eligible or left out for a reason, and those the filter leaves
// out are the ones a scan of every fleet finds, by cluster.
func TestPlaceReadsTheIndexButCountsEveryFleet(t *testing.T) {
	w := placeWorld(t)
	rng := rand.New(rand.NewPCG(7, 8))
	var live []*fleet.Document
	for i := range 300 {
		c := []string{"eu-1", "eu-2", "us", "ap", "gone"}[rng.IntN(5)] // gone: a cluster without a document
		d := fleetWith(c, fmt.Sprintf("f%03d", i), 5, int64(rng.IntN(6)), fleet.DocAggregate{Capacity: 4, Available: int64(rng.IntN(5))})
		d.Namespace = []string{"games", "beta"}[rng.IntN(2)]
		d.Labels = map[string]string{"game": []string{"x", "y", "z"}[rng.IntN(3)], "tier": fmt.Sprint(rng.IntN(4))}
		if rng.IntN(3) == 0 {
			d.Labels["canary"] = "true"
		}
		w.Put(d)
		live = append(live, d)
	}
	gone := live[0]
	w.Remove(gone.Cluster, gone.Namespace, gone.Name)
	live = live[1:]
	svc := w.service(Options{Policy: Policy{Rules: []Rule{mustRule(t, "region=eu:0"), mustRule(t, "region=ap:1")}}})
	for _, params := range []string{
		"", "selector=game%3Dx", "selector=game%21%3Dx", "selector=game+in+(x,z),canary", "selector=%21canary",
		"selector=tier%3E1", "namespace=beta", "cluster=eu-1&cluster=us", "minReady=3&selector=game+notin+(y)",
		"cluster=ap&includeStale=true", "selector=game%3Dnone", "selector=tier%3E1,game%3Dx&namespace=games&counter=rooms",
	} {
		p := placeOf(t, svc, params+"&count=100")
		req, err := ParsePlace(mustQuery(t, params))
		require.NoError(t, err)
		filter := req.Filter.normalized()
		filter.Counter, filter.List, filter.IncludeStale = "", "", true
		want := map[string]int{}
		for _, d := range live {
			if !filter.Matches(d, false) {
				want[d.Cluster]++
			}
		}
		got := map[string]int{}
		counted := p.Eligible
		for _, l := range p.LeftOut {
			counted += l.Fleets
			if l.Reason == FilteredOut {
				n := l.Fleets
				for _, c := range l.Clusters {
					got[c] = -1 // named; the count is the reason's
				}
				got["*"] = n
			}
		}
		total := 0
		for _, n := range want {
			total += n
		}
		assert.Equal(t, len(live), counted, "%s: every live fleet eligible or left out", params)
		if total > 0 {
			assert.Equal(t, total, got["*"], "%s: left out by the filter", params)
			delete(got, "*")
			assert.ElementsMatch(t, slices.Collect(maps.Keys(want)), slices.Collect(maps.Keys(got)), "%s: the clusters named", params)
		} else {
			assert.Empty(t, got, params)
		}
	}
}

func mustQuery(t *testing.T, s string) url.Values {
	t.Helper()
	v, err := url.ParseQuery(s)
	require.NoError(t, err)
	return v
}
