package allocator

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
)

// rankWorld is fleetapitest's clusters pc, ps5 and xbox, and a stale one,
// switch, each with fleets of mode=ranked and mode=casual game servers in
// namespace games (ps5's in games-ps5) with ready Ready game servers.
func rankWorld(t *testing.T, ready int64) *fleetapi.Service {
	t.Helper()
	w := fleetapitest.NewWorld()
	w.Heartbeat("switch", time.Hour)
	for _, c := range []string{"pc", "ps5", "xbox", "switch"} {
		ns := "games"
		if c == "ps5" {
			ns = "games-ps5"
		}
		for _, mode := range []string{"ranked", "casual"} {
			w.Put(&fleet.Document{Cluster: c, Namespace: ns, Name: mode, UID: "u", GameServerLabels: map[string]string{"mode": mode},
				Status: &fleet.DocStatus{Replicas: ready, ReadyReplicas: ready}, Publisher: fleet.Publisher{ID: "p"}})
		}
	}
	w.Settle()
	return fleetapi.NewService(w.Mem, fleetapi.Options{Now: w.Clock.Now, MaxStaleness: -1, StaleAfter: time.Minute})
}

func rank(t *testing.T, svc *fleetapi.Service, r Request, policies []Policy, rnd *rand.Rand) []string {
	t.Helper()
	var out []string
	require.NoError(t, svc.Read(t.Context(), func(read *fleetapi.Read) error {
		for _, c := range Rank(read, r, Applicable(r, policies), 100, rnd) {
			out = append(out, c.Key().String()+"#"+string(rune('0'+c.Selector)))
		}
		return nil
	}))
	return out
}

func TestRankOrdersByPriorityThenSelectorThenChance(t *testing.T) {
	svc := rankWorld(t, 5)
	policies := []Policy{
		{Name: "pc", Cluster: "pc", Priority: 0, Weight: 1},
		{Name: "ps5", Cluster: "ps5", Priority: 3, Weight: 1, Namespace: "games-ps5"},
		{Name: "xbox", Cluster: "xbox", Priority: 0, Weight: 0},
		{Name: "switch", Cluster: "switch", Priority: 0, Weight: 1},
	}
	r := Request{Namespace: "games", Selectors: []Selector{
		{MatchLabels: map[string]string{"mode": "ranked"}},
		{MatchLabels: map[string]string{"mode": "casual"}},
	}}
	assert.Equal(t, []string{"pc/games/ranked#0", "pc/games/casual#1", "ps5/games-ps5/ranked#0", "ps5/games-ps5/casual#1"},
		rank(t, svc, r, policies, rand.New(rand.NewPCG(1, 2))),
		"priority 0 before 3, the first selector before the second; xbox weighs 0, switch is stale; ps5's game servers are in its policy's namespace")

	r.MultiCluster, r.PolicyLabels = true, map[string]string{"tier": "gold"}
	policies[1].Labels = map[string]string{"tier": "gold"}
	assert.Equal(t, []string{"ps5/games-ps5/ranked#0", "ps5/games-ps5/casual#1"}, rank(t, svc, r, policies, rand.New(rand.NewPCG(1, 2))),
		"multiClusterSetting: only the policies its selector chooses")

	r.Namespace = "other"
	r.MultiCluster = false
	assert.Equal(t, []string{"ps5/games-ps5/ranked#0", "ps5/games-ps5/casual#1"}, rank(t, svc, r, policies, rand.New(rand.NewPCG(1, 2))),
		"the request's namespace where the policy names none")
}

// TestRankDrawsInProportionToWeightTimesCapacity: of two clusters of one
// priority, with weights 1 and 3 and equal capacity, the second comes
// first about three times in four.
func TestRankDrawsInProportionToWeightTimesCapacity(t *testing.T) {
	svc := rankWorld(t, 5)
	policies := []Policy{{Name: "pc", Cluster: "pc", Weight: 1}, {Name: "xbox", Cluster: "xbox", Weight: 3}}
	r := Request{Namespace: "games", Selectors: []Selector{{MatchLabels: map[string]string{"mode": "ranked"}}}}
	rnd := rand.New(rand.NewPCG(3, 4))
	first := map[string]int{}
	const draws = 4000
	for range draws {
		first[rank(t, svc, r, policies, rnd)[0]]++
	}
	assert.InDelta(t, 0.75, float64(first["xbox/games/ranked#0"])/draws, 0.03, "%v", first)
}
