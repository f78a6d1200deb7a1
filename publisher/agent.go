package publisher

import (
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
)

// Sink receives version-stamped events from the Agent. Enqueue must not
// block: it is called with the Agent's lock held, from informer handlers.
type Sink interface {
	// Enqueue hands over an event to deliver.
	Enqueue(ev fleet.Event)
	// Drop discards every event not yet sent: the term that stamped them
	// has ended, and nothing of it may be published any more.
	Drop()
}

// Clock is the publisher's one time source, for the Agent, the Sender, the
// terms and everything Run starts: k8s.io/utils/clock's, so that
// clock.RealClock serves in production and tests give a fake or a skewed
// one.
type Clock = clock.WithTickerAndDelayedExecution

// AgentConfig configures an Agent.
type AgentConfig struct {
	Cluster string
	// Publisher identifies this instance in every event.
	Publisher fleet.Publisher
	// MinInterval is the least time between two publishes of one fleet.
	MinInterval time.Duration
	// ClusterLabels describe the cluster in snapshots.
	ClusterLabels map[string]string
	// AllocatorEndpoint is advertised in snapshots.
	AllocatorEndpoint string
	// SnapshotPartBytes is the size snapshot parts aim at.
	SnapshotPartBytes int
	// RefreshInterval, if positive, re-sends every fleet's last event
	// (same version) once it is that old (Refresh): the ingest side
	// writes nothing for what it has, and heals what was lost after
	// Pub/Sub accepted it (a message dead-lettered, a subscription
	// reset). A term's first publishes are spread over the interval, so
	// refreshes come at an even rate, never in a burst of every fleet.
	RefreshInterval time.Duration
	// Local, if set, receives every state the informers show, whatever
	// the term: the single-cluster mode's store (inform.Store), which
	// every instance serves from. It is called with the Agent's lock
	// held, and must not block or call back.
	Local Local
}

// Local is what keeps the cluster's fleets as the informers show them.
type Local interface {
	Upsert(k fleet.Key, s fleet.State)
	Delete(k fleet.Key)
}

// Agent turns the informer's view of the cluster's fleets into coalesced,
// versioned events. It keeps one entry per live fleet, so its memory is
// bounded by the number of fleets, never by the rate of changes.
//
// While it has no term (it is not the writer for its cluster) it only
// tracks the fleets. StartTerm makes it publish: every fleet, then a
// snapshot; StopTerm makes it stop at once.
type Agent struct {
	cfg     AgentConfig
	clock   Clock
	sink    Sink
	metrics *Metrics
	log     *slog.Logger

	mu     sync.Mutex
	fleets map[fleet.Key]*entry
	term   int64 // 0 while not the writer
	seq    int64
	// truncated: the last snapshot's totals were cut to MaxAggregates
	// names (said when it starts and stops, not every snapshot).
	truncated bool
}

// entry is the Agent's knowledge of one live fleet.
type entry struct {
	current fleet.State // latest projection from the informer
	// published is the state last stamped in this term; nil before the
	// first publish of the term.
	published *fleet.State
	version   fleet.Version // of the last event stamped for the fleet
	lastEmit  time.Time     // when it was stamped, for the min interval
	lastSent  time.Time     // when its last event was last handed over (stamped or refreshed)
	timer     clock.Timer   // the pending trailing publish, if any
	timerGen  uint64        // tells a stale timer firing from the current one
}

// NewAgent returns an Agent sending events to sink.
func NewAgent(cfg AgentConfig, clk Clock, sink Sink, metrics *Metrics, log *slog.Logger) *Agent {
	if cfg.SnapshotPartBytes <= 0 {
		cfg.SnapshotPartBytes = fleet.DefaultSnapshotPartBytes
	}
	return &Agent{cfg: cfg, clock: clk, sink: sink, metrics: metrics, log: log, fleets: map[fleet.Key]*entry{}}
}

// Upsert records the latest state of a fleet and publishes it if it is a
// real change: at once after a quiet period (the leading edge), otherwise
// once min interval after the previous publish, with whatever state is the
// latest by then (the trailing edge).
func (a *Agent) Upsert(k fleet.Key, s fleet.State) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.fleets[k]
	if e == nil {
		e = &entry{}
		a.fleets[k] = e
	}
	e.current = s
	if a.cfg.Local != nil {
		a.cfg.Local.Upsert(k, s)
	}
	if a.term == 0 {
		return
	}
	switch {
	case e.published != nil && e.published.Equal(s):
		a.metrics.Unchanged.Inc()
		// A pending trailing publish finds nothing to do when it fires.
	case e.timer != nil:
		a.metrics.Coalesced.Inc()
	case e.lastEmit.IsZero() || a.clock.Now().Sub(e.lastEmit) >= a.cfg.MinInterval:
		a.emitUpsert(k, e)
	default:
		a.schedule(k, e, a.cfg.MinInterval-a.clock.Now().Sub(e.lastEmit))
	}
}

// Delete publishes the deletion of a fleet at once, cancelling any pending
// upsert of it.
func (a *Agent) Delete(k fleet.Key) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.fleets[k]; e != nil {
		a.cancel(e)
		delete(a.fleets, k)
	}
	if a.cfg.Local != nil {
		a.cfg.Local.Delete(k)
	}
	if a.term == 0 {
		return
	}
	a.seq++
	a.sink.Enqueue(fleet.Event{
		SchemaVersion: fleet.SchemaVersion,
		Kind:          fleet.KindDelete,
		Cluster:       k.Cluster,
		Version:       fleet.Version{Term: a.term, Seq: a.seq},
		ObservedAt:    fleet.MicrosOf(a.clock.Now()),
		Publisher:     a.cfg.Publisher,
		Namespace:     k.Namespace,
		Name:          k.Name,
	})
}

// StartTerm makes the Agent the writer for its cluster under term, which
// must be larger than every term before it: it publishes every fleet it
// knows, then a snapshot.
func (a *Agent) StartTerm(term int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.term, a.seq = term, 0
	for _, k := range slices.SortedFunc(maps.Keys(a.fleets), compareKeys) {
		e := a.fleets[k]
		a.cancel(e)
		e.published, e.lastEmit = nil, time.Time{}
		a.emitUpsert(k, e)
		// Due at a point of the interval of its own, by its key.
		e.lastSent = e.lastEmit.Add(-spread(k, a.cfg.RefreshInterval))
	}
	a.snapshotLocked()
	a.metrics.Leader.Set(1)
	a.metrics.Term.Set(float64(term))
	a.log.Info("publishing as the cluster's writer", "term", term, "fleets", len(a.fleets))
}

// StopTerm stops publishing at once: pending publishes are cancelled and
// the sink drops what it has not sent.
func (a *Agent) StopTerm() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.term == 0 {
		return
	}
	a.log.Info("stopped publishing", "term", a.term)
	a.term = 0
	for _, e := range a.fleets {
		a.cancel(e)
		e.published, e.lastEmit = nil, time.Time{}
	}
	a.sink.Drop()
	a.metrics.Leader.Set(0)
}

// Snapshot publishes the live fleets with the versions last published for
// them. It doubles as the heartbeat. It does nothing while not the writer.
func (a *Agent) Snapshot() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.snapshotLocked()
}

// Refresh re-sends the last event of every fleet not sent for
// RefreshInterval. Called every RefreshTick, it sends about
// fleets × RefreshTick / RefreshInterval events each time. It does
// nothing while not the writer.
func (a *Agent) Refresh() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.term == 0 || a.cfg.RefreshInterval <= 0 {
		return
	}
	now := a.clock.Now()
	for k, e := range a.fleets {
		if e.published != nil && now.Sub(e.lastSent) >= a.cfg.RefreshInterval {
			// Same version, observed now: the state is still the
			// fleet's as of this moment, and the ingest side refuses
			// observations older than its tombstones.
			a.sink.Enqueue(a.upsertEvent(k, e, now))
			e.lastSent = now
			a.metrics.Refreshed.Inc()
		}
	}
}

// RefreshTick is how often Refresh runs for a refresh interval: every
// second (a hundredth of short intervals), so that refreshes keep an even
// rate.
func RefreshTick(interval time.Duration) time.Duration {
	return min(time.Second, max(interval/100, 10*time.Millisecond))
}

// spread places a fleet in the refresh interval by its key: a fraction of
// the interval from a hash of the key, the same in every term.
func spread(k fleet.Key, interval time.Duration) time.Duration {
	h := fnv.New32a()
	h.Write([]byte(k.DocID()))
	return time.Duration(float64(interval) * float64(h.Sum32()) / (1 << 32))
}

// Flush publishes every pending trailing update now, for shutdown.
func (a *Agent) Flush() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, e := range a.fleets {
		if e.timer == nil {
			continue
		}
		a.cancel(e)
		if a.term != 0 && (e.published == nil || !e.published.Equal(e.current)) {
			a.emitUpsert(k, e)
		}
	}
}

// Unvouch takes back a fleet's last published state when Pub/Sub refused
// its event (ev): snapshots no longer list a version whose event was never
// sent, and the fleet's next change is published afresh. It does nothing
// when the fleet has a newer version since.
func (a *Agent) Unvouch(ev fleet.Event) {
	if ev.Kind != fleet.KindUpsert {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.fleets[ev.Key()]
	if e == nil || e.published == nil || e.version != ev.Version {
		return
	}
	e.published = nil
	a.metrics.Unvouched.Inc()
	a.log.Error("fleet left out of snapshots: Pub/Sub refused its last event", logging.KeyFleet, ev.Key().DocID(), logging.KeyVersion, ev.Version.String())
}

// Term returns the current term, 0 while not the writer.
func (a *Agent) Term() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.term
}

// Stamped returns the newest version stamped in the current term (zero
// while not the writer): every event stamped later has a larger one.
func (a *Agent) Stamped() fleet.Version {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.term == 0 {
		return fleet.Version{}
	}
	return fleet.Version{Term: a.term, Seq: a.seq}
}

// Keys returns the keys of the fleets the agent holds.
func (a *Agent) Keys() []fleet.Key {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Collect(maps.Keys(a.fleets))
}

// Fleets returns the number of live fleets known.
func (a *Agent) Fleets() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.fleets)
}

// PendingKeys adds to keys the fleets with a trailing publish pending.
func (a *Agent) PendingKeys(keys map[string]struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, e := range a.fleets {
		if e.timer != nil {
			keys[k.DocID()] = struct{}{}
		}
	}
}

func (a *Agent) snapshotLocked() {
	if a.term == 0 {
		return
	}
	now := a.clock.Now()
	entries := make([]fleet.SnapshotEntry, 0, len(a.fleets))
	var totals fleet.Status
	for k, e := range a.fleets {
		if e.published == nil {
			continue // never valid enough to publish; the ingest side drops it
		}
		entries = append(entries, fleet.SnapshotEntry{Namespace: k.Namespace, Name: k.Name, Version: e.version})
		totals.Add(e.published.Status)
	}
	// Sums saturate; more counter or list names than a status may hold
	// keep the largest: no cluster can make its snapshot invalid.
	truncated := totals.Bound()
	base := fleet.Event{
		SchemaVersion: fleet.SchemaVersion,
		Kind:          fleet.KindSnapshot,
		Cluster:       a.cfg.Cluster,
		Version:       fleet.Version{Term: a.term, Seq: a.seq + 1},
		ObservedAt:    fleet.MicrosOf(now),
		Publisher:     a.cfg.Publisher,
	}
	parts := fleet.SplitSnapshot(entries, a.cfg.SnapshotPartBytes)
	events := make([]fleet.Event, len(parts))
	for i, part := range parts {
		ev := base
		ev.Snapshot = part
		ev.Snapshot.ClusterLabels = a.cfg.ClusterLabels
		ev.Snapshot.AllocatorEndpoint = a.cfg.AllocatorEndpoint
		ev.Snapshot.FleetCount = int64(len(entries))
		ev.Snapshot.Totals = totals
		ev.Snapshot.TotalsTruncated = truncated
		// Validated before the version is taken: a snapshot the sender
		// would drop must never stop the heartbeats unnoticed.
		if err := ev.Validate(); err != nil {
			a.metrics.InvalidSnapshots.Inc()
			a.log.Error("cannot take a valid snapshot; no heartbeat this time", logging.KeyCluster, a.cfg.Cluster,
				"part", i, "parts", len(parts), logging.KeyError, err.Error())
			return
		}
		events[i] = ev
	}
	a.seq++
	for _, ev := range events {
		a.sink.Enqueue(ev)
	}
	a.noteTruncated(truncated)
	a.metrics.LastSnapshot.Set(float64(now.UnixNano()) / 1e9)
	a.log.Debug("snapshot", logging.KeyCluster, a.cfg.Cluster, logging.KeyVersion, base.Version.String(), "fleets", len(entries))
}

// noteTruncated logs when snapshot totals start or stop keeping only the
// largest counters and lists.
func (a *Agent) noteTruncated(truncated bool) {
	if truncated == a.truncated {
		return
	}
	a.truncated = truncated
	if truncated {
		a.log.Warn("the cluster's fleets name more counters or lists than snapshot totals hold; totals keep the largest",
			logging.KeyCluster, a.cfg.Cluster, "max", fleet.MaxAggregates)
	} else {
		a.log.Info("snapshot totals hold every counter and list again", logging.KeyCluster, a.cfg.Cluster)
	}
}

func (a *Agent) emitUpsert(k fleet.Key, e *entry) {
	a.seq++
	s := e.current.Clone()
	e.published = &s
	e.version = fleet.Version{Term: a.term, Seq: a.seq}
	e.lastEmit = a.clock.Now()
	e.lastSent = e.lastEmit
	a.sink.Enqueue(a.upsertEvent(k, e, e.lastEmit))
}

// upsertEvent is the event of the fleet's last published state, observed
// at observed.
func (a *Agent) upsertEvent(k fleet.Key, e *entry, observed time.Time) fleet.Event {
	return fleet.Event{
		SchemaVersion: fleet.SchemaVersion,
		Kind:          fleet.KindUpsert,
		Cluster:       k.Cluster,
		Version:       e.version,
		ObservedAt:    fleet.MicrosOf(observed),
		Publisher:     a.cfg.Publisher,
		Namespace:     k.Namespace,
		Name:          k.Name,
		Fleet:         *e.published,
	}
}

// schedule arranges the trailing publish of k after d.
func (a *Agent) schedule(k fleet.Key, e *entry, d time.Duration) {
	e.timerGen++
	gen := e.timerGen
	e.timer = a.clock.AfterFunc(d, func() { a.fire(k, e, gen) })
}

func (a *Agent) fire(k fleet.Key, e *entry, gen uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fleets[k] != e || e.timer == nil || e.timerGen != gen {
		return // deleted, cancelled or rescheduled since
	}
	e.timer = nil
	if a.term != 0 && (e.published == nil || !e.published.Equal(e.current)) {
		a.emitUpsert(k, e)
	}
}

func (a *Agent) cancel(e *entry) {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
		e.timerGen++
	}
}

// compareKeys orders keys by document ID, the (cluster, namespace, name)
// order.
func compareKeys(x, y fleet.Key) int { return strings.Compare(x.DocID(), y.DocID()) }
