package fleetwatch

import (
	"bytes"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/logging"
)

// TestBackoffDoublesWithJitter: each wait is drawn from the upper half of
// a delay that doubles from 100 ms up to 10 s, and a new backoff starts
// over.
func TestBackoffDoublesWithJitter(t *testing.T) {
	b := retryBackoff()
	seen := map[time.Duration]bool{}
	for _, d := range []time.Duration{100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000} {
		d *= time.Millisecond
		w := b.Step()
		assert.GreaterOrEqual(t, w, d/2, "delay %s", d)
		assert.LessOrEqual(t, w, d, "delay %s", d)
		seen[w] = true
	}
	assert.Greater(t, len(seen), 1, "the waits are drawn at random")
	b = retryBackoff()
	assert.LessOrEqual(t, b.Step(), minBackoff)

	// Many clients failing together spread their retries.
	waits := map[time.Duration]bool{}
	for range 100 {
		c := retryBackoff()
		c.Step()
		waits[c.Step()] = true
	}
	assert.Greater(t, len(waits), 50, "100 clients' second retries")
}

// syncLog is a log buffer safe for the watch's goroutines.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// waits returns the waits the watch logged before its retries.
func (l *syncLog) waits(t *testing.T) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for line := range strings.Lines(l.buf.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		if ms, ok := m["inMillis"].(float64); ok {
			out = append(out, time.Duration(ms)*time.Millisecond)
		}
	}
	return out
}

// TestARefusedConnectionIsRetriedEverMoreSlowly: a stream that cannot even
// connect (a closed port) delivered nothing, so its backoff does not start
// over: each wait is at least the doubling delay's lower half. (It started
// over after every refused dial: 127 to 133 retries in 10 s.)
func TestARefusedConnectionIsRetriedEverMoreSlowly(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	var log syncLog
	client := fleetcastv1connect.NewInformationServiceClient(testhttp.Client, "http://"+addr)
	_, err = WatchAPI(t.Context(), client, Options{StartTimeout: 3 * time.Second, Log: logging.New(&log, logging.LevelWarning)})
	require.ErrorIs(t, err, ErrStartTimeout)
	waits := log.waits(t)
	require.GreaterOrEqual(t, len(waits), 3)
	for i, w := range waits {
		least := min(minBackoff<<i, maxBackoff) / 2
		assert.GreaterOrEqual(t, w, least-time.Millisecond, "retry %d of %v", i+1, waits)
	}
	assert.LessOrEqual(t, len(waits), 6, "in 3 s: about 5 retries, not 30 to 40")
}
