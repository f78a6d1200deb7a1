package allocator

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fleetcast/fleetcast/fleet"
)

// gameFleet is a fleet of 10 game servers, 4 Ready and 5 Allocated, whose
// template labels them mode=ranked, with a counter rooms: 30 available in
// all, 12 of them on the Allocated game servers.
func gameFleet() *fleet.Document {
	return &fleet.Document{Cluster: "pc", Namespace: "games", Name: "ranked-v1", GameServerLabels: map[string]string{"mode": "ranked"},
		Rollout: &fleet.Rollout{Sets: []fleet.GameServerSet{{Name: "ranked-v1-abc"}}},
		Status: &fleet.DocStatus{Replicas: 10, ReadyReplicas: 4, AllocatedReplicas: 5, Players: fleet.DocCapacity{Count: 20, Capacity: 100, Available: 80},
			Counters: map[string]fleet.DocAggregate{"rooms": {Count: 10, Capacity: 40, AllocatedCount: 8, AllocatedCapacity: 20, Available: 30}}}}
}

func TestMatchReadsTheGameServersLabels(t *testing.T) {
	d := gameFleet()
	for _, c := range []struct {
		labels map[string]string
		match  bool
	}{
		{nil, true},
		{map[string]string{"mode": "ranked"}, true},
		{map[string]string{"mode": "casual"}, false},
		{map[string]string{"region": "eu"}, false},
		{map[string]string{FleetLabel: "ranked-v1", "mode": "ranked"}, true},
		{map[string]string{FleetLabel: "ranked-v2"}, false},
		{map[string]string{GameServerSetLabel: "ranked-v1-abc"}, true},
		{map[string]string{GameServerSetLabel: "ranked-v1-old"}, false},
	} {
		_, ok := Selector{MatchLabels: c.labels}.Match(d)
		assert.Equal(t, c.match, ok, "%v", c.labels)
	}
	d.Rollout = nil
	_, ok := Selector{MatchLabels: map[string]string{GameServerSetLabel: "any"}}.Match(d)
	assert.True(t, ok, "sets unknown: not left out for them")
	d.GameServerLabels = nil
	_, ok = Selector{MatchLabels: map[string]string{"mode": "ranked"}}.Match(d)
	assert.False(t, ok, "a fleet whose game servers' labels are unknown (an older publisher) has none")
}

func TestMatchWeighsTheCapacityTheSelectorNeeds(t *testing.T) {
	d := gameFleet()
	for name, c := range map[string]struct {
		s        Selector
		capacity int64
		ok       bool
	}{
		"a Ready one":            {Selector{}, 4, true},
		"an Allocated one":       {Selector{Allocated: true}, 5, true},
		"players":                {Selector{Players: 80}, 80, true},
		"too many players":       {Selector{Players: 81}, 0, false},
		"rooms on Ready ones":    {Selector{Counters: map[string]int64{"rooms": 18}}, 18, true},
		"too many rooms":         {Selector{Counters: map[string]int64{"rooms": 19}}, 0, false},
		"rooms on Allocated":     {Selector{Allocated: true, Counters: map[string]int64{"rooms": 12}}, 12, true},
		"too many on Allocated":  {Selector{Allocated: true, Counters: map[string]int64{"rooms": 13}}, 0, false},
		"a counter it lacks":     {Selector{Counters: map[string]int64{"seats": 0}}, 0, false},
		"a list it lacks":        {Selector{Lists: map[string]int64{"players": 0}}, 0, false},
		"the scarcest one named": {Selector{Players: 1, Counters: map[string]int64{"rooms": 1}}, 18, true},
	} {
		capacity, ok := c.s.Match(d)
		assert.Equal(t, c.ok, ok, name)
		assert.Equal(t, c.capacity, capacity, name)
	}
	d.Status.ReadyReplicas = 0
	_, ok := Selector{}.Match(d)
	assert.False(t, ok, "no Ready game server")
	d.Status.ReadyReplicas = 50
	capacity, _ := Selector{}.Match(d)
	assert.Equal(t, int64(10), capacity, "never more Ready than it runs")
}
