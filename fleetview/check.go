package fleetview

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
)

// A Checker is a Source that can also tell how many live fleets one
// cluster has (and the sum of their docIDHash) for the price of an
// aggregation, and read that cluster's alone. A view that follows a
// Checker compares its clusters with it every CheckInterval and reloads
// a cluster that disagreed twice in a row, in place of loading every
// cluster every Resync (see Options.FollowResync).
type Checker interface {
	Source
	ClusterDigest(ctx context.Context, cluster string) (count, sum int64, err error)
	ClusterFleets(ctx context.Context, cluster string, each func(*fleet.Document)) ([]string, error)
}

// checkWorkers bounds the aggregations a check runs at once.
const checkWorkers = 8

// skipped are the live documents the view leaves out because no answer
// could hold them (answerable): the store counts them, the view does not.
type skipped struct {
	mu   sync.Mutex
	byID map[string]string // document ID → its cluster
}

// reset forgets the skipped documents of cluster, or of every cluster
// when it is empty: a load reads them again.
func (s *skipped) reset(cluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.byID {
		if cluster == "" || c == cluster {
			delete(s.byID, id)
		}
	}
}

func (s *skipped) put(id, cluster string, skip bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !skip {
		delete(s.byID, id)
		return
	}
	if s.byID == nil {
		s.byID = map[string]string{}
	}
	s.byID[id] = cluster
}

// digest is the count and docIDHash sum of cluster's skipped documents.
func (s *skipped) digest(cluster string) (count, sum int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.byID {
		if c == cluster {
			count, sum = count+1, sum+fleet.IDHash(id)
		}
	}
	return count, sum
}

// viewDigest is what the store's digest of cluster is when the view
// holds exactly its live fleets: the fleets held that carry their ID
// (as the aggregation counts only those), and the skipped ones.
func (e *Engine) viewDigest(s *Snapshot, cluster string) (count, sum int64) {
	count, sum = e.skipped.digest(cluster)
	for _, d := range s.ClusterEntries(cluster) {
		if d.DocID != "" {
			count, sum = count+1, sum+d.DocIDHash
		}
	}
	return count, sum
}

// checkDue reports whether a round that began at started checks the
// clusters: its Source is a Checker, it follows it, and CheckInterval has
// passed since the last check.
func (e *Engine) checkDue(started time.Time) (Checker, bool) {
	c, ok := e.src.(Checker)
	if !ok {
		return nil, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return c, e.st.loaded && e.st.listening && started.Sub(e.st.lastCheck) >= e.opts.CheckInterval
}

// check compares each cluster the view holds with the store's digest of
// it, and reloads those that disagreed at this check and the previous
// one: a change in flight can make one check disagree, not two a
// CheckInterval apart.
func (e *Engine) check(ctx context.Context, src Checker, started time.Time) error {
	snap := e.Current()
	var names []string
	for name := range snap.Clusters() {
		if !snap.OverBudget(name) && e.admits(name) {
			names = append(names, name)
		}
	}
	type result struct{ count, sum int64 }
	var mu sync.Mutex
	got := map[string]result{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(checkWorkers)
	for _, name := range names {
		g.Go(func() error {
			count, sum, err := src.ClusterDigest(gctx, name)
			if err != nil {
				return fmt.Errorf("check cluster %s: %w", name, err)
			}
			mu.Lock()
			got[name] = result{count, sum}
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	disagree := map[string]bool{}
	for name, r := range got {
		count, sum := e.viewDigest(snap, name)
		disagree[name] = r.count != count || (r.sum != sum && r.sum >= 0)
	}
	var reload []string
	e.mu.Lock()
	misses := e.st.misses
	e.st.misses = map[string]int{}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if !disagree[name] {
			continue
		}
		if e.st.misses[name] = misses[name] + 1; e.st.misses[name] >= 2 {
			reload = append(reload, name)
			delete(e.st.misses, name)
		}
	}
	e.st.lastCheck = started
	e.mu.Unlock()
	for _, name := range reload {
		if err := e.reloadCluster(ctx, src, name); err != nil {
			return err
		}
	}
	return nil
}

// reloadCluster reads cluster's live fleets and makes the view hold
// exactly them: it removes the fleets the store no longer has live, as
// if their tombstones had been read, and applies the others. What a
// listener delivers meanwhile is kept in the journal and wins over the
// read, as in a round.
func (e *Engine) reloadCluster(ctx context.Context, src Checker, cluster string) error {
	e.mu.Lock()
	e.st.journal = map[string]*fleet.Document{}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.st.journal = nil
		e.mu.Unlock()
	}()
	read := map[string]*fleet.Document{}
	e.skipped.reset(cluster)
	bad, err := src.ClusterFleets(ctx, cluster, func(d *fleet.Document) {
		d = e.answerable([]*fleet.Document{d})[0]
		read[d.Key().DocID()] = d
	})
	if err != nil {
		return fmt.Errorf("reload cluster %s: %w", cluster, err)
	}
	e.unreadable("fleets", bad)
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.st
	removed, applied := 0, 0
	for _, en := range v.clusterEntries(cluster) {
		if _, ok := read[en.id]; ok {
			continue
		}
		if _, ok := v.journal[en.id]; ok {
			continue // delivered since the read began: the journal's state stands
		}
		v.gone.add(en.id, en.doc.Version)
		v.remove(en)
		removed++
	}
	for id, d := range read {
		if j, ok := v.journal[id]; ok && j.Version.Compare(d.Version) >= 0 {
			continue
		}
		if v.putFleet(d) {
			applied++
		}
	}
	e.publish()
	e.opts.Log.Warn("query view: a cluster disagreed with the store at two checks in a row; its fleets were read again",
		logging.KeyCluster, cluster, "removed", removed, "applied", applied)
	return nil
}
