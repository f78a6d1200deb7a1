package publisher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
)

// fakeBus is a Transport that can be taken down; it records what it
// accepted, in order.
type fakeBus struct {
	mu   sync.Mutex
	down bool
	got  []fleet.Event
}

func (b *fakeBus) Send(_ context.Context, ev fleet.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return errors.New("unavailable")
	}
	b.got = append(b.got, ev)
	return nil
}

func (b *fakeBus) setDown(down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down = down
}

func (b *fakeBus) received() []fleet.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]fleet.Event(nil), b.got...)
}

func newTestSender(tb testing.TB, bus Transport) *Sender {
	tb.Helper()
	s := NewSender(SenderConfig{InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}, bus,
		clock.RealClock{}, testMetrics(tb), slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	tb.Cleanup(func() { cancel(); <-done })
	return s
}

func upsertEvent(name string, seq, ready int64) fleet.Event {
	return fleet.Event{
		SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "pc",
		Version: fleet.Version{Term: 1, Seq: seq}, ObservedAt: 1, Publisher: fleet.Publisher{ID: "p"},
		Namespace: "default", Name: name, Fleet: state(ready),
	}
}

func flush(tb testing.TB, s *Sender) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Second)
	defer cancel()
	require.NoError(tb, s.Flush(ctx))
}

func TestSenderDeliversTheLatestStateAfterAnOutage(t *testing.T) {
	bus := &fakeBus{down: true}
	s := newTestSender(t, bus)
	const fleets = 50
	for seq := int64(1); seq <= 20; seq++ {
		for f := range fleets {
			s.Enqueue(upsertEvent(string(rune('a'+f%26))+string(rune('a'+f/26)), seq, seq))
		}
		keys := map[string]struct{}{}
		s.PendingKeys(keys)
		queued, inflight := s.Queued()
		assert.LessOrEqual(t, queued, fleets, "at most one queued event per fleet")
		assert.LessOrEqual(t, inflight, fleets)
		assert.LessOrEqual(t, len(keys), fleets)
	}
	assert.Eventually(t, func() bool { return !s.Healthy() }, 5*time.Second, time.Millisecond)
	bus.setDown(false)
	flush(t, s)
	assert.True(t, s.Healthy())

	latest := map[string]fleet.Event{}
	for _, ev := range bus.received() {
		if prev, ok := latest[ev.Name]; ok {
			assert.Equal(t, 1, ev.Version.Compare(prev.Version), "one fleet's events leave in version order")
		}
		latest[ev.Name] = ev
	}
	require.Len(t, latest, fleets)
	for name, ev := range latest {
		assert.Equal(t, int64(20), ev.Version.Seq, name)
	}
	assert.Less(t, len(bus.received()), 20*fleets, "superseded states were never sent")
	assert.Greater(t, testutil.ToFloat64(s.metrics.Publishes.WithLabelValues("FLEET_UPSERT", "error")), 0.0)
}

func TestSenderDropDiscardsAndStopsRetrying(t *testing.T) {
	bus := &fakeBus{down: true}
	s := newTestSender(t, bus)
	s.Enqueue(upsertEvent("a", 1, 1))
	assert.Eventually(t, func() bool { return !s.Healthy() }, 5*time.Second, time.Millisecond)
	s.Drop()
	bus.setDown(false)
	flush(t, s)
	assert.Empty(t, bus.received(), "nothing of an ended term is published")

	s.Enqueue(upsertEvent("b", 1, 1))
	flush(t, s)
	assert.Len(t, bus.received(), 1)
}

func TestSenderFlushGivesUpAtTheDeadline(t *testing.T) {
	bus := &fakeBus{down: true}
	s := newTestSender(t, bus)
	s.Enqueue(upsertEvent("a", 1, 1))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := s.Flush(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "1 events not sent")
}

func TestSenderNeverReplacesANewerQueuedEventWithAnOlderOne(t *testing.T) {
	bus := &fakeBus{down: true}
	s := newTestSender(t, bus)
	s.Enqueue(upsertEvent("a", 5, 5))
	s.Enqueue(upsertEvent("a", 3, 3)) // a refresh of an older version
	bus.setDown(false)
	flush(t, s)
	got := bus.received()
	require.NotEmpty(t, got)
	assert.Equal(t, int64(5), got[len(got)-1].Version.Seq)
	for _, ev := range got {
		assert.NotEqual(t, int64(3), ev.Version.Seq)
	}
}

// refusingBus refuses every event of the fleets in refuse as invalid, as
// Pub/Sub does a message its topic's schema rejects.
type refusingBus struct {
	fakeBus
	refuse map[string]bool
	tries  map[string]int
}

func (b *refusingBus) Send(ctx context.Context, ev fleet.Event) error {
	b.mu.Lock()
	if b.tries == nil {
		b.tries = map[string]int{}
	}
	b.tries[ev.Name]++
	refused := b.refuse[ev.Name]
	b.mu.Unlock()
	if refused {
		return fmt.Errorf("publish: %w: rpc error: code = InvalidArgument", fleet.ErrInvalid)
	}
	return b.fakeBus.Send(ctx, ev)
}

func TestSenderDropsRefusedEventsAndSaysSoOncePerFleet(t *testing.T) {
	bus := &refusingBus{refuse: map[string]bool{"bad": true}}
	var logs syncbuf.Buffer
	s := NewSender(SenderConfig{InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}, bus,
		clock.RealClock{}, testMetrics(t), slog.New(slog.NewJSONHandler(&logs, nil)))
	var heard sync.Map
	s.OnRefused(func(ev fleet.Event) { heard.Store(ev.Version.Seq, ev.Name) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	for seq := int64(1); seq <= 3; seq++ {
		s.Enqueue(upsertEvent("bad", seq, seq))
		flush(t, s)
	}
	s.Enqueue(upsertEvent("good", 4, 1))
	flush(t, s)
	bus.mu.Lock()
	assert.Equal(t, 3, bus.tries["bad"], "each refused event is sent once, never retried")
	bus.mu.Unlock()
	assert.Equal(t, 3.0, testutil.ToFloat64(s.metrics.Publishes.WithLabelValues(string(fleet.KindUpsert), "invalid")))
	assert.Equal(t, 1, strings.Count(logs.String(), "cannot be published"), "said once for the fleet")
	assert.Len(t, bus.received(), 1, "the other fleet's event goes through")
	for seq := int64(1); seq <= 3; seq++ {
		name, ok := heard.Load(seq)
		assert.True(t, ok && name == "bad", "the agent hears of refused event %d", seq)
	}

	// Once the fleet publishes again, a later refusal is said again.
	bus.mu.Lock()
	bus.refuse["bad"] = false
	bus.mu.Unlock()
	s.Enqueue(upsertEvent("bad", 5, 5))
	flush(t, s)
	bus.mu.Lock()
	bus.refuse["bad"] = true
	bus.mu.Unlock()
	s.Enqueue(upsertEvent("bad", 6, 6))
	flush(t, s)
	assert.Equal(t, 2, strings.Count(logs.String(), "cannot be published"))
}
