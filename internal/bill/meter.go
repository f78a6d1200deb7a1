package bill

import (
	"sync"
	"time"
)

// Meter bills one Cloud Run instance's time as request-based billing does:
// the instance is billed while it serves at least one request, from the
// start of the first to the end of the last, and each such busy period is
// rounded up to the platform's rounding (100 ms). Concurrent requests
// share the instance's time; a request alone on the instance is billed at
// least the rounding, however short it is.
//
// Its methods take the time, so that the caller's one clock decides; they
// are safe for concurrent use.
type Meter struct {
	rounding time.Duration

	mu       sync.Mutex
	active   int
	since    time.Time // start of the current busy period
	busy     time.Duration
	billed   time.Duration
	requests int64
}

// NewMeter returns a Meter that rounds each busy period up to rounding.
func NewMeter(rounding time.Duration) *Meter { return &Meter{rounding: rounding} }

// Begin records a request starting at at.
func (m *Meter) Begin(at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active == 0 {
		m.since = at
	}
	m.active++
	m.requests++
}

// End records a request, begun before, ending at at.
func (m *Meter) End(at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active--
	if m.active > 0 {
		return
	}
	period := max(at.Sub(m.since), 0)
	m.busy += period
	m.billed += roundUp(period, m.rounding)
}

// Totals returns, at at, the requests begun, the time the instance was
// busy and the time billed: a busy period still open counts up to at,
// rounded up as if it ended then (an instance that never idles is billed
// all along).
func (m *Meter) Totals(at time.Time) (requests int64, busy, billed time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	busy, billed = m.busy, m.billed
	if m.active > 0 {
		open := max(at.Sub(m.since), 0)
		busy += open
		billed += roundUp(open, m.rounding)
	}
	return m.requests, busy, billed
}

// roundUp rounds d up to a multiple of unit; a zero period still bills one
// unit, as a request always does.
func roundUp(d, unit time.Duration) time.Duration {
	if unit <= 0 {
		return d
	}
	n := (d + unit - 1) / unit
	return max(n, 1) * unit
}
