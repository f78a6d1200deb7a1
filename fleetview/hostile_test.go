package fleetview

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestALoadHoldsNoMoreThanTheView: a full load admits documents as they
// are read, so that it never holds more than the view may, however many a
// cluster has: the one over budget is dropped as it grows, and its later
// documents are not kept.
func TestALoadHoldsNoMoreThanTheView(t *testing.T) {
	per := DocBytes(doc("xbox", "games", "hog-0000", nil, 1))
	l := newLoading(40 * per)
	for i := range 5 {
		l.add(doc("pc", "games", fmt.Sprintf("pc-%d", i), nil, 1))
	}
	for i := range 1000 {
		l.add(doc("xbox", "games", fmt.Sprintf("hog-%04d", i), nil, 1))
		require.LessOrEqual(t, l.bytes, 40*per)
	}
	for i := range 5 {
		l.add(doc("zz", "games", fmt.Sprintf("zz-%d", i), nil, 1))
	}
	assert.Equal(t, map[string]bool{"xbox": true}, l.overBudget)
	assert.Len(t, l.docs(), 10, "pc's and zz's")
}
