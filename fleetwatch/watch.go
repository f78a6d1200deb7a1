package fleetwatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/logging"
)

// DefaultStartTimeout is how long Watch and WatchAPI wait for the initial
// view by default.
const DefaultStartTimeout = 30 * time.Second

// ErrStartTimeout: the initial view did not come within
// Options.StartTimeout; the error wrapping it says the last error seen.
var ErrStartTimeout = errors.New("no initial view in time")

// Options say which fleets to watch, and how.
type Options struct {
	// Clusters, if any, limits the watch to them (at most
	// fleetapi.MaxClusters).
	Clusters []string
	// StaleAfter is how old a cluster's heartbeat may be; default
	// fleetapi.DefaultStaleAfter.
	StaleAfter time.Duration
	// OnChange, if set, is called for every change after the initial
	// view, one call at a time, from the watch's goroutines: keep it
	// quick.
	OnChange func(Change)
	// StartTimeout bounds the wait for the initial view: default
	// DefaultStartTimeout; negative, until the context ends.
	StartTimeout time.Duration
	// OnError, if set, is called with every error the watch retries
	// (a listener or stream that failed), from its goroutines.
	OnError func(error)
	// OnRecover, if set, is called when a listener or stream that
	// failed works again (its name: "fleets listener", "clusters
	// listener" or "stream"), from the watch's goroutines.
	OnRecover func(what string)
	// Log receives the errors retried and the recoveries;
	// slog.Default() when nil.
	Log *slog.Logger
	// Now is the clock for staleness; time.Now when nil.
	Now func() time.Time
}

// ChangeKind says what happened to a fleet or a cluster.
type ChangeKind string

// Kinds of change.
const (
	Added    ChangeKind = "Added"
	Modified ChangeKind = "Modified"
	Removed  ChangeKind = "Removed"
	// ClusterStale: a cluster's publisher has been silent for longer
	// than StaleAfter (or, with WatchAPI, the stream said so or went
	// silent). Its fleets are marked Stale, and Pick passes them over.
	ClusterStale ChangeKind = "ClusterStale"
	// ClusterFresh: a stale cluster is heard from again.
	ClusterFresh ChangeKind = "ClusterFresh"
)

// Change is one fleet entering, changing in or leaving the view (Fleet),
// or one cluster turning stale or fresh (Cluster).
type Change struct {
	Kind    ChangeKind
	Fleet   fleetapi.Fleet
	Cluster string
}

// A clusterSource is what a view's source says of the clusters, each
// method called under the view's lock: Firestore's cluster documents
// (Watch's heartbeats) or what the query API's stream last told
// (WatchAPI's follower).
type clusterSource interface {
	// Names are the clusters whose staleness the view judges.
	Names() []string
	// Stale says whether cluster is stale at now.
	Stale(cluster string, now time.Time) bool
	// Labels are cluster's labels, nil when unknown.
	Labels(cluster string) map[string]string
}

// heartbeats are the cluster documents Watch's listener follows: a
// cluster is stale once its heartbeat is older than staleAfter.
type heartbeats struct {
	v          *View
	docs       map[string]*fleet.ClusterDocument
	staleAfter time.Duration
}

func (h *heartbeats) Names() []string { return slices.Collect(maps.Keys(h.docs)) }

func (h *heartbeats) Stale(cluster string, now time.Time) bool {
	return fleetapi.IsStale(h.docs[cluster], now, h.staleAfter)
}

func (h *heartbeats) Labels(cluster string) map[string]string {
	if c := h.docs[cluster]; c != nil {
		return c.Labels
	}
	return nil
}

// View is the live view. Its methods are safe for concurrent use.
type View struct {
	q      Options
	mu     sync.RWMutex
	fleets map[string]fleetapi.Fleet // by document ID; Stale is judged when read
	// clusters is what the source says of the clusters, read under mu.
	clusters clusterSource
	// end ends the watch with a cause.
	end context.CancelCauseFunc
	// probe, if set, explains a start that timed out without an error:
	// Firestore's listeners retry unavailability themselves, silently.
	probe func(context.Context) error
	// judged is each cluster's staleness as last reported, under mu.
	judged  map[string]bool
	emitMu  sync.Mutex // one OnChange call at a time
	lastErr error      // the newest error retried, under mu
	done    chan struct{}
	err     error
}

func newView(q Options) (*View, Options, error) {
	if q.StaleAfter <= 0 {
		q.StaleAfter = fleetapi.DefaultStaleAfter
	}
	if q.Now == nil {
		q.Now = time.Now
	}
	if q.Log == nil {
		q.Log = slog.Default()
	}
	if q.StartTimeout == 0 {
		q.StartTimeout = DefaultStartTimeout
	}
	if len(q.Clusters) > fleetapi.MaxClusters {
		return nil, q, fmt.Errorf("watch: at most %d clusters, got %d", fleetapi.MaxClusters, len(q.Clusters))
	}
	return &View{q: q, fleets: map[string]fleetapi.Fleet{}, judged: map[string]bool{},
		done: make(chan struct{})}, q, nil
}

// Watch starts watching and returns once the initial view is complete.
// It returns an error instead when a listener fails in a way retrying
// cannot mend (PermissionDenied, NotFound, InvalidArgument,
// Unauthenticated, FailedPrecondition), when Options.StartTimeout passes
// first (ErrStartTimeout, with the last error seen), or when ctx ends
// first. The view stays live until ctx is cancelled.
func Watch(ctx context.Context, client *firestore.Client, q Options) (*View, error) {
	v, q, err := newView(q)
	if err != nil {
		return nil, err
	}
	beats := &heartbeats{v: v, docs: map[string]*fleet.ClusterDocument{}, staleAfter: q.StaleAfter}
	v.clusters = beats
	v.probe = func(ctx context.Context) error {
		it := firestoredb.ClustersQuery(client).Limit(1).Documents(ctx)
		defer it.Stop()
		if _, err := it.Next(); err != nil && !errors.Is(err, iterator.Done) {
			return fmt.Errorf("Firestore did not answer a query either: %w", err)
		}
		return nil
	}
	fleetsQ := firestoredb.LiveFleetsQuery(client, q.Clusters)
	clustersQ := firestoredb.ClustersQuery(client)
	// The listeners run until ctx ends, Watch fails, or the client is
	// closed.
	lctx, cancel := context.WithCancelCause(ctx)
	v.end = cancel
	fleetsReady, clustersReady := make(chan struct{}), make(chan struct{})
	failed := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { listen(lctx, v, "fleets", fleetsQ, fleetsReady, failed, v.resetFleets, v.applyFleet) })
	wg.Go(func() { listen(lctx, v, "clusters", clustersQ, clustersReady, failed, beats.reset, beats.apply) })
	wg.Go(func() { v.judging(lctx) })
	go func() {
		wg.Wait()
		v.mu.Lock()
		v.err = context.Cause(lctx)
		v.mu.Unlock()
		close(v.done)
	}()
	if err := v.await(ctx, failed, fleetsReady, clustersReady); err != nil {
		cancel(err)
		return nil, err
	}
	return v, nil
}

// await waits for every ready channel to close, and fails with the first
// permanent error, at the start timeout, or when ctx ends.
func (v *View) await(ctx context.Context, failed <-chan error, ready ...chan struct{}) error {
	var timeout <-chan time.Time
	if v.q.StartTimeout > 0 {
		t := time.NewTimer(v.q.StartTimeout)
		defer t.Stop()
		timeout = t.C
	}
	for _, r := range ready {
		select {
		case <-r:
		case err := <-failed:
			return fmt.Errorf("watch: %w", err)
		case <-timeout:
			v.mu.RLock()
			last := v.lastErr
			v.mu.RUnlock()
			if last == nil && v.probe != nil {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				last = v.probe(pctx)
				cancel()
			}
			err := fmt.Errorf("%w after %s", ErrStartTimeout, v.q.StartTimeout)
			if last != nil {
				err = fmt.Errorf("%w after %s; last error: %w", ErrStartTimeout, v.q.StartTimeout, last)
			}
			return &fleetapi.Error{Code: fleetapi.Unavailable, Message: "watch", Err: err}
		case <-ctx.Done():
			return fmt.Errorf("watch: initial view: %w", context.Cause(ctx))
		}
	}
	v.judge() // the clusters' staleness at the start: no change to report
	return nil
}

// permanent reports whether a listener's error is one that retrying
// cannot mend.
func permanent(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.NotFound, codes.InvalidArgument, codes.Unauthenticated, codes.FailedPrecondition:
		return true
	}
	return false
}

// retried reports an error the watch retries: to OnError and the log.
func (v *View) retried(what string, err error, wait time.Duration) {
	v.mu.Lock()
	v.lastErr = err
	v.mu.Unlock()
	v.q.Log.Warn("fleetwatch: "+what+" failed; retrying", "inMillis", wait.Milliseconds(), logging.KeyError, err.Error())
	if v.q.OnError != nil {
		v.q.OnError(fmt.Errorf("fleetwatch: %s: %w", what, err))
	}
}

// recovered reports a listener or stream that works again.
func (v *View) recovered(what string) {
	v.q.Log.Info("fleetwatch: " + what + " recovered")
	if v.q.OnRecover != nil {
		v.q.OnRecover(what)
	}
}

// retryBackoff is the retry delay of listeners and streams: doubling from
// 100 ms to 10 s, each wait drawn at random from its upper half (a
// wait.Backoff from 50 ms, each step jittered by up to 100 %), so that
// many clients that failed together do not retry together. It starts
// over only once a listener or stream delivered something: a server that
// refuses every connection is retried ever more slowly.
func retryBackoff() wait.Backoff {
	return wait.Backoff{Duration: minBackoff / 2, Factor: 2, Jitter: 1, Steps: math.MaxInt32, Cap: maxBackoff / 2}
}

const minBackoff, maxBackoff = 100 * time.Millisecond, 10 * time.Second

// sleep waits d, or until ctx ends; it reports whether ctx is still on.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// listen runs one realtime listener, restarting it with backoff after an
// error. Each (re)start begins with a full snapshot, which reset diffs
// against what the view holds, so nothing is lost across a restart.
// Before the first snapshot, an error retrying cannot mend goes to failed
// and ends it.
func listen(ctx context.Context, v *View, name string, q firestore.Query, ready chan struct{}, failed chan<- error,
	reset func(docs []*firestore.DocumentSnapshot, emit bool), apply func(firestore.DocumentChange)) {
	b := retryBackoff()
	initialized := false
	for ctx.Err() == nil {
		err := listenOnce(ctx, q, func(docs []*firestore.DocumentSnapshot) {
			// The first snapshot is the initial view; those after a
			// restart are changes to report.
			reset(docs, initialized)
			if !initialized {
				initialized = true
				close(ready)
			} else {
				v.recovered(name + " listener")
			}
			b = retryBackoff()
		}, apply)
		if ctx.Err() != nil {
			return
		}
		if !initialized && permanent(err) {
			failed <- fmt.Errorf("%s listener: %w", name, err)
			return
		}
		if status.Code(err) == codes.Canceled {
			// Only the client cancels a listener: it was closed, and
			// nothing can be read with it again.
			v.end(fmt.Errorf("fleetwatch: the Firestore client was closed: %w", err))
			return
		}
		wait := b.Step()
		v.retried(name+" listener", err, wait)
		if !sleep(ctx, wait) {
			return
		}
	}
}

// listenOnce runs a listener until it fails: its first snapshot goes to
// first, whole, and the changes of the others to apply.
func listenOnce(ctx context.Context, q firestore.Query, first func([]*firestore.DocumentSnapshot), apply func(firestore.DocumentChange)) error {
	it := q.Snapshots(ctx)
	defer it.Stop()
	for n := 0; ; n++ {
		snap, err := it.Next()
		if err != nil {
			return err
		}
		if n == 0 {
			docs, err := snap.Documents.GetAll()
			if err != nil {
				return err
			}
			first(docs)
			continue
		}
		for _, c := range snap.Changes {
			apply(c)
		}
	}
}

// judging judges the clusters' staleness every second (or every tenth of
// StaleAfter, if less) until ctx ends, reporting each change.
func (v *View) judging(ctx context.Context) {
	t := time.NewTicker(max(min(time.Second, v.q.StaleAfter/10), 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			v.judge()
		}
	}
}

// judge judges every cluster's staleness now and reports those that
// turned stale or fresh since the last judgment. A cluster judged for the
// first time is no change.
func (v *View) judge() {
	now := v.q.Now()
	var changes []Change
	v.mu.Lock()
	if v.clusters == nil {
		v.mu.Unlock()
		return
	}
	names := v.clusters.Names()
	slices.Sort(names)
	for _, c := range names {
		st := v.clusters.Stale(c, now)
		old, known := v.judged[c]
		v.judged[c] = st
		if known && old != st {
			changes = append(changes, Change{Kind: map[bool]ChangeKind{true: ClusterStale, false: ClusterFresh}[st], Cluster: c})
		}
	}
	v.mu.Unlock()
	for _, c := range changes {
		v.report(c)
	}
}

// report hands a change to OnChange, one call at a time.
func (v *View) report(c Change) {
	if v.q.OnChange == nil {
		return
	}
	v.emitMu.Lock()
	defer v.emitMu.Unlock()
	v.q.OnChange(c)
}

func (v *View) resetFleets(docs []*firestore.DocumentSnapshot, emit bool) {
	next := make(map[string]fleetapi.Fleet, len(docs))
	for _, s := range docs {
		if d := v.decodeFleet(s); d != nil {
			next[s.Ref.ID] = fleetapi.NewFleet(d, false)
		}
	}
	v.replace(next, emit)
}

// replace makes next the view's fleets, and reports what changed when
// emit.
func (v *View) replace(next map[string]fleetapi.Fleet, emit bool) {
	v.mu.Lock()
	prev := v.fleets
	v.fleets = next
	v.mu.Unlock()
	if !emit {
		return
	}
	for id, f := range next {
		if p, ok := prev[id]; !ok {
			v.emit(Added, f)
		} else if p.Version != f.Version {
			v.emit(Modified, f)
		}
	}
	for id, f := range prev {
		if _, ok := next[id]; !ok {
			v.emit(Removed, f)
		}
	}
}

func (v *View) applyFleet(c firestore.DocumentChange) {
	id := c.Doc.Ref.ID
	if c.Kind == firestore.DocumentRemoved {
		v.mu.Lock()
		d, ok := v.fleets[id]
		delete(v.fleets, id)
		v.mu.Unlock()
		if ok {
			v.emit(Removed, d)
		}
		return
	}
	d := v.decodeFleet(c.Doc)
	if d == nil {
		return
	}
	v.put(id, fleetapi.NewFleet(d, false))
}

// put adds or replaces a fleet, and reports it.
func (v *View) put(id string, f fleetapi.Fleet) {
	v.mu.Lock()
	_, existed := v.fleets[id]
	v.fleets[id] = f
	v.mu.Unlock()
	if existed {
		v.emit(Modified, f)
	} else {
		v.emit(Added, f)
	}
}

func (v *View) decodeFleet(s *firestore.DocumentSnapshot) *fleet.Document {
	d, err := firestoredb.DecodeFleet(s)
	if err != nil {
		v.q.Log.Error("fleetwatch: undecodable fleet document skipped", "doc", s.Ref.ID, logging.KeyError, err.Error())
		return nil
	}
	if d.Deleted {
		return nil
	}
	return d
}

// reset replaces the heartbeats with the listener's full snapshot.
func (h *heartbeats) reset(docs []*firestore.DocumentSnapshot, _ bool) {
	next := map[string]*fleet.ClusterDocument{}
	for _, s := range docs {
		if c, err := firestoredb.DecodeCluster(s); err == nil {
			next[c.Cluster] = c
		}
	}
	h.v.mu.Lock()
	h.docs = next
	h.v.mu.Unlock()
	h.v.judge()
}

// apply applies one change the listener saw.
func (h *heartbeats) apply(c firestore.DocumentChange) {
	h.v.mu.Lock()
	if c.Kind == firestore.DocumentRemoved {
		delete(h.docs, c.Doc.Ref.ID)
	} else if cd, err := firestoredb.DecodeCluster(c.Doc); err == nil {
		h.docs[cd.Cluster] = cd
	}
	h.v.mu.Unlock()
	h.v.judge()
}

func (v *View) emit(kind ChangeKind, f fleetapi.Fleet) {
	if v.q.OnChange == nil {
		return
	}
	v.mu.RLock()
	f.Stale = v.clusters.Stale(f.Cluster, v.q.Now())
	v.mu.RUnlock()
	v.report(Change{Kind: kind, Fleet: f})
}

// Done is closed when the watch has ended: its context was cancelled, or
// its Firestore client closed.
func (v *View) Done() <-chan struct{} { return v.done }

// Err returns why the watch ended, once Done is closed.
func (v *View) Err() error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.err
}

// Fleets returns the fleets matching selector (nil: all), stale ones
// included and marked, in (cluster, namespace, name) order.
func (v *View) Fleets(selector labels.Selector) []fleetapi.Fleet {
	if selector == nil {
		selector = labels.Everything()
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	now := v.q.Now()
	out := []fleetapi.Fleet{}
	for _, f := range v.fleets {
		if selector.Matches(labels.Set(f.Labels)) {
			f.Stale = v.clusters.Stale(f.Cluster, now)
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b fleetapi.Fleet) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Rank scores a fleet for a new match: its capacity, which weighs its
// chance of being picked; a fleet scoring 0 or less has no capacity to
// spare and is never picked.
type Rank func(fleetapi.Fleet) int64

// ByReady ranks fleets by their ready game servers, never more than the
// game servers they have: the numbers are their cluster's own word, and a
// cluster reporting more ready servers than it runs must not win every
// pick by it.
func ByReady(f fleetapi.Fleet) int64 {
	return fleetapi.ReadyOf(&fleet.DocStatus{Replicas: f.CurrentReplicas, ReadyReplicas: f.ReadyReplicas})
}

// ByPlayers ranks fleets by their players' available capacity, never more
// than their capacity less their count.
func ByPlayers(f fleetapi.Fleet) int64 { return fleetapi.PlayersAvailable(f.Players) }

// ByCounter ranks fleets by the available capacity of a counter, never
// more than its capacity less its count.
func ByCounter(name string) Rank {
	return func(f fleetapi.Fleet) int64 { return fleetapi.AvailableOf(f.Counters[name]) }
}

// ByList ranks fleets by the available capacity of a list, never more
// than its capacity less its count.
func ByList(name string) Rank {
	return func(f fleetapi.Fleet) int64 { return fleetapi.AvailableOf(f.Lists[name]) }
}

// Policy chooses among candidate fleets.
type Policy struct {
	// Rank scores the candidates; ByReady when nil (or ByCounter(Counter)
	// when Counter is set).
	Rank Rank
	// Counter, if set and Rank is nil, ranks by that counter's available
	// capacity.
	Counter string
	// Prefer lists selectors of cluster labels, most preferred first
	// (region=eu-west, then region=eu-north): Pick takes a fleet of the
	// clusters matching the first selector that has one with capacity,
	// and falls back to every cluster when none has.
	Prefer []labels.Selector
	// Rand draws the choice; math/rand/v2's source when nil. A *rand.Rand
	// is not safe for concurrent use.
	Rand *rand.Rand
}

func (p Policy) rank() Rank {
	switch {
	case p.Rank != nil:
		return p.Rank
	case p.Counter != "":
		return ByCounter(p.Counter)
	}
	return ByReady
}

// policy is Prefer as a placement policy: preference i is priority i, and
// every cluster has the priority after the last.
func (p Policy) policy() fleetapi.Policy {
	rules := make([]fleetapi.Rule, 0, len(p.Prefer)+1)
	for i, sel := range p.Prefer {
		rules = append(rules, fleetapi.Rule{Clusters: sel, Priority: int32(i), Weight: 1})
	}
	return fleetapi.Policy{Rules: append(rules, fleetapi.Rule{Clusters: labels.Everything(), Priority: int32(len(p.Prefer)), Weight: 1})}
}

// ErrNoFleet means no fresh fleet matches with capacity to spare.
var ErrNoFleet = errors.New("no fleet with capacity matches")

// Pick returns a fleet for a new match among those matching selector,
// never from a stale cluster, from the most preferred clusters that have
// one with capacity. Among those it draws at random, each fleet's chance
// proportional to its Rank (its available capacity) up to twice the
// median Rank (fleetapi.CapacityBound), as the query side's Place does
// with the same ranking (fleetapi.Ranking): matchmakers
// picking from their own views spread their matches over the fleets
// instead of herding onto the one that ranks highest. Fleets without
// spare capacity are never picked.
func (v *View) Pick(selector labels.Selector, p Policy) (fleetapi.Fleet, error) {
	f, _, err := v.Choose(selector, p)
	return f, err
}

// Choose is Pick, and says which of Policy.Prefer chose: its index, or
// len(Prefer) when the fallback to every cluster did.
func (v *View) Choose(selector labels.Selector, p Policy) (fleetapi.Fleet, int, error) {
	rank, policy := p.rank(), p.policy()
	candidates := v.Fleets(selector)
	v.mu.RLock()
	clusterLabels := make(map[string]labels.Set, len(candidates))
	for _, f := range candidates {
		if _, ok := clusterLabels[f.Cluster]; !ok {
			clusterLabels[f.Cluster] = labels.Set(v.clusters.Labels(f.Cluster))
		}
	}
	v.mu.RUnlock()
	// Each fleet's rank is bounded by its priority's (fleetapi.CapacityBound):
	// one fleet's claim of capacity cannot draw every pick.
	type offer struct {
		f                fleetapi.Fleet
		priority, weight int32
		rank             int64
	}
	var offers []offer
	ranks := map[int32][]int64{}
	for _, f := range candidates {
		if !f.Stale {
			o := offer{f: f, rank: rank(f)}
			o.priority, o.weight, _ = policy.For(clusterLabels[f.Cluster])
			if o.weight > 0 && o.rank > 0 {
				ranks[o.priority] = append(ranks[o.priority], o.rank)
			}
			offers = append(offers, o)
		}
	}
	bounds := make(map[int32]float64, len(ranks))
	for priority, r := range ranks {
		bounds[priority] = fleetapi.CapacityBound(r)
	}
	rk := fleetapi.NewRanking[fleetapi.Fleet](1, p.Rand)
	for _, o := range offers {
		rk.Offer(o.f, o.f.Cluster, false, o.priority, float64(o.weight)*min(float64(o.rank), bounds[o.priority]))
	}
	best := rk.Best() // a pick gives no reasons: none are worded
	if len(best) == 0 {
		return fleetapi.Fleet{}, len(p.Prefer), ErrNoFleet
	}
	return best[0].Value, int(best[0].Priority), nil
}
