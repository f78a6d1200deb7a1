package allocator

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
)

func TestParseReadsTheSelectorsInAgonesOrder(t *testing.T) {
	sel := func(mode string) *pb.GameServerSelector {
		return &pb.GameServerSelector{MatchLabels: map[string]string{"mode": mode}}
	}
	r, err := Parse(&pb.AllocationRequest{
		PreferredGameServerSelectors: []*pb.GameServerSelector{sel("a"), sel("b")},
		RequiredGameServerSelector:   sel("c"),
	})
	require.NoError(t, err)
	assert.Equal(t, DefaultNamespace, r.Namespace, "no namespace: Kubernetes' default")
	var modes []string
	for _, s := range r.Selectors {
		modes = append(modes, s.MatchLabels["mode"])
	}
	assert.Equal(t, []string{"a", "b", "c"}, modes, "the deprecated form: preferred ones, then the required one")

	r, err = Parse(&pb.AllocationRequest{Namespace: "games", GameServerSelectors: []*pb.GameServerSelector{sel("x")},
		PreferredGameServerSelectors: []*pb.GameServerSelector{sel("ignored")}})
	require.NoError(t, err)
	require.Len(t, r.Selectors, 1, "gameServerSelectors, when given, are the selectors")
	assert.Equal(t, "x", r.Selectors[0].MatchLabels["mode"])

	r, err = Parse(&pb.AllocationRequest{})
	require.NoError(t, err)
	assert.Equal(t, []Selector{{}}, r.Selectors, "none: any Ready game server")
	assert.False(t, r.MultiCluster)
}

func TestParseReadsCapacityNeeds(t *testing.T) {
	r, err := Parse(&pb.AllocationRequest{
		GameServerSelectors: []*pb.GameServerSelector{{
			GameServerState: pb.GameServerSelector_ALLOCATED,
			Players:         &pb.PlayerSelector{MinAvailable: 4, MaxAvailable: 10},
			Counters:        map[string]*pb.CounterSelector{"rooms": {MinAvailable: 2, MaxCount: 9}},
			Lists:           map[string]*pb.ListSelector{"players": {ContainsValue: "p1"}},
		}},
		MultiClusterSetting: &pb.MultiClusterSetting{Enabled: true, PolicySelector: &pb.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}},
	})
	require.NoError(t, err)
	assert.Equal(t, Selector{Allocated: true, Players: 4, Counters: map[string]int64{"rooms": 2}, Lists: map[string]int64{"players": 0}}, r.Selectors[0])
	assert.True(t, r.MultiCluster)
	assert.Equal(t, map[string]string{"tier": "gold"}, r.PolicyLabels)
}

func TestParseRefusesWhatItCannotPlaceNamingTheField(t *testing.T) {
	many := make([]*pb.GameServerSelector, MaxSelectors+1)
	for i := range many {
		many[i] = &pb.GameServerSelector{}
	}
	labels := map[string]string{}
	for i := range MaxSelectorTerms + 1 {
		labels["k"+strings.Repeat("x", i)] = "v"
	}
	one := func(s *pb.GameServerSelector) *pb.AllocationRequest {
		return &pb.AllocationRequest{GameServerSelectors: []*pb.GameServerSelector{s}}
	}
	for name, c := range map[string]struct {
		req  *pb.AllocationRequest
		want string
	}{
		"namespace":          {&pb.AllocationRequest{Namespace: "Games_EU"}, `namespace "Games_EU"`},
		"too many selectors": {&pb.AllocationRequest{GameServerSelectors: many}, "gameServerSelectors: 17 selectors: at most 16"},
		"too many terms":     {one(&pb.GameServerSelector{MatchLabels: labels}), "gameServerSelectors[0]: 65 match labels"},
		"label key":          {one(&pb.GameServerSelector{MatchLabels: map[string]string{"-bad": "v"}}), `gameServerSelectors[0].matchLabels key "-bad"`},
		"state":              {one(&pb.GameServerSelector{GameServerState: 7}), "gameServerSelectors[0].gameServerState: 7: want READY or ALLOCATED"},
		"players":            {one(&pb.GameServerSelector{Players: &pb.PlayerSelector{MinAvailable: 5, MaxAvailable: 2}}), "gameServerSelectors[0].players: maxAvailable 2 is below minAvailable 5"},
		"negative counter":   {one(&pb.GameServerSelector{Counters: map[string]*pb.CounterSelector{"rooms": {MinAvailable: -1}}}), `gameServerSelectors[0].counters["rooms"]: bounds must not be negative`},
		"counter range":      {one(&pb.GameServerSelector{Counters: map[string]*pb.CounterSelector{"rooms": {MinCount: 3, MaxCount: 1}}}), "maxCount 1 is below minCount 3"},
		"list key":           {one(&pb.GameServerSelector{Lists: map[string]*pb.ListSelector{"__x__": {}}}), `gameServerSelectors[0].lists["__x__"]`},
		"list range":         {one(&pb.GameServerSelector{Lists: map[string]*pb.ListSelector{"p": {MinAvailable: 3, MaxAvailable: 1}}}), "maxAvailable 1 is below minAvailable 3"},
		"policy selector": {&pb.AllocationRequest{MultiClusterSetting: &pb.MultiClusterSetting{Enabled: true,
			PolicySelector: &pb.LabelSelector{MatchLabels: map[string]string{"tier": "gold!"}}}}, `multiClusterSetting.policySelector.matchLabels["tier"]`},
		"deprecated": {&pb.AllocationRequest{RequiredGameServerSelector: &pb.GameServerSelector{GameServerState: 3}}, "requiredGameServerSelector.gameServerState"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(c.req)
			require.Error(t, err)
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), c.want)
		})
	}
}
