package fleet

import (
	"fmt"
	"math"
	"testing"

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
