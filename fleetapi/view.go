package fleetapi

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
)

// Source is what a view reads: every live fleet and cluster once, then the
// documents written since a point, tombstones included.
// firestoredb.Store is the Source of a deployment.
type Source interface {
	// LiveFleets calls each with every live fleet, in document ID order,
	// as it reads them, and returns the IDs of those it cannot decode.
	LiveFleets(ctx context.Context, each func(*fleet.Document)) ([]string, error)
	Clusters(ctx context.Context) (fleet.Page[fleet.ClusterDocument], error)
	FleetsWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.Document], error)
	ClustersWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.ClusterDocument], error)
}

// A Follower is a Source that can also deliver the fleet documents
// written at or after a point as they commit, as a Firestore realtime
// listener does: a view that follows it while watches run reads each
// write once, where polling reads it again at every poll within
// CommitLag of it. FollowFleets calls apply with the documents there when
// it starts, then with each change, and with the read time (Firestore's
// clock) before which every write had been delivered. It returns nil
// when ctx ends, and the error that stopped it otherwise.
type Follower interface {
	Source
	FollowFleets(ctx context.Context, since time.Time, apply func(fleet.Page[fleet.Document], time.Time)) error
}

// entry is one live fleet of the view.
type entry struct {
	id    string // the document ID: (cluster, namespace, name) order
	doc   *fleet.Document
	hash  uint64
	bytes int // docBytes(doc)
}

// view is the in-memory state of the live fleets and clusters, kept
// current by reading what was written since its last sync.
type view struct {
	loaded bool
	// lastLoad and lastSync are when the newest full load and the
	// newest sync began, lastClusterSync the newest read of clusters
	// (the Service's clock). A listener's read time advances lastSync
	// too. fleetsSince and clustersSince are the points from which the
	// next sync reads each collection: every write stamped earlier is
	// in the view.
	lastLoad, lastSync, lastClusterSync time.Time
	fleetsSince, clustersSince          time.Time
	// listening: a listener (Follower) delivers the fleets' changes.
	listening bool
	// journal holds, while a sync reads, the newest document of each
	// fleet the listener delivered meanwhile: the sync's read may
	// predate them, and must not step the view back.
	journal map[string]*fleet.Document

	byID     map[string]*entry
	sorted   []*entry // by id
	clusters map[string]*fleet.ClusterDocument
	// shown is each cluster's newest document and its shownHash, kept
	// across loads: a watch hears of a cluster when it changes.
	shown map[string]shown
	// digest is the XOR of the hashes of every live fleet and cluster:
	// two views holding the same documents have the same digest,
	// whatever their history.
	digest uint64
	// stale is the state of every cluster the view has known, judged
	// at its newest sync: the clusters of a watch's changes.
	stale map[string]bool
	// feed records the changes of fleets and of clusters' states after
	// the first load.
	feed feed

	// maxBytes bounds bytes, the docBytes of the fleets held; clusterBytes
	// are each cluster's. Past it the cluster holding the most is
	// overBudget: its fleets leave the view, which takes none of its
	// documents until its next full load finds room, and it is stale.
	// evicted lists the clusters that went over since the caller last
	// looked (to log them).
	maxBytes     int
	bytes        int
	clusterBytes map[string]int
	overBudget   map[string]bool
	evicted      []string
}

func fleetHash(id string, d *fleet.Document) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(d.Version.Term)))
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(d.Version.Seq)))
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(d.WrittenAt.UnixNano())))
	return h.Sum64()
}

func clusterHash(c *fleet.ClusterDocument) uint64 {
	h := fnv.New64a()
	h.Write([]byte("cluster/" + c.Cluster))
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(c.SnapshotVersion.Term)))
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(c.SnapshotVersion.Seq)))
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(c.IngestedAt.UnixNano())))
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(c.WrittenAt.UnixNano())))
	return h.Sum64()
}

// loading admits the documents of a full load as they are read: past the
// view's budget the cluster holding the most is dropped, and its later
// documents are not kept, so that a load holds no more than the view may.
type loading struct {
	limit, bytes int
	byCluster    map[string]map[string]*fleet.Document
	clusterBytes map[string]int
	overBudget   map[string]bool
}

func newLoading(limit int) *loading {
	return &loading{limit: limit, byCluster: map[string]map[string]*fleet.Document{}, clusterBytes: map[string]int{}, overBudget: map[string]bool{}}
}

func (l *loading) add(d *fleet.Document) {
	if d.Deleted || l.overBudget[d.Cluster] {
		return
	}
	m := l.byCluster[d.Cluster]
	if m == nil {
		m = map[string]*fleet.Document{}
		l.byCluster[d.Cluster] = m
	}
	id := d.Key().DocID()
	if old, ok := m[id]; ok { // never twice in one read; be safe
		l.bytes -= docBytes(old)
		l.clusterBytes[d.Cluster] -= docBytes(old)
	}
	n := docBytes(d)
	m[id] = d
	l.bytes += n
	l.clusterBytes[d.Cluster] += n
	for l.bytes > l.limit {
		c := largestOf(l.clusterBytes)
		l.overBudget[c] = true
		l.bytes -= l.clusterBytes[c]
		delete(l.clusterBytes, c)
		delete(l.byCluster, c)
	}
}

func (l *loading) docs() []*fleet.Document {
	var out []*fleet.Document
	for _, m := range l.byCluster {
		for _, d := range m {
			out = append(out, d)
		}
	}
	return out
}

// load replaces the view's content with a full read, of which the
// clusters overBudget were left out. A reload records in the feed what
// differs from the content it replaces.
func (v *view) load(fleets []*fleet.Document, clusters []*fleet.ClusterDocument, overBudget map[string]bool) {
	prev := v.byID
	v.byID = make(map[string]*entry, len(fleets))
	v.sorted = make([]*entry, 0, len(fleets))
	v.clusters = make(map[string]*fleet.ClusterDocument, len(clusters))
	if v.shown == nil {
		v.shown = make(map[string]shown, len(clusters))
	}
	v.digest = 0
	v.bytes, v.clusterBytes, v.overBudget = 0, map[string]int{}, maps.Clone(overBudget)
	for c := range overBudget {
		v.evicted = append(v.evicted, c)
	}
	for _, d := range fleets {
		if d.Deleted || v.overBudget[d.Cluster] {
			continue
		}
		id := d.Key().DocID()
		if old, ok := v.byID[id]; ok { // never twice in one read; be safe
			v.digest ^= old.hash
			v.bytes -= old.bytes
			v.clusterBytes[old.doc.Cluster] -= old.bytes
		}
		e := &entry{id: id, doc: d, hash: fleetHash(id, d), bytes: docBytes(d)}
		v.byID[id] = e
		v.digest ^= e.hash
		v.bytes += e.bytes
		v.clusterBytes[d.Cluster] += e.bytes
	}
	for v.bytes > v.limit() {
		c := v.largest()
		v.overBudget[c], v.evicted = true, append(v.evicted, c)
		for id, e := range v.byID {
			if e.doc.Cluster == c {
				v.digest ^= e.hash
				delete(v.byID, id)
			}
		}
		v.bytes -= v.clusterBytes[c]
		delete(v.clusterBytes, c)
	}
	for _, e := range v.byID {
		v.sorted = append(v.sorted, e)
	}
	slices.SortFunc(v.sorted, func(a, b *entry) int { return strings.Compare(a.id, b.id) })
	for _, c := range clusters {
		v.putCluster(c)
	}
	if v.loaded {
		for _, e := range v.sorted {
			if old, ok := prev[e.id]; !ok || old.hash != e.hash {
				v.feed.record(change{before: entryDoc(old), after: e.doc})
			}
		}
		for id, old := range prev {
			if _, ok := v.byID[id]; !ok {
				v.feed.record(change{before: old.doc})
			}
		}
	}
	v.loaded = true
}

func entryDoc(e *entry) *fleet.Document {
	if e == nil {
		return nil
	}
	return e.doc
}

// putFleet applies one document read since the last sync: a tombstone
// removes the fleet, a live document adds or replaces it. It reports
// whether the view changed.
func (v *view) putFleet(d *fleet.Document) bool {
	id := d.Key().DocID()
	old, ok := v.byID[id]
	if ok && d.Version.Compare(old.doc.Version) < 0 {
		return false // an older state than held: never step back
	}
	if d.Deleted {
		if !ok {
			return false
		}
		v.remove(old)
		return true
	}
	if v.overBudget[d.Cluster] {
		return false // not held until the next full load
	}
	h := fleetHash(id, d)
	if ok {
		if old.hash == h {
			return false // read again within CommitLag of a sync
		}
		v.digest ^= old.hash ^ h
		v.feed.record(change{before: old.doc, after: d})
		n := docBytes(d)
		v.bytes += n - old.bytes
		v.clusterBytes[d.Cluster] += n - old.bytes
		old.doc, old.hash, old.bytes = d, h, n
	} else {
		e := &entry{id: id, doc: d, hash: h, bytes: docBytes(d)}
		v.byID[id] = e
		v.digest ^= h
		v.bytes += e.bytes
		v.clusterBytes[d.Cluster] += e.bytes
		i, _ := slices.BinarySearchFunc(v.sorted, id, func(e *entry, id string) int { return strings.Compare(e.id, id) })
		v.sorted = slices.Insert(v.sorted, i, e)
		v.feed.record(change{after: d})
	}
	for v.bytes > v.limit() {
		v.evict(v.largest())
	}
	return true
}

func (v *view) limit() int { return cmp.Or(v.maxBytes, DefaultMaxViewBytes) }

// remove takes a fleet out of the view, recording it in the feed.
func (v *view) remove(e *entry) {
	v.digest ^= e.hash
	delete(v.byID, e.id)
	v.bytes -= e.bytes
	v.clusterBytes[e.doc.Cluster] -= e.bytes
	i, _ := slices.BinarySearchFunc(v.sorted, e.id, func(x *entry, id string) int { return strings.Compare(x.id, id) })
	v.sorted = slices.Delete(v.sorted, i, i+1)
	v.feed.record(change{before: e.doc})
}

// largest is the cluster whose fleets take the most of the view.
func (v *view) largest() string { return largestOf(v.clusterBytes) }

// largestOf is the cluster of the most bytes, the first by name of those
// that tie.
func largestOf(clusterBytes map[string]int) string {
	best := ""
	for c, n := range clusterBytes {
		if best == "" || n > clusterBytes[best] || n == clusterBytes[best] && c < best {
			best = c
		}
	}
	return best
}

// evict takes every fleet of cluster out of the view, which holds none
// of its documents until its next full load (see view.maxBytes).
func (v *view) evict(cluster string) {
	v.overBudget[cluster], v.evicted = true, append(v.evicted, cluster)
	i, _ := slices.BinarySearchFunc(v.sorted, cluster, func(e *entry, c string) int { return strings.Compare(e.doc.Cluster, c) })
	for i < len(v.sorted) && v.sorted[i].doc.Cluster == cluster {
		v.remove(v.sorted[i])
	}
	delete(v.clusterBytes, cluster)
}

// putCluster keeps a cluster's newest document, and records in the feed a
// change of what the API shows of a cluster the watches already know
// (judge records those that appear).
func (v *view) putCluster(c *fleet.ClusterDocument) {
	if old, ok := v.clusters[c.Cluster]; ok {
		if c.SnapshotVersion.Compare(old.SnapshotVersion) < 0 {
			return
		}
		v.digest ^= clusterHash(old)
	}
	v.clusters[c.Cluster] = c
	v.digest ^= clusterHash(c)
	now := shown{hash: shownHash(c), doc: c}
	was, had := v.shown[c.Cluster]
	v.shown[c.Cluster] = now
	if st, known := v.stale[c.Cluster]; known && (!had || was.hash != now.hash) {
		v.feed.record(change{cluster: c.Cluster,
			was: clusterState{known: true, stale: st, shown: was.hash, doc: was.doc},
			is:  clusterState{known: true, stale: st, shown: now.hash, doc: c}})
	}
}

// shown is what the API shows of a cluster: its document, and a hash of it.
type shown struct {
	hash uint64
	doc  *fleet.ClusterDocument
}

// shownHash hashes what the API shows of a cluster's document but its
// staleness: its heartbeat time, fleet count, totals, labels, publisher.
func shownHash(c *fleet.ClusterDocument) uint64 {
	b, _ := json.Marshal(NewCluster(c, false)) // plain data: cannot fail
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// judge sets each cluster's staleness at now, and records in the feed the
// clusters that appeared or whose staleness changed. A cluster whose
// document is gone stays known, stale.
func (v *view) judge(now time.Time, staleAfter time.Duration) {
	first := v.stale == nil // the view's starting point, not a change
	if first {
		v.stale = make(map[string]bool, len(v.clusters))
	}
	for _, name := range slices.Sorted(maps.Keys(v.clusters)) {
		v.judgeOne(name, now, staleAfter, !first)
	}
	for _, name := range slices.Sorted(maps.Keys(v.stale)) {
		if _, ok := v.clusters[name]; !ok {
			v.judgeOne(name, now, staleAfter, !first)
		}
	}
}

func (v *view) judgeOne(name string, now time.Time, staleAfter time.Duration, record bool) {
	st := IsStale(v.clusters[name], now, staleAfter) || v.overBudget[name]
	old, known := v.stale[name]
	if known && old == st {
		return
	}
	v.stale[name] = st
	if record {
		sh := v.shown[name]
		v.feed.record(change{cluster: name,
			was: clusterState{known: known, stale: !known || old, shown: sh.hash, doc: sh.doc},
			is:  clusterState{known: true, stale: st, shown: sh.hash, doc: sh.doc}})
	}
}

// syncRound is one sync of the view, shared by every request that waits
// for it.
type syncRound struct {
	done chan struct{}
	err  error
	// started is when the round began reading (zero while queued); set
	// under syncMu.
	started time.Time
	// strict: some caller needs the fleets read, listener or not; set
	// under syncMu while queued.
	strict bool
}

// sync brings the view up to date for a request beginning now. With
// MaxStaleness, a view whose newest sync began less than that ago is
// current enough: the request does not wait, and a sync starts in the
// background once the view is half that old, unless watches poll the
// view at least that often (each sync costs reads, and a write is read
// again by every sync within CommitLag after it: syncs the poll makes
// anyway are the cheapest). Otherwise the request waits for a sync that
// begins after it arrived, never one already under way, which may have
// read before a write the caller saw acknowledged. Concurrent callers
// share rounds, so a burst of requests costs one or two syncs.
func (s *Service) sync(ctx context.Context) error {
	if m := s.opts.MaxStaleness; m > 0 {
		now := s.opts.Now()
		s.mu.RLock()
		loaded, age := s.view.loaded, now.Sub(s.view.lastSync)
		s.mu.RUnlock()
		if loaded && age < m {
			if age >= m/2 && !s.polled() {
				s.join(false)
			}
			return nil
		}
		// A sync already reading, begun within MaxStaleness, holds
		// every write acknowledged that long before the request: wait
		// for it rather than for one more.
		if r := s.runningSince(now.Add(-m)); r != nil {
			return r.wait(ctx)
		}
		return s.join(false).wait(ctx)
	}
	return s.Sync(ctx)
}

// runningSince returns the round reading now if it began at or after t.
func (s *Service) runningSince(t time.Time) *syncRound {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if r := s.running; r != nil && !r.started.IsZero() && !r.started.Before(t) {
		return r
	}
	return nil
}

// wait waits for r, or for ctx to end.
func (r *syncRound) wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return storeErr(context.Cause(ctx))
	}
}

// polled reports whether watches poll the view at least every
// MaxStaleness. Watches on a Follower's view listen rather than poll:
// the listener keeps the view fresh only while writes come.
func (s *Service) polled() bool {
	if _, ok := s.src.(Follower); ok {
		return false
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	return s.watches > 0 && s.opts.WatchPoll <= s.opts.MaxStaleness
}

// Sync waits for a sync of the view that begins after the call: then the
// view holds every write acknowledged before the call, and no sync begun
// earlier is still running.
func (s *Service) Sync(ctx context.Context) error {
	return s.join(true).wait(ctx)
}

// join returns the first round that begins after the call: a new one when
// none runs, else the one queued behind the running one. strict: the
// round must read the fleets even if a listener delivers them, for a
// caller that must see every write acknowledged before it.
func (s *Service) join(strict bool) *syncRound {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	switch {
	case s.running == nil:
		r := &syncRound{done: make(chan struct{}), strict: strict}
		s.running = r
		go s.runSyncs(r)
		return r
	case s.queued == nil:
		s.queued = &syncRound{done: make(chan struct{}), strict: strict}
	default:
		s.queued.strict = s.queued.strict || strict
	}
	return s.queued
}

// runSyncs runs r, then the round queued while it ran, until none is.
// Rounds are not bound to one request: a caller that gives up does not
// cancel the others' sync.
func (s *Service) runSyncs(r *syncRound) {
	for r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.SyncTimeout)
		s.syncMu.Lock()
		r.started = s.opts.Now()
		strict := r.strict
		s.syncMu.Unlock()
		r.err = s.syncOnce(ctx, r.started, strict)
		cancel()
		if r.err != nil {
			// Waiters answer with the error; a background round has
			// none, and must not fail unseen.
			s.opts.Log.Warn("query view sync failed", logging.KeyError, r.err.Error())
		}
		close(r.done)
		s.syncMu.Lock()
		r, s.queued = s.queued, nil
		s.running = r
		s.syncMu.Unlock()
	}
}

// syncOnce reads what changed since the last sync and applies it; or
// everything: the first time, every Options.Resync, and when the last
// sync is so old that tombstones written since may have expired.
//
// A sync that begins at T reads the documents stamped at or after the
// previous sync's point, and its own point is T - CommitLag: a write
// stamped before that was visible when this sync read (a commit becomes
// visible at most CommitLag after its server timestamp), so no later
// sync needs to read it again. Documents stamped within CommitLag before
// a sync are read again by the next one, and change nothing.
//
// While a listener delivers the fleets, a sync reads them only when
// strict (its caller must see every write acknowledged before it) or when
// the listener has been quiet for MaxStaleness/2: a listener sends nothing
// while nothing changes, so only a read tells quiet from stalled. What the
// listener delivers while the sync reads is kept in the journal and wins
// over the read, which may predate it.
func (s *Service) syncOnce(ctx context.Context, started time.Time, strict bool) error {
	point := started.Add(-s.opts.CommitLag)
	s.mu.Lock()
	v := &s.view
	full := !v.loaded || started.Sub(v.lastLoad) >= s.opts.Resync || started.Sub(v.lastSync) > s.opts.TombstoneRetention/2
	clustersDue := started.Sub(v.lastClusterSync) >= s.opts.ClusterRefresh
	fleetsDue := full || strict || !v.listening || started.Sub(v.lastSync) >= s.opts.MaxStaleness/2
	fleetsSince, clustersSince := v.fleetsSince, v.clustersSince
	if fleetsDue {
		v.journal = map[string]*fleet.Document{}
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.view.journal = nil
		s.mu.Unlock()
	}()

	if full {
		// Admitted as they are read: a load holds no more than the
		// view may (MaxViewBytes), whatever the store holds.
		l := newLoading(s.view.limit())
		bad, err := s.src.LiveFleets(ctx, func(d *fleet.Document) { l.add(s.answerable([]*fleet.Document{d})[0]) })
		if err != nil {
			return storeErr(err)
		}
		clusters, err := s.src.Clusters(ctx)
		if err != nil {
			return storeErr(err)
		}
		s.unreadable("fleets", bad)
		s.unreadable("clusters", clusters.Unreadable)
		cdocs := s.answerableClusters(clusters.Docs)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.view.load(withJournal(l.docs(), s.view.journal), cdocs, l.overBudget)
		s.view.lastLoad, s.view.lastClusterSync = started, started
		s.view.lastSync = maxTime(s.view.lastSync, started)
		s.view.fleetsSince = maxTime(s.view.fleetsSince, point)
		s.view.clustersSince = point
		s.view.judge(s.opts.Now(), s.opts.StaleAfter)
		s.view.feed.publish()
		s.reportEvicted()
		s.opts.Log.Info("query view loaded", "fleets", len(s.view.sorted), "clusters", len(s.view.clusters),
			"tookMillis", s.opts.Now().Sub(started).Milliseconds())
		return nil
	}
	var fleets fleet.Page[fleet.Document]
	if fleetsDue {
		var err error
		if fleets, err = s.src.FleetsWrittenSince(ctx, fleetsSince); err != nil {
			return storeErr(err)
		}
		s.unreadable("fleets", fleets.Unreadable)
		fleets.Docs = s.answerable(fleets.Docs)
	}
	var clusters fleet.Page[fleet.ClusterDocument]
	if clustersDue {
		var err error
		if clusters, err = s.src.ClustersWrittenSince(ctx, clustersSince); err != nil {
			return storeErr(err)
		}
		s.unreadable("clusters", clusters.Unreadable)
		clusters.Docs = s.answerableClusters(clusters.Docs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fleetsDue {
		for _, d := range fleets.Docs {
			if j, ok := s.view.journal[d.Key().DocID()]; !ok || d.Version.Compare(j.Version) > 0 {
				s.view.putFleet(d)
			}
		}
		s.view.fleetsSince = maxTime(s.view.fleetsSince, point)
		s.view.lastSync = maxTime(s.view.lastSync, started)
	}
	if clustersDue {
		for _, c := range clusters.Docs {
			s.view.putCluster(c)
		}
		s.view.clustersSince = maxTime(s.view.clustersSince, point)
		s.view.lastClusterSync = started
	}
	s.view.judge(s.opts.Now(), s.opts.StaleAfter)
	s.view.feed.publish()
	s.reportEvicted()
	return nil
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
	return slices.Collect(maps.Values(byID))
}

// heard applies what the listener delivered: its documents, and its read
// time, before which every write is in the view. The read time is
// Firestore's clock, compared with the Service's: the clocks of Google's
// machines agree to well within MaxStaleness.
func (s *Service) heard(p fleet.Page[fleet.Document], readTime time.Time) {
	s.unreadable("fleets", p.Unreadable)
	p.Docs = s.answerable(p.Docs)
	s.mu.Lock()
	defer s.mu.Unlock()
	v := &s.view
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
	v.fleetsSince = maxTime(v.fleetsSince, readTime.Add(-s.opts.CommitLag))
	v.feed.publish()
	s.reportEvicted()
}

// reportEvicted logs the clusters the view left out since it last did,
// at ERROR: the lock is held.
func (s *Service) reportEvicted() {
	for _, c := range s.view.evicted {
		s.opts.Log.Error("query view: a cluster's fleets exceed the instance's memory budget (VIEW_MAX_BYTES); it is left out, reported stale, until the next full load finds room",
			logging.KeyCluster, c, "viewBytes", s.view.bytes, "maxViewBytes", s.view.limit())
	}
	s.view.evicted = nil
}

func (s *Service) unreadable(collection string, ids []string) {
	if len(ids) > 0 {
		s.opts.Log.Error("query view: undecodable documents skipped", "collection", collection,
			"count", len(ids), "docs", ids[:min(10, len(ids))], logging.KeyError, "cannot decode")
	}
}

// answerable returns docs with each live document that no answer could
// hold (Encodable) replaced by its removal: it leaves the view, counted
// and logged with its ID, and fails no answer about the others.
func (s *Service) answerable(docs []*fleet.Document) []*fleet.Document {
	for i, d := range docs {
		if d.Deleted {
			continue
		}
		if !s.admits(d.Cluster) {
			// Another partition's: as good as absent here.
			docs[i] = &fleet.Document{Cluster: d.Cluster, Namespace: d.Namespace, Name: d.Name, Deleted: true, Version: d.Version}
			continue
		}
		if err := Encodable(d); err != nil {
			s.opts.Log.Error("query view: a fleet document no answer can hold is left out", "collection", "fleets",
				logging.KeyFleet, d.Key().DocID(), logging.KeyError, err.Error(), "unanswerableTotal", s.unanswerable.Add(1))
			docs[i] = &fleet.Document{Cluster: d.Cluster, Namespace: d.Namespace, Name: d.Name, Deleted: true, Version: d.Version}
		}
	}
	return docs
}

// answerableClusters leaves out the cluster documents no answer could
// hold: the cluster keeps its previous document, and turns stale when that
// ages.
func (s *Service) answerableClusters(docs []*fleet.ClusterDocument) []*fleet.ClusterDocument {
	out := docs[:0]
	for _, c := range docs {
		if !s.admits(c.Cluster) {
			continue // another partition's
		}
		if err := ClusterEncodable(c); err != nil {
			s.opts.Log.Error("query view: a cluster document no answer can hold is left out", "collection", "clusters",
				logging.KeyCluster, c.Cluster, logging.KeyError, err.Error(), "unanswerableTotal", s.unanswerable.Add(1))
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
