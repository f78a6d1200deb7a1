// Package fleetwatch keeps a live, local view of fleetcast's fleets for a
// matchmaker. It starts from a consistent view, then applies Added,
// Modified and Removed changes, and follows the clusters so that a cluster
// whose publisher went quiet turns stale even when none of its fleets
// changes. Two sources feed it: Firestore realtime listeners (Watch), for
// programs with Firestore credentials, or the query API's stream
// (WatchAPI), which needs only an ID token and costs Firestore nothing per
// client. Errors are retried with backoff; cancelling the context ends the
// watch.
package fleetwatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"cloud.google.com/go/firestore"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/logging"
)

// Options say which fleets to watch, and how.
type Options struct {
	// Clusters, if any, limits the watch to them (at most
	// fleetapi.MaxClusters).
	Clusters []string
	// StaleAfter is how old a cluster's heartbeat may be; default
	// fleetapi.DefaultStaleAfter.
	StaleAfter time.Duration
	// OnChange, if set, is called for every change after the initial view,
	// from the listener's goroutine: keep it quick.
	OnChange func(Change)
	// Log receives listener errors and recoveries; none when nil.
	Log *slog.Logger
	// Now is the clock for staleness; time.Now when nil.
	Now func() time.Time
}

// ChangeKind says what happened to a fleet.
type ChangeKind string

// Kinds of change.
const (
	Added    ChangeKind = "Added"
	Modified ChangeKind = "Modified"
	Removed  ChangeKind = "Removed"
)

// Change is one fleet entering, changing in or leaving the view.
type Change struct {
	Kind  ChangeKind
	Fleet fleetapi.Fleet
}

// View is the live view. Its methods are safe for concurrent use.
type View struct {
	q      Options
	mu     sync.RWMutex
	fleets map[string]fleetapi.Fleet // by document ID; Stale is judged when read
	// stale judges a cluster at a time, under mu: from its heartbeat
	// (Watch) or as the stream last told (WatchAPI).
	stale func(cluster string, now time.Time) bool
	clus  map[string]*fleet.ClusterDocument // Watch's
	done  chan struct{}
	err   error
}

func newView(q Options) (*View, Options, error) {
	if q.StaleAfter <= 0 {
		q.StaleAfter = fleetapi.DefaultStaleAfter
	}
	if q.Now == nil {
		q.Now = time.Now
	}
	if q.Log == nil {
		q.Log = slog.New(slog.DiscardHandler)
	}
	if len(q.Clusters) > fleetapi.MaxClusters {
		return nil, q, fmt.Errorf("watch: at most %d clusters, got %d", fleetapi.MaxClusters, len(q.Clusters))
	}
	return &View{q: q, fleets: map[string]fleetapi.Fleet{}, clus: map[string]*fleet.ClusterDocument{}, done: make(chan struct{})}, q, nil
}

// Watch starts watching and returns once the initial view is complete (or
// ctx ends first). The view stays live until ctx is cancelled.
func Watch(ctx context.Context, client *firestore.Client, q Options) (*View, error) {
	v, q, err := newView(q)
	if err != nil {
		return nil, err
	}
	v.stale = func(cluster string, now time.Time) bool { return fleetapi.IsStale(v.clus[cluster], now, q.StaleAfter) }
	fleetsQ := firestoredb.LiveFleetsQuery(client, q.Clusters)
	clustersQ := firestoredb.ClustersQuery(client)
	fleetsReady, clustersReady := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { listen(ctx, v, "fleets", fleetsQ, fleetsReady, v.resetFleets, v.applyFleet) })
	wg.Go(func() { listen(ctx, v, "clusters", clustersQ, clustersReady, v.resetClusters, v.applyCluster) })
	go func() {
		wg.Wait()
		v.mu.Lock()
		v.err = context.Cause(ctx)
		v.mu.Unlock()
		close(v.done)
	}()
	for _, ready := range []chan struct{}{fleetsReady, clustersReady} {
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("watch: initial view: %w", context.Cause(ctx))
		}
	}
	return v, nil
}

// listen runs one realtime listener, restarting it with backoff after an
// error. Each (re)start begins with a full snapshot, which reset diffs
// against what the view holds, so nothing is lost across a restart.
func listen(ctx context.Context, v *View, name string, q firestore.Query, ready chan struct{},
	reset func(docs []*firestore.DocumentSnapshot, emit bool), apply func(firestore.DocumentChange)) {
	wait := 100 * time.Millisecond
	initialized := false
	for ctx.Err() == nil {
		it := q.Snapshots(ctx)
		first := true
		for {
			snap, err := it.Next()
			if err != nil {
				it.Stop()
				if ctx.Err() == nil {
					v.q.Log.Warn("fleetwatch listener failed; restarting", "listener", name, "in", wait.String(), logging.KeyError, err.Error())
				}
				break
			}
			if first {
				docs, err := snap.Documents.GetAll()
				if err != nil {
					it.Stop()
					v.q.Log.Warn("fleetwatch listener failed; restarting", "listener", name, logging.KeyError, err.Error())
					break
				}
				// The first snapshot is the initial view; those after a
				// restart are changes to report.
				reset(docs, initialized)
				if !initialized {
					initialized = true
					close(ready)
				}
				first = false
				wait = 100 * time.Millisecond
				continue
			}
			for _, c := range snap.Changes {
				apply(c)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
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

func (v *View) resetClusters(docs []*firestore.DocumentSnapshot, _ bool) {
	next := map[string]*fleet.ClusterDocument{}
	for _, s := range docs {
		if c, err := firestoredb.DecodeCluster(s); err == nil {
			next[c.Cluster] = c
		}
	}
	v.mu.Lock()
	v.clus = next
	v.mu.Unlock()
}

func (v *View) applyCluster(c firestore.DocumentChange) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if c.Kind == firestore.DocumentRemoved {
		delete(v.clus, c.Doc.Ref.ID)
		return
	}
	if cd, err := firestoredb.DecodeCluster(c.Doc); err == nil {
		v.clus[cd.Cluster] = cd
	}
}

func (v *View) emit(kind ChangeKind, f fleetapi.Fleet) {
	if v.q.OnChange == nil {
		return
	}
	v.mu.RLock()
	f.Stale = v.stale(f.Cluster, v.q.Now())
	v.mu.RUnlock()
	v.q.OnChange(Change{Kind: kind, Fleet: f})
}

// Done is closed when the watch has ended (its context was cancelled).
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
			f.Stale = v.stale(f.Cluster, now)
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b fleetapi.Fleet) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Policy chooses among candidate fleets.
type Policy struct {
	// Counter, if set, picks the fleet with the most available capacity
	// in that counter; otherwise the one with the most ready replicas.
	Counter string
}

// ErrNoFleet means no fresh fleet matches with capacity to spare.
var ErrNoFleet = errors.New("no fleet with capacity matches")

// Pick returns the best fleet for a new match among those matching
// selector, never from a stale cluster: by default the one with the most
// ready replicas, or with the most available capacity of Policy.Counter.
// Fleets without spare capacity are never picked. Ties go to the first in
// (cluster, namespace, name) order, so the choice is deterministic.
func (v *View) Pick(selector labels.Selector, p Policy) (fleetapi.Fleet, error) {
	var best fleetapi.Fleet
	var bestScore int64
	for _, f := range v.Fleets(selector) {
		if f.Stale {
			continue
		}
		score := f.ReadyReplicas
		if p.Counter != "" {
			score = f.Counters[p.Counter].Available
		}
		if score > bestScore {
			best, bestScore = f, score
		}
	}
	if bestScore == 0 {
		return fleetapi.Fleet{}, ErrNoFleet
	}
	return best, nil
}
