package publisher

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetcast/fleetcast/fleet"
)

// recordingSink keeps what the Agent stamps.
type recordingSink struct {
	mu     sync.Mutex
	events []fleet.Event
	drops  int
}

func (r *recordingSink) Enqueue(ev fleet.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recordingSink) Drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drops++
}

// take returns what was stamped since the last take; every event must be
// valid.
func (r *recordingSink) take(tb testing.TB) []fleet.Event {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	for _, ev := range out {
		require.NoError(tb, ev.Validate())
	}
	return out
}

func testMetrics(tb testing.TB) *Metrics {
	tb.Helper()
	m, err := NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 })
	require.NoError(tb, err)
	return m
}

// manualClock is the publisher's Clock moving only when told. Its
// AfterFunc runs what falls due synchronously, in time order and outside
// its lock, since the Agent's timers read the clock (k8s.io/utils' fake
// runs them under its lock, where reading it deadlocks); the rest of the
// interface (timers, tickers) is that fake's, kept at the same time.
type manualClock struct {
	*testingclock.FakeClock
	mu    sync.Mutex
	now   time.Time
	funcs []*manualTimer
}

func newManualClock(now time.Time) *manualClock {
	return &manualClock{FakeClock: testingclock.NewFakeClock(now), now: now}
}

type manualTimer struct {
	clock   *manualClock
	at      time.Time
	f       func()
	stopped bool
}

func (t *manualTimer) Stop() bool {
	was := !t.stopped
	t.stopped = true
	return was
}

// C is never sent on: an AfterFunc timer calls its function.
func (t *manualTimer) C() <-chan time.Time { return nil }

func (t *manualTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := !t.stopped
	t.at, t.stopped = t.clock.now.Add(d), false
	return was
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *manualClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{clock: c, at: c.now.Add(d), f: f}
	c.funcs = append(c.funcs, t)
	return t
}

// Step moves the clock by d, firing due timers in time order.
func (c *manualClock) Step(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *manualTimer
		for _, t := range c.funcs {
			if !t.stopped && !t.at.After(end) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			c.FakeClock.SetTime(end)
			return
		}
		next.stopped = true
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
	}
}

func newTestAgent(tb testing.TB) (*Agent, *recordingSink, *manualClock) {
	tb.Helper()
	clk := newManualClock(time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC))
	sink := &recordingSink{}
	a := NewAgent(AgentConfig{
		Cluster:           "pc",
		Publisher:         fleet.Publisher{ID: "pub-0", Version: "test"},
		MinInterval:       time.Second,
		ClusterLabels:     map[string]string{"platform": "pc"},
		AllocatorEndpoint: "34.1.2.3:443",
	}, clk, sink, testMetrics(tb), slog.New(slog.NewTextHandler(io.Discard, nil)))
	return a, sink, clk
}

func key(name string) fleet.Key { return fleet.Key{Cluster: "pc", Namespace: "default", Name: name} }

func state(ready int64) fleet.State {
	return fleet.State{UID: "u", Status: fleet.Status{ReadyReplicas: ready}}
}

func kinds(evs []fleet.Event) []fleet.Kind {
	var out []fleet.Kind
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

func TestAgentLeadingEdgeThenOneTrailingPublishOfTheLatestState(t *testing.T) {
	a, sink, clk := newTestAgent(t)
	a.StartTerm(100)
	require.Equal(t, []fleet.Kind{fleet.KindSnapshot}, kinds(sink.take(t)))

	a.Upsert(key("a"), state(1))
	evs := sink.take(t)
	require.Len(t, evs, 1, "the first change after a quiet period goes out at once")
	assert.Equal(t, int64(1), evs[0].Fleet.Status.ReadyReplicas)

	for i := int64(2); i <= 5; i++ {
		clk.Step(100 * time.Millisecond)
		a.Upsert(key("a"), state(i))
	}
	assert.Empty(t, sink.take(t), "changes within the interval wait")
	clk.Step(600 * time.Millisecond) // 1 s after the leading publish
	evs = sink.take(t)
	require.Len(t, evs, 1, "one trailing publish")
	assert.Equal(t, int64(5), evs[0].Fleet.Status.ReadyReplicas, "with the latest state")
	assert.Equal(t, 3.0, testutil.ToFloat64(a.metrics.Coalesced), "changes 3, 4 and 5 joined the pending publish")

	clk.Step(5 * time.Second)
	assert.Empty(t, sink.take(t), "nothing pending, nothing sent")
}

func TestAgentPublishesOnlyRealChanges(t *testing.T) {
	a, sink, clk := newTestAgent(t)
	a.StartTerm(1)
	sink.take(t)
	a.Upsert(key("a"), state(1))
	sink.take(t)
	clk.Step(2 * time.Second)
	a.Upsert(key("a"), state(1))
	assert.Empty(t, sink.take(t))
	assert.Equal(t, 1.0, testutil.ToFloat64(a.metrics.Unchanged))

	// A change and its reversal within one interval publish nothing either.
	a.Upsert(key("a"), state(2))
	require.Len(t, sink.take(t), 1)
	a.Upsert(key("a"), state(3))
	a.Upsert(key("a"), state(2))
	clk.Step(time.Second)
	assert.Empty(t, sink.take(t))
}

func TestAgentDeleteIsImmediateAndCancelsThePendingUpsert(t *testing.T) {
	a, sink, clk := newTestAgent(t)
	a.StartTerm(1)
	a.Upsert(key("a"), state(1))
	a.Upsert(key("a"), state(2)) // pending trailing
	sink.take(t)
	a.Delete(key("a"))
	evs := sink.take(t)
	require.Equal(t, []fleet.Kind{fleet.KindDelete}, kinds(evs))
	clk.Step(2 * time.Second)
	assert.Empty(t, sink.take(t), "the pending upsert died with the fleet")

	// Re-created at once: a new fleet, published at once.
	a.Upsert(key("a"), state(7))
	evs = sink.take(t)
	require.Len(t, evs, 1)
	assert.Equal(t, fleet.KindUpsert, evs[0].Kind)
}

func TestAgentFollowerOnlyTracksAndStartTermPublishesEverything(t *testing.T) {
	a, sink, _ := newTestAgent(t)
	a.Upsert(key("b"), state(2))
	a.Upsert(key("a"), state(1))
	a.Upsert(key("c"), state(3))
	a.Delete(key("c"))
	assert.Empty(t, sink.take(t), "a follower publishes nothing")

	a.StartTerm(1764484800000)
	evs := sink.take(t)
	require.Equal(t, []fleet.Kind{fleet.KindUpsert, fleet.KindUpsert, fleet.KindSnapshot}, kinds(evs))
	assert.Equal(t, "a", evs[0].Name)
	assert.Equal(t, fleet.Version{Term: 1764484800000, Seq: 1}, evs[0].Version)
	assert.Equal(t, fleet.Version{Term: 1764484800000, Seq: 2}, evs[1].Version)
	snap := evs[2]
	assert.Equal(t, fleet.Version{Term: 1764484800000, Seq: 3}, snap.Version)
	assert.Equal(t, []fleet.SnapshotEntry{
		{Namespace: "default", Name: "a", Version: evs[0].Version},
		{Namespace: "default", Name: "b", Version: evs[1].Version},
	}, snap.Snapshot.Fleets)
	assert.Equal(t, int64(2), snap.Snapshot.FleetCount)
	assert.Equal(t, int64(3), snap.Snapshot.Totals.ReadyReplicas)
	assert.Equal(t, "pc", snap.Snapshot.ClusterLabels["platform"])
	assert.Equal(t, "34.1.2.3:443", snap.Snapshot.AllocatorEndpoint, "every snapshot advertises the allocator")
	assert.Equal(t, snap.Version, a.Stamped(), "the newest version stamped")
	a.Snapshot()
	assert.Equal(t, 1, sink.take(t)[0].Version.Compare(snap.Version), "stamped later: larger")
}

func TestAgentStampsNothingWhileNotTheWriter(t *testing.T) {
	a, _, _ := newTestAgent(t)
	assert.Zero(t, a.Stamped())
	a.StartTerm(7)
	assert.Equal(t, fleet.Version{Term: 7, Seq: 1}, a.Stamped(), "the first snapshot")
	a.StopTerm()
	assert.Zero(t, a.Stamped())
}

func TestAgentStopTermStopsAtOnce(t *testing.T) {
	a, sink, clk := newTestAgent(t)
	a.StartTerm(1)
	a.Upsert(key("a"), state(1))
	a.Upsert(key("a"), state(2)) // pending
	sink.take(t)
	a.StopTerm()
	assert.Equal(t, 1, sink.drops, "what the sink has not sent is dropped")
	clk.Step(2 * time.Second)
	a.Upsert(key("a"), state(3))
	a.Delete(key("a"))
	a.Snapshot()
	assert.Empty(t, sink.take(t))
	assert.Equal(t, int64(0), a.Term())
}

func TestAgentNeverPublishesAFleetMoreThanOncePerInterval(t *testing.T) {
	a, sink, clk := newTestAgent(t)
	a.StartTerm(1)
	sink.take(t)
	var last fleet.State
	// 200 changes, one every 10 ms, over 2 s.
	for i := range int64(200) {
		last = state(i)
		a.Upsert(key("a"), last)
		clk.Step(10 * time.Millisecond)
	}
	clk.Step(time.Second)
	evs := sink.take(t)
	assert.LessOrEqual(t, len(evs), 3, "at most ceil(2s / 1s) + 1")
	for i := 1; i < len(evs); i++ {
		gap := evs[i].ObservedAt.Time().Sub(evs[i-1].ObservedAt.Time())
		assert.GreaterOrEqual(t, gap, time.Second)
		assert.Equal(t, 1, evs[i].Version.Compare(evs[i-1].Version), "versions grow")
	}
	assert.True(t, evs[len(evs)-1].Fleet.Equal(last), "the last publish is the final state")
}

func TestAgentFlushPublishesPendingUpdates(t *testing.T) {
	a, sink, _ := newTestAgent(t)
	a.StartTerm(1)
	a.Upsert(key("a"), state(1))
	a.Upsert(key("a"), state(2))
	sink.take(t)
	pending := map[string]struct{}{}
	a.PendingKeys(pending)
	assert.Len(t, pending, 1)
	a.Flush()
	evs := sink.take(t)
	require.Len(t, evs, 1)
	assert.Equal(t, int64(2), evs[0].Fleet.Status.ReadyReplicas)
}

// TestAgentRefreshesUnchangedFleetsAsObservedNow: a fleet unchanged for
// days is re-sent with its version and the time of the refresh, so that the
// ingest side, which refuses observations older than its tombstones, still
// takes the repair.
func TestAgentRefreshesUnchangedFleetsAsObservedNow(t *testing.T) {
	a, sink, clk := newTestAgent(t)
	a.cfg.RefreshInterval = 10 * time.Minute
	a.StartTerm(100)
	a.Upsert(key("a"), state(1))
	first := sink.take(t)
	require.Len(t, first, 2)
	published := first[1]
	require.Equal(t, fleet.KindUpsert, published.Kind)

	clk.Step(48 * time.Hour)
	a.Refresh()
	evs := sink.take(t)
	require.Equal(t, []fleet.Kind{fleet.KindUpsert}, kinds(evs))
	refresh := evs[0]
	assert.Equal(t, published.Version, refresh.Version, "the same version: a duplicate where it arrived")
	assert.Equal(t, published.Fleet, refresh.Fleet)
	assert.Equal(t, fleet.MicrosOf(clk.Now()), refresh.ObservedAt, "observed at the refresh")
	assert.NoError(t, fleet.CheckTimes(refresh, clk.Now(), 24*time.Hour, fleet.DefaultMaxClockSkew))
}

// TestAgentRefreshesAtAnEvenRate: a term's 1 000 fleets, published at once,
// are refreshed over the interval, never all in one tick; each once per
// interval.
func TestAgentRefreshesAtAnEvenRate(t *testing.T) {
	a, sink, clk := newTestAgent(t)
	a.cfg.RefreshInterval = 10 * time.Minute
	for i := range 1000 {
		a.Upsert(key(fmt.Sprintf("f%04d", i)), state(1))
	}
	a.StartTerm(100)
	sink.take(t)
	tick := RefreshTick(a.cfg.RefreshInterval)
	perTick := map[int]int{}
	sent := map[string]int{}
	for i := range int(a.cfg.RefreshInterval / tick) {
		clk.Step(tick)
		a.Refresh()
		for _, ev := range sink.take(t) {
			perTick[i]++
			sent[ev.Name]++
		}
	}
	assert.Len(t, sent, 1000, "every fleet refreshed within the interval")
	for name, n := range sent {
		require.Equal(t, 1, n, name)
	}
	most := 0
	for _, n := range perTick {
		most = max(most, n)
	}
	// 1 000 over 600 ticks: about 1.7 a tick; a hash spreads them, with
	// a Poisson-like tail.
	assert.LessOrEqual(t, most, 10, "no burst")
}

// TestAgentSnapshotsOfAnyValidClusterAreValid: fleets that together name
// 1 001 counters with capacities near math.MaxInt64 still heartbeat, with
// totals that saturate and keep the largest 1 000 names.
func TestAgentSnapshotsOfAnyValidClusterAreValid(t *testing.T) {
	a, sink, _ := newTestAgent(t)
	a.StartTerm(100)
	sink.take(t)
	for f := range 3 {
		counters := map[string]fleet.Aggregate{}
		for i := range 334 {
			counters[fmt.Sprintf("c%d-%03d", f, i)] = fleet.Aggregate{Count: 1, Capacity: math.MaxInt64 - int64(i)}
		}
		counters["shared"] = fleet.Aggregate{Count: 1, Capacity: math.MaxInt64}
		s := state(1)
		s.Status.Counters = counters
		a.Upsert(key(fmt.Sprintf("f%d", f)), s)
	}
	sink.take(t)
	a.Snapshot()
	evs := sink.take(t) // take validates every event
	require.Equal(t, []fleet.Kind{fleet.KindSnapshot}, kinds(evs), "a heartbeat")
	snap := evs[0].Snapshot
	assert.True(t, snap.TotalsTruncated)
	assert.Len(t, snap.Totals.Counters, fleet.MaxAggregates)
	assert.Equal(t, int64(math.MaxInt64), snap.Totals.Counters["shared"].Capacity, "saturated, not wrapped")
	assert.Equal(t, int64(3), snap.Totals.Counters["shared"].Count)
	assert.Zero(t, testutil.ToFloat64(a.metrics.InvalidSnapshots))
}

// TestAgentTakesNoVersionForASnapshotItCannotSend: a snapshot that would
// be invalid is not stamped: the next valid one takes the next version.
func TestAgentTakesNoVersionForASnapshotItCannotSend(t *testing.T) {
	a, sink, _ := newTestAgent(t)
	a.StartTerm(100)
	first := sink.take(t)
	a.cfg.ClusterLabels = map[string]string{"not a label key": "x"}
	a.Snapshot()
	assert.Empty(t, sink.take(t))
	assert.Equal(t, 1.0, testutil.ToFloat64(a.metrics.InvalidSnapshots))
	a.cfg.ClusterLabels = nil
	a.Snapshot()
	evs := sink.take(t)
	require.Len(t, evs, 1)
	assert.Equal(t, first[0].Version.Seq+1, evs[0].Version.Seq, "the refused snapshot used no version")
}

// TestAgentNeverVouchesForARefusedVersion: once Pub/Sub refused a fleet's
// event, snapshots leave the fleet out until its next change is published.
func TestAgentNeverVouchesForARefusedVersion(t *testing.T) {
	a, sink, clk := newTestAgent(t)
	a.StartTerm(100)
	a.Upsert(key("a"), state(1))
	a.Upsert(key("b"), state(1))
	evs := sink.take(t)
	refused := evs[len(evs)-1]
	require.Equal(t, "b", refused.Name)

	a.Unvouch(refused)
	assert.Equal(t, 1.0, testutil.ToFloat64(a.metrics.Unvouched))
	a.Snapshot()
	snap := sink.take(t)[0].Snapshot
	require.Len(t, snap.Fleets, 1)
	assert.Equal(t, "a", snap.Fleets[0].Name, "b's refused version is not listed")

	clk.Step(2 * time.Second)
	a.Upsert(key("b"), state(2))
	evs = sink.take(t)
	require.Len(t, evs, 1, "b's next change is published afresh")
	a.Snapshot()
	assert.Len(t, sink.take(t)[0].Snapshot.Fleets, 2)

	a.Unvouch(refused) // an older version: nothing to take back
	assert.Equal(t, 1.0, testutil.ToFloat64(a.metrics.Unvouched))
}
