// Package fleetwatch keeps a live, local view of fleetcast's fleets for a
// matchmaker: a Firestore realtime listener feeds it, it starts from a
// consistent view, then applies Added, Modified and Removed changes, and a
// second listener follows the clusters' heartbeats so that a cluster whose
// publisher went quiet turns stale even when none of its fleets changes.
// Listener errors are retried with backoff; cancelling the context ends
// the watch.
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
	fleets map[string]*fleet.Document
	clus   map[string]*fleet.ClusterDocument
	done   chan struct{}
	err    error
}

// Watch starts watching and returns once the initial view is complete (or
// ctx ends first). The view stays live until ctx is cancelled.
func Watch(ctx context.Context, client *firestore.Client, q Options) (*View, error) {
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
		return nil, fmt.Errorf("watch: at most %d clusters, got %d", fleetapi.MaxClusters, len(q.Clusters))
	}
	v := &View{q: q, fleets: map[string]*fleet.Document{}, clus: map[string]*fleet.ClusterDocument{}, done: make(chan struct{})}
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
	next := make(map[string]*fleet.Document, len(docs))
	for _, s := range docs {
		if d := v.decodeFleet(s); d != nil {
			next[s.Ref.ID] = d
		}
	}
	v.mu.Lock()
	prev := v.fleets
	v.fleets = next
	v.mu.Unlock()
	if !emit {
		return
	}
	for id, d := range next {
		if p, ok := prev[id]; !ok {
			v.emit(Added, d)
		} else if p.Version != d.Version {
			v.emit(Modified, d)
		}
	}
	for id, d := range prev {
		if _, ok := next[id]; !ok {
			v.emit(Removed, d)
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
	v.mu.Lock()
	_, existed := v.fleets[id]
	v.fleets[id] = d
	v.mu.Unlock()
	if existed {
		v.emit(Modified, d)
	} else {
		v.emit(Added, d)
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

func (v *View) emit(kind ChangeKind, d *fleet.Document) {
	if v.q.OnChange == nil {
		return
	}
	v.mu.RLock()
	stale := v.staleLocked(d.Cluster)
	v.mu.RUnlock()
	v.q.OnChange(Change{Kind: kind, Fleet: fleetapi.NewFleet(d, stale)})
}

func (v *View) staleLocked(cluster string) bool {
	return fleetapi.IsStale(v.clus[cluster], v.q.Now(), v.q.StaleAfter)
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
	out := []fleetapi.Fleet{}
	for _, d := range v.fleets {
		if selector.Matches(labels.Set(d.Labels)) {
			out = append(out, fleetapi.NewFleet(d, v.staleLocked(d.Cluster)))
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
