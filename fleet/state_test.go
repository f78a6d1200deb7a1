package fleet

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStatusAddSaturates(t *testing.T) {
	var s Status
	huge := Status{Replicas: math.MaxInt64 - 1, Counters: map[string]Aggregate{"rooms": {Count: 1, Capacity: math.MaxInt64}}}
	s.Add(huge)
	s.Add(huge)
	assert.Equal(t, int64(math.MaxInt64), s.Replicas)
	assert.Equal(t, int64(math.MaxInt64), s.Counters["rooms"].Capacity, "no wrap-around to a negative sum")
	assert.Equal(t, int64(2), s.Counters["rooms"].Count)
	require.NoError(t, s.validate("totals"))
}

func TestSatAdd(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{
		{1, 2, 3},
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{math.MinInt64, -1, math.MinInt64},
		{-5, 3, -2},
		{math.MaxInt64, math.MinInt64, -1},
	} {
		assert.Equal(t, c.want, SatAdd(c.a, c.b), "%d + %d", c.a, c.b)
	}
	r := RolloutOf(3, []GameServerSet{{Name: "a", Current: true, ReadyReplicas: math.MaxInt64, AllocatedReplicas: math.MaxInt64}})
	assert.True(t, r.Complete, "a current set running int64's most game servers runs the 3 desired, not a negative number")
}

func TestStatusBoundKeepsTheLargestCapacities(t *testing.T) {
	var s Status
	for i := range MaxAggregates + 1 {
		s.Add(Status{Counters: map[string]Aggregate{fmt.Sprintf("c%04d", i): {Capacity: int64(i)}}})
	}
	s.Add(Status{Lists: map[string]Aggregate{"players": {Capacity: 1}}})
	require.Error(t, s.validate("totals"), "1001 names are more than a status may hold")
	assert.True(t, s.Bound())
	assert.Len(t, s.Counters, MaxAggregates)
	assert.NotContains(t, s.Counters, "c0000", "the smallest capacity goes")
	assert.Contains(t, s.Counters, "c1000")
	assert.Len(t, s.Lists, 1)
	require.NoError(t, s.validate("totals"))
	assert.False(t, s.Bound(), "nothing more to cut")
}

func TestFitDropsOptionalPartsInOrder(t *testing.T) {
	base := State{UID: "u", Labels: map[string]string{"platform": "pc"}, Spec: Spec{Replicas: 3, Scheduling: "Packed"},
		Status: Status{ReadyReplicas: 3, Counters: map[string]Aggregate{"rooms": {Capacity: 4}}, Lists: map[string]Aggregate{"players": {Capacity: 8}}}}
	got, ok := Fit(base)
	require.True(t, ok)
	assert.Empty(t, got.Degraded, "a valid, small state is published as it is")
	assert.True(t, got.Equal(base))

	big := base.Clone()
	big.Annotations = map[string]string{}
	for i := range MaxAnnotations {
		big.Annotations[fmt.Sprintf("fleetcast.dev/a%02d", i)] = strings.Repeat("x", MaxAnnotationValue)
	}
	got, ok = Fit(big)
	require.True(t, ok)
	assert.Nil(t, got.Annotations)
	assert.Equal(t, base.Status.Counters, got.Status.Counters, "only as much as needed is dropped")
	assert.Equal(t, base.Labels, got.Labels)
	assert.Contains(t, got.Degraded, "dropped annotations: ")
	assert.Contains(t, got.Degraded, "exceeds")
	require.NoError(t, got.Validate())
	assert.NotNil(t, big.Annotations, "the input is not modified")

	invalid := base.Clone()
	invalid.Annotations = map[string]string{"fleetcast.dev/notes": strings.Repeat("y", MaxAnnotationValue+1)}
	got, ok = Fit(invalid)
	require.True(t, ok)
	assert.Contains(t, got.Degraded, "fleet.annotations")

	manyCounters := base.Clone()
	manyCounters.Status.Counters = map[string]Aggregate{}
	for i := range MaxAggregates {
		manyCounters.Status.Counters[fmt.Sprintf("%0255d", i)] = Aggregate{Count: math.MaxInt64, Capacity: math.MaxInt64}
	}
	got, ok = Fit(manyCounters)
	require.True(t, ok)
	assert.Nil(t, got.Status.Counters)
	assert.Nil(t, got.Status.Lists, "lists go before counters")
	assert.Equal(t, base.Labels, got.Labels)
	assert.Contains(t, got.Degraded, "dropped lists, counters: ", "only what was there is named")

	labelled := base.Clone()
	labelled.GameServerLabels = map[string]string{}
	for i := range MaxLabels {
		labelled.GameServerLabels[fmt.Sprintf("example.com/k%03d", i)] = strings.Repeat("v", 63)
	}
	got, ok = Fit(labelled)
	require.True(t, ok)
	assert.Nil(t, got.GameServerLabels)
	assert.Equal(t, base.Labels, got.Labels, "the game servers' labels go before the fleet's")
	assert.Contains(t, got.Degraded, "dropped lists, counters, game server labels: ", "after the counters and lists")

	crowded := base.Clone()
	var sets []GameServerSet
	for i := range MaxRolloutSets + 1 {
		sets = append(sets, GameServerSet{Name: fmt.Sprintf("set-%03d", i), Current: i == 0})
	}
	crowded.Rollout = RolloutOf(3, sets)
	crowded.Autoscalers = []Autoscaler{{Name: "scaler", Policy: AutoscalerPolicy{Type: "Buffer", BufferSize: "2"}}}
	got, ok = Fit(crowded)
	require.True(t, ok)
	assert.False(t, got.Rollout.Known())
	assert.Nil(t, got.Autoscalers, "autoscalers go before the rollout")
	assert.Equal(t, base.Status.Counters, got.Status.Counters)
	assert.Contains(t, got.Degraded, "dropped autoscalers, rollout: ")
	assert.Contains(t, got.Degraded, "fleet.rollout.sets")

	unknown := base.Clone()
	unknown.Spec.Scheduling = "Spread"
	got, ok = Fit(unknown)
	require.True(t, ok)
	assert.Empty(t, got.Spec.Scheduling)
	assert.Contains(t, got.Degraded, "spec")

	_, ok = Fit(State{UID: strings.Repeat("u", MaxUIDLen+1)})
	assert.False(t, ok, "an invalid UID cannot be fitted")
}

// TestAdmit: the ingest side stores a state that fits as it is, and
// reduces one that does not — past MaxStateBytes, or with a time no honest
// clock can have written — saying so after what the publisher said,
// instead of dropping the fleet.
func TestAdmit(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	scaler := Autoscaler{Name: "buffer", Policy: AutoscalerPolicy{Type: "Buffer", BufferSize: "2"},
		Status: AutoscalerStatus{LastScaleTime: MicrosOf(now.Add(-time.Hour))}}
	base := State{UID: "u", Labels: map[string]string{"platform": "pc"}, Spec: Spec{Replicas: 3},
		Status: Status{ReadyReplicas: 3, Counters: map[string]Aggregate{"rooms": {Capacity: 4}}}, Autoscalers: []Autoscaler{scaler}}

	got, changed, err := Admit(base, now, DefaultMaxClockSkew)
	require.NoError(t, err)
	assert.False(t, changed)
	assert.True(t, got.Equal(base))

	for name, lastScale := range map[string]Micros{
		"after year 9999":         MaxMicros + 1,
		"far ahead of the clock":  MicrosOf(now.Add(time.Hour)),
		"int64's latest microsec": math.MaxInt64,
	} {
		t.Run(name, func(t *testing.T) {
			s := base.Clone()
			s.Degraded = "dropped annotations: the publisher's reason"
			s.Autoscalers[0].Status.LastScaleTime = lastScale
			got, changed, err := Admit(s, now, DefaultMaxClockSkew)
			require.NoError(t, err)
			assert.True(t, changed)
			assert.Nil(t, got.Autoscalers, "the autoscalers go, the fleet stays")
			assert.Equal(t, base.Labels, got.Labels)
			assert.Equal(t, base.Status.Counters, got.Status.Counters)
			assert.True(t, strings.HasPrefix(got.Degraded, "dropped annotations: the publisher's reason; at ingest, dropped autoscalers: "), got.Degraded)
			assert.Contains(t, got.Degraded, "lastScaleTime")
			require.NoError(t, got.Validate())
		})
	}

	labelled := base.Clone()
	labelled.Labels = map[string]string{}
	for i := range MaxLabels {
		labelled.Labels[fmt.Sprintf("%s/k%061d", strings.Repeat("p", 190), i)] = strings.Repeat("v", 63)
	}
	require.NoError(t, labelled.Validate(), "Kubernetes allows each label")
	got, changed, err = Admit(labelled, now, DefaultMaxClockSkew)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Nil(t, got.Labels)
	assert.Contains(t, got.Degraded, fmt.Sprintf("exceeds %d", MaxStateBytes))
	b, err := json.Marshal(got)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(b), MaxStateBytes)

	_, _, err = Admit(State{UID: "u", Spec: Spec{Replicas: -1}}, now, DefaultMaxClockSkew)
	assert.ErrorIs(t, err, ErrInvalid, "a negative count cannot be reduced away")
	assert.ErrorContains(t, err, "fleet.spec.replicas")
}

func TestRolloutOf(t *testing.T) {
	set := func(name string, current bool, replicas, ready, reserved, allocated int64) GameServerSet {
		return GameServerSet{Name: name, Current: current, Replicas: replicas, ReadyReplicas: ready,
			ReservedReplicas: reserved, AllocatedReplicas: allocated}
	}
	for _, tc := range []struct {
		name     string
		desired  int64
		sets     []GameServerSet
		complete bool
	}{
		{"no set yet", 3, nil, false},
		{"only an old set", 3, []GameServerSet{set("old", false, 3, 3, 0, 0)}, false},
		{"new set ready, old one not empty", 3, []GameServerSet{set("old", false, 1, 0, 0, 1), set("new", true, 3, 3, 0, 0)}, false},
		{"new set short of desired", 3, []GameServerSet{set("old", false, 0, 0, 0, 0), set("new", true, 3, 2, 0, 0)}, false},
		{"old set empty, new one running", 3, []GameServerSet{set("old", false, 0, 0, 0, 0), set("new", true, 3, 1, 1, 1)}, true},
		{"a single set, scaled to zero", 0, []GameServerSet{set("only", true, 0, 0, 0, 0)}, true},
		{"two current sets", 1, []GameServerSet{set("a", true, 1, 1, 0, 0), set("b", true, 0, 0, 0, 0)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := RolloutOf(tc.desired, tc.sets)
			assert.Equal(t, tc.complete, r.Complete)
			assert.True(t, slices.IsSortedFunc(r.Sets, func(a, b GameServerSet) int { return strings.Compare(a.Name, b.Name) }))
			assert.Equal(t, len(tc.sets) > 0, r.Known())
		})
	}
}
