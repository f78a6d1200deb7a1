package fleetview

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
)

// Engine keeps a view of the live fleets and clusters current from its
// Source, and publishes it as immutable snapshots. Its methods are safe for
// concurrent use.
type Engine struct {
	src  Source
	opts Options
	// epoch tells this Engine's resume tokens from another's.
	epoch uint64

	snap atomic.Pointer[Snapshot]

	// mu is the writer's: a round's apply and the listener's delivery
	// take it to change st and publish a snapshot of it. No reader
	// takes it.
	mu sync.Mutex
	st *state

	// unanswerable counts the documents left out because no answer
	// could hold them (Encodable); skipped holds those still left out.
	unanswerable atomic.Int64
	skipped      skipped

	schedMu sync.Mutex // guards running, next, watches and pollStop
	running *round
	// next is the round strict callers wait for while one runs: it
	// begins when the running one ends. No default read waits for it.
	next     *round
	watches  int
	pollStop chan struct{}
}

// round is one sync of the view, shared by every caller that waits for it.
type round struct {
	done chan struct{}
	err  error
	// started is when the round began reading (zero while it waits to
	// run); strict: some caller needs the fleets read, listener or not.
	// Both under schedMu.
	started time.Time
	strict  bool
}

func newRound(strict bool) *round { return &round{done: make(chan struct{}), strict: strict} }

// wait waits for r, or for ctx to end, whose cause it returns.
func (r *round) wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// New returns an Engine over src. Nothing is read until the first read
// or Sync (Start loads it at once).
func New(src Source, o Options) *Engine {
	o = o.WithDefaults()
	e := &Engine{src: src, opts: o, epoch: rand.Uint64() | 1, st: newState(o)}
	first, _ := e.st.publish(&Snapshot{}, e.epoch) // nothing to announce
	e.snap.Store(first)
	return e
}

// Options returns the engine's options, defaults filled in.
func (e *Engine) Options() Options { return e.opts }

// Current returns the newest snapshot, without waiting: one that has not
// loaded holds nothing.
func (e *Engine) Current() *Snapshot { return e.snap.Load() }

// Start loads the view in the background, so that no reader pays for it.
func (e *Engine) Start() { e.kick() }

// Read returns a snapshot fit for a read arriving now. Strict (a negative
// MaxStaleness): the snapshot of a round that began after the call. Else
// the newest, at once once the view has loaded; a round starts in the
// background when it is older than half of MaxStaleness and none runs
// (unless watches poll the view that often), and the read waits only when
// the view has not loaded yet, or when it is older than MaxStaleness and
// nothing was syncing it (an idle instance): then for the round it
// started. The error is the failed round's, or ctx's cause.
func (e *Engine) Read(ctx context.Context) (*Snapshot, error) {
	if e.opts.strict() {
		if err := e.Sync(ctx); err != nil {
			return nil, err
		}
		return e.Current(), nil
	}
	s := e.Current()
	if !s.loaded {
		r, _ := e.kick()
		if err := r.wait(ctx); err != nil {
			return nil, err
		}
		return e.Current(), nil
	}
	m := e.opts.MaxStaleness
	age := e.opts.Now().Sub(s.syncedAt)
	if age < m/2 || age < m && e.polled() {
		return s, nil
	}
	r, started := e.kick()
	if age < m || !started {
		return s, nil
	}
	if err := r.wait(ctx); err != nil {
		return nil, err
	}
	return e.Current(), nil
}

// Sync waits for a round that begins after the call: then the view holds
// every write acknowledged before the call. It is what a strict read
// waits for.
func (e *Engine) Sync(ctx context.Context) error {
	e.schedMu.Lock()
	var r *round
	switch {
	case e.running == nil:
		r = newRound(true)
		e.run(r)
	case e.next == nil:
		r = newRound(true)
		e.next = r
	default:
		r = e.next
	}
	e.schedMu.Unlock()
	return r.wait(ctx)
}

// kick starts a round unless one runs, and returns the round that runs,
// and whether this call started it.
func (e *Engine) kick() (*round, bool) {
	e.schedMu.Lock()
	defer e.schedMu.Unlock()
	if e.running != nil {
		return e.running, false
	}
	r := newRound(false)
	e.run(r)
	return r, true
}

// run makes r the running round and runs it, then the next, until none
// waits. schedMu is held. Rounds are not bound to one caller: one that
// gives up does not cancel the others' round.
func (e *Engine) run(r *round) {
	r.started = e.opts.Now()
	e.running = r
	go func() {
		for r != nil {
			ctx, cancel := context.WithTimeout(context.Background(), e.opts.SyncTimeout)
			r.err = e.syncOnce(ctx, r.started, r.strict)
			if c, due := e.checkDue(r.started); r.err == nil && due {
				r.err = e.check(ctx, c, r.started)
			}
			cancel()
			if r.err != nil {
				// Waiters answer with the error; a background round has
				// none, and must not fail unseen.
				e.opts.Log.Warn("query view sync failed", logging.KeyError, r.err.Error())
			}
			e.schedMu.Lock()
			done := r
			r, e.next = e.next, nil
			if r != nil {
				r.started = e.opts.Now()
			}
			e.running = r
			e.schedMu.Unlock()
			// After running moved on: a waiter woken finds the
			// scheduler free, or the next round under way.
			close(done.done)
		}
	}()
}

// polled reports whether watches poll the view at least every
// MaxStaleness. Watches on a Follower's view listen rather than poll: the
// listener keeps the view fresh only while writes come.
func (e *Engine) polled() bool {
	if _, ok := e.src.(Follower); ok {
		return false
	}
	e.schedMu.Lock()
	defer e.schedMu.Unlock()
	return e.watches > 0 && e.opts.WatchPoll <= e.opts.MaxStaleness
}

// syncOnce reads what changed since the last round and applies it; or
// everything: the first time, every Options.Resync, and when the last
// round is so old that tombstones written since may have expired.
//
// A round that begins at T reads the documents stamped at or after the
// previous round's point, and its own point is T - CommitLag: a write
// stamped before that was visible when this round read (a commit becomes
// visible at most CommitLag after its server timestamp), so no later
// round needs to read it again. Documents stamped within CommitLag before
// a round are read again by the next one, and change nothing.
//
// While a listener delivers the fleets, a round reads them only when
// strict (its caller must see every write acknowledged before it) or when
// the listener has been quiet for MaxStaleness/2: a listener sends nothing
// while nothing changes, so only a read tells quiet from stalled. What the
// listener delivers while the round reads is kept in the journal and wins
// over the read, which may predate it.
func (e *Engine) syncOnce(ctx context.Context, started time.Time, strict bool) error {
	point := started.Add(-e.opts.CommitLag)
	e.mu.Lock()
	v := e.st
	resync := e.opts.Resync
	if _, checked := e.src.(Checker); checked && v.listening {
		resync = e.opts.FollowResync
	}
	full := !v.loaded || started.Sub(v.lastLoad) >= resync || started.Sub(v.lastSync) > e.opts.TombstoneRetention/2
	clustersDue := started.Sub(v.lastClusterSync) >= e.opts.clusterRefresh()
	fleetsDue := full || strict || !v.listening || started.Sub(v.lastSync) >= max(0, e.opts.MaxStaleness)/2
	fleetsSince, clustersSince := v.fleetsSince, v.clustersSince
	if fleetsDue {
		v.journal = map[string]*fleet.Document{}
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.st.journal = nil
		e.mu.Unlock()
	}()

	if full {
		return e.load(ctx, started, point)
	}
	var fleets fleet.Page[fleet.Document]
	if fleetsDue {
		var err error
		if fleets, err = e.src.FleetsWrittenSince(ctx, fleetsSince); err != nil {
			return err
		}
		e.unreadable("fleets", fleets.Unreadable)
		fleets.Docs = e.answerable(fleets.Docs)
	}
	var clusters fleet.Page[fleet.ClusterDocument]
	if clustersDue {
		var err error
		if clusters, err = e.src.ClustersWrittenSince(ctx, clustersSince); err != nil {
			return err
		}
		e.unreadable("clusters", clusters.Unreadable)
		clusters.Docs = e.answerableClusters(clusters.Docs)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	v = e.st
	if fleetsDue {
		for _, d := range fleets.Docs {
			if j, ok := v.journal[d.Key().DocID()]; !ok || d.Version.Compare(j.Version) > 0 {
				v.putFleet(d)
			}
		}
		v.fleetsSince = maxTime(v.fleetsSince, point)
		v.lastSync = maxTime(v.lastSync, started)
	}
	if clustersDue {
		for _, c := range clusters.Docs {
			v.putCluster(c)
		}
		v.clustersSince = maxTime(v.clustersSince, point)
		v.lastClusterSync = started
	}
	v.judge(e.opts.Now(), e.opts.StaleAfter)
	e.publish()
	return nil
}

// load reads everything, admitting the documents as they are read: a load
// holds no more than the view may (MaxViewBytes), whatever the store
// holds.
func (e *Engine) load(ctx context.Context, started, point time.Time) error {
	l := newLoading(e.opts.MaxViewBytes)
	e.skipped.reset("")
	bad, err := e.src.LiveFleets(ctx, func(d *fleet.Document) { l.add(e.answerable([]*fleet.Document{d})[0]) })
	if err != nil {
		return err
	}
	clusters, err := e.src.Clusters(ctx)
	if err != nil {
		return err
	}
	e.unreadable("fleets", bad)
	e.unreadable("clusters", clusters.Unreadable)
	cdocs := e.answerableClusters(clusters.Docs)
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.st
	v.load(withJournal(l.docs(), v.journal), cdocs, l.overBudget)
	v.lastLoad, v.lastClusterSync, v.lastCheck, v.misses = started, started, started, nil
	v.lastSync = maxTime(v.lastSync, started)
	v.fleetsSince = maxTime(v.fleetsSince, point)
	v.clustersSince = point
	v.judge(e.opts.Now(), e.opts.StaleAfter)
	s := e.publish()
	e.opts.Log.Info("query view loaded", "fleets", s.Len(), "clusters", s.ClusterCount(),
		"tookMillis", e.opts.Now().Sub(started).Milliseconds())
	return nil
}

// publish makes the state the newest snapshot, and logs the clusters the
// view left out since it last did. mu is held.
func (e *Engine) publish() *Snapshot {
	s, announce := e.st.publish(e.snap.Load(), e.epoch)
	e.snap.Store(s)
	announce() // only now: a woken watch finds s
	for _, c := range e.st.evicted {
		e.opts.Log.Error("query view: a cluster's fleets exceed the instance's memory budget (VIEW_MAX_BYTES); it is left out, reported stale, until the next full load finds room",
			logging.KeyCluster, c, "viewBytes", e.st.bytes, "maxViewBytes", e.opts.MaxViewBytes)
	}
	e.st.evicted = nil
	return s
}

// withJournal returns the documents of a full load, each replaced by the
// listener's newer state of its fleet, if the journal has one.
func withJournal(loaded []*fleet.Document, journal map[string]*fleet.Document) []*fleet.Document {
	if len(journal) == 0 {
		return loaded
	}
	byID := make(map[string]*fleet.Document, len(loaded)+len(journal))
	for _, d := range loaded {
		byID[d.Key().DocID()] = d
	}
	for id, j := range journal {
		if d, ok := byID[id]; !ok || j.Version.Compare(d.Version) > 0 {
			byID[id] = j
		}
	}
	out := make([]*fleet.Document, 0, len(byID))
	for _, d := range byID {
		out = append(out, d)
	}
	return out
}

// heard applies what the listener delivered: its documents, and its read
// time, before which every write is in the view. The read time is
// Firestore's clock, compared with the engine's: the clocks of Google's
// machines agree to well within MaxStaleness.
func (e *Engine) heard(p fleet.Page[fleet.Document], readTime time.Time) {
	e.unreadable("fleets", p.Unreadable)
	// A partition's listener reads its clusters' documents only; the
	// change feed carries every cluster's, which it has nothing to do
	// with (not even to remember as removed).
	p.Docs = slices.DeleteFunc(p.Docs, func(d *fleet.Document) bool { return !e.admits(d.Cluster) })
	p.Docs = e.answerable(p.Docs)
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.st
	for _, d := range p.Docs {
		v.putFleet(d)
		if v.journal != nil {
			id := d.Key().DocID()
			if j, ok := v.journal[id]; !ok || d.Version.Compare(j.Version) > 0 {
				v.journal[id] = d
			}
		}
	}
	v.listening = true
	v.lastSync = maxTime(v.lastSync, readTime)
	v.fleetsSince = maxTime(v.fleetsSince, readTime.Add(-e.opts.CommitLag))
	e.publish()
}

func (e *Engine) setListening(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st.listening = on
}

func (e *Engine) unreadable(collection string, ids []string) {
	if len(ids) > 0 {
		e.opts.Log.Error("query view: undecodable documents skipped", "collection", collection,
			"count", len(ids), "docs", ids[:min(10, len(ids))], logging.KeyError, "cannot decode")
	}
}

// admits says whether the view may hold a document of cluster.
func (e *Engine) admits(cluster string) bool {
	return len(e.opts.Clusters) == 0 || slices.Contains(e.opts.Clusters, cluster)
}

// answerable returns docs with each live document that no answer could
// hold (Encodable), or of a cluster outside the partition, replaced by its
// removal: it leaves the view, counted and logged with its ID, and fails
// no answer about the others.
func (e *Engine) answerable(docs []*fleet.Document) []*fleet.Document {
	for i, d := range docs {
		if d.Deleted {
			e.skipped.put(d.Key().DocID(), d.Cluster, false)
			continue
		}
		if !e.admits(d.Cluster) {
			// Another partition's: as good as absent here.
			docs[i] = &fleet.Document{Cluster: d.Cluster, Namespace: d.Namespace, Name: d.Name, Deleted: true, Version: d.Version}
			continue
		}
		if err := Encodable(d); err != nil {
			e.opts.Log.Error("query view: a fleet document no answer can hold is left out", "collection", "fleets",
				logging.KeyFleet, d.Key().DocID(), logging.KeyError, err.Error(), "unanswerableTotal", e.unanswerable.Add(1))
			docs[i] = &fleet.Document{Cluster: d.Cluster, Namespace: d.Namespace, Name: d.Name, Deleted: true, Version: d.Version}
			e.skipped.put(d.Key().DocID(), d.Cluster, d.DocID != "")
			continue
		}
		e.skipped.put(d.Key().DocID(), d.Cluster, false)
	}
	return docs
}

// answerableClusters leaves out the cluster documents no answer could
// hold: the cluster keeps its previous document, and turns stale when that
// ages.
func (e *Engine) answerableClusters(docs []*fleet.ClusterDocument) []*fleet.ClusterDocument {
	out := docs[:0]
	for _, c := range docs {
		if !e.admits(c.Cluster) {
			continue // another partition's
		}
		if err := ClusterEncodable(c); err != nil {
			e.opts.Log.Error("query view: a cluster document no answer can hold is left out", "collection", "clusters",
				logging.KeyCluster, c.Cluster, logging.KeyError, err.Error(), "unanswerableTotal", e.unanswerable.Add(1))
			continue
		}
		out = append(out, c)
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ErrTooManyWatches: the engine serves its most watches (MaxWatches).
var ErrTooManyWatches = errors.New("too many watches")
