package fleetwatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestBackoffDoublesWithJitter: each wait is drawn from the upper half of
// a delay that doubles from 100 ms up to 10 s, and a success starts over.
func TestBackoffDoublesWithJitter(t *testing.T) {
	var b backoff
	seen := map[time.Duration]bool{}
	for _, d := range []time.Duration{100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000} {
		d *= time.Millisecond
		w := b.wait()
		assert.GreaterOrEqual(t, w, d/2, "delay %s", d)
		assert.LessOrEqual(t, w, d, "delay %s", d)
		seen[w] = true
	}
	assert.Greater(t, len(seen), 1, "the waits are drawn at random")
	b.reset()
	assert.LessOrEqual(t, b.wait(), minBackoff)

	// Many clients failing together spread their retries.
	waits := map[time.Duration]bool{}
	for range 100 {
		var c backoff
		c.wait()
		waits[c.wait()] = true
	}
	assert.Greater(t, len(waits), 50, "100 clients' second retries")
}
