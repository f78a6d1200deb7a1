package fleetapi

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of what one cluster's data may do to answers about the others:
// every cluster publishes its own numbers, and the read side sums them.

// TestSumsOverClustersSaturate: a cluster reporting int64's largest
// number of ready game servers does not wrap another's figures negative
// in /v1/labels.
func TestSumsOverClustersSaturate(t *testing.T) {
	w := newWorld(t)
	liar := doc("pc", "games", "liar", map[string]string{"version": "1.42"}, math.MaxInt64, nil)
	liar.Status.AllocatedReplicas = math.MaxInt64
	w.put(liar)
	w.put(doc("ps5", "games", "honest", map[string]string{"version": "1.42"}, 5, nil))
	svc := w.service(Options{})

	lv, err := svc.LabelValues(t.Context(), "version", false)
	require.NoError(t, err)
	require.Len(t, lv.Values, 1)
	assert.Equal(t, int64(math.MaxInt64), lv.Values[0].ReadyReplicas, "saturated, not wrapped")
	assert.Equal(t, int64(math.MaxInt64), lv.Values[0].AllocatedReplicas)
	assert.Equal(t, int64(2), lv.Values[0].Fleets)
}
