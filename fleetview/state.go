package fleetview

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/google/btree"

	"github.com/fleetcast/fleetcast/fleet"
)

// state is the view as the engine's writer keeps it: what the next
// snapshot will hold. Only the writer uses it, under the engine's write
// lock; publish makes a Snapshot of it, sharing the fleets' tree (copied
// on write) and whatever else did not change since the previous one.
type state struct {
	loaded bool
	// lastLoad and lastSync are when the newest full load and the
	// newest sync began, lastClusterSync the newest read of clusters
	// (the engine's clock). A listener's read time advances lastSync
	// too. fleetsSince and clustersSince are the points from which the
	// next sync reads each collection: every write stamped earlier is
	// in the view.
	lastLoad, lastSync, lastClusterSync time.Time
	fleetsSince, clustersSince          time.Time
	// listening: a listener (Follower) delivers the fleets' changes.
	listening bool
	// lastCheck is when the newest check of the clusters began (see
	// Checker); misses counts, for each cluster, the checks in a row it
	// disagreed at.
	lastCheck time.Time
	misses    map[string]int
	// journal holds, while a sync reads, the newest document of each
	// fleet the listener delivered meanwhile: the sync's read may
	// predate them, and must not step the view back.
	journal map[string]*fleet.Document
	// gone: the tombstones read, so that no older read brings a fleet
	// back.
	gone removals

	fleets   *btree.BTreeG[*entry]
	ix       *index // the fleets' postings
	clusters map[string]*fleet.ClusterDocument
	// shown is each cluster's newest document and its shown hash, kept
	// across loads: a watch hears of a cluster when it changes.
	shown  map[string]shown
	digest uint64
	// stale is the state of every cluster the view has known, judged
	// at its newest sync: the clusters of a watch's changes.
	stale map[string]bool
	feed  feedWriter
	// clustersChanged: clusters, shown, stale or overBudget changed
	// since the last publish, which then copies them.
	clustersChanged bool

	// maxBytes bounds bytes, the DocBytes of the fleets held;
	// clusterBytes are each cluster's. Past it the cluster holding the
	// most is overBudget: its fleets leave the view, which takes none of
	// its documents until its next full load finds room, and it is
	// stale. evicted lists the clusters that went over since the caller
	// last looked (to log them).
	maxBytes     int
	bytes        int
	clusterBytes map[string]int
	overBudget   map[string]bool
	evicted      []string

	// shownHash hashes what the API shows of a cluster's document but
	// its staleness (Options.Shown).
	shownHash func(*fleet.ClusterDocument) uint64
}

func newState(o Options) *state {
	return &state{
		fleets: btree.NewG(treeDegree, lessEntry), ix: newIndex(), clusters: map[string]*fleet.ClusterDocument{}, shown: map[string]shown{},
		feed: newFeedWriter(o.FeedMaxBytes), maxBytes: o.MaxViewBytes, clusterBytes: map[string]int{}, overBudget: map[string]bool{},
		shownHash: o.Shown, gone: newRemovals(o),
	}
}

// publish returns the snapshot of the state now, sharing with prev
// whatever has not changed since prev was published, and the function
// that wakes the watches of earlier snapshots, to call once it is the
// current one (feedWriter.publish).
func (v *state) publish(prev *Snapshot, epoch uint64) (_ *Snapshot, announce func()) {
	f, updated, announce := v.feed.publish()
	postings, table, slots := v.ix.publish()
	s := &Snapshot{loaded: v.loaded, fleets: v.fleets.Clone(), postings: postings, table: table, slots: slots, digest: v.digest, bytes: v.bytes, feed: f, updated: updated,
		epoch: epoch, syncedAt: v.lastSync, version: prev.version + 1,
		clusters: prev.clusters, names: prev.names, shown: prev.shown, stale: prev.stale, over: prev.over}
	if v.clustersChanged || prev.clusters == nil {
		s.clusters, s.shown, s.stale, s.over = maps.Clone(v.clusters), maps.Clone(v.shown), maps.Clone(v.stale), maps.Clone(v.overBudget)
		s.names = slices.Sorted(maps.Keys(v.clusters))
		v.clustersChanged = false
	}
	return s, announce
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
		l.bytes -= DocBytes(old)
		l.clusterBytes[d.Cluster] -= DocBytes(old)
	}
	n := DocBytes(d)
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
func (v *state) load(fleets []*fleet.Document, clusters []*fleet.ClusterDocument, overBudget map[string]bool) {
	prev := v.fleets
	v.fleets = btree.NewG(treeDegree, lessEntry)
	v.ix = newIndex()
	v.clusters = make(map[string]*fleet.ClusterDocument, len(clusters))
	v.clustersChanged = true
	v.digest = 0
	v.bytes, v.clusterBytes, v.overBudget = 0, map[string]int{}, maps.Clone(overBudget)
	for c := range overBudget {
		v.evicted = append(v.evicted, c)
	}
	for _, d := range fleets {
		id := d.Key().DocID()
		if d.Deleted { // the journal's: the listener's newer state
			v.gone.add(id, d.Version)
			continue
		}
		if v.overBudget[d.Cluster] || v.gone.covers(id, d) {
			continue
		}
		e := &entry{id: id, doc: d, hash: fleetHash(id, d), bytes: DocBytes(d)}
		if old, ok := v.fleets.ReplaceOrInsert(e); ok { // never twice in one read; be safe
			v.ix.replace(old, e)
			v.digest ^= old.hash
			v.bytes -= old.bytes
			v.clusterBytes[old.doc.Cluster] -= old.bytes
		} else {
			v.ix.add(e)
		}
		v.digest ^= e.hash
		v.bytes += e.bytes
		v.clusterBytes[d.Cluster] += e.bytes
	}
	for v.bytes > v.limit() {
		c := v.largest()
		v.overBudget[c], v.evicted = true, append(v.evicted, c)
		for _, e := range v.clusterEntries(c) {
			v.digest ^= e.hash
			v.fleets.Delete(e)
			v.ix.remove(e)
		}
		v.bytes -= v.clusterBytes[c]
		delete(v.clusterBytes, c)
	}
	for _, c := range clusters {
		v.putCluster(c)
	}
	if v.loaded {
		v.fleets.Ascend(func(e *entry) bool {
			if old, ok := prev.Get(e); !ok || old.hash != e.hash {
				v.feed.record(change{before: entryDoc(old), after: e.doc})
			}
			return true
		})
		prev.Ascend(func(old *entry) bool {
			if !v.fleets.Has(old) {
				v.feed.record(change{before: old.doc})
			}
			return true
		})
	}
	v.loaded = true
}

func entryDoc(e *entry) *fleet.Document {
	if e == nil {
		return nil
	}
	return e.doc
}

// clusterEntries returns the entries of a cluster's fleets.
func (v *state) clusterEntries(cluster string) []*entry {
	var out []*entry
	lo, hi := fleet.ClusterPrefix(cluster)
	v.fleets.AscendRange(&entry{id: lo}, &entry{id: hi}, func(e *entry) bool {
		out = append(out, e)
		return true
	})
	return out
}

// putFleet applies one document read since the last sync: a tombstone
// removes the fleet, a live document adds or replaces it. It reports
// whether the view changed.
func (v *state) putFleet(d *fleet.Document) bool {
	id := d.Key().DocID()
	old, ok := v.fleets.Get(&entry{id: id})
	if ok && d.Version.Compare(old.doc.Version) < 0 {
		return false // an older state than held: never step back
	}
	if ok && d.WrittenAt.IsZero() && d.Version == old.doc.Version {
		return false // the change feed's re-announcement of what is held
	}
	if v.gone.covers(id, d) {
		return false // nor back to before its removal
	}
	if d.Deleted {
		v.gone.add(id, d.Version)
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
	if ok && old.hash == h {
		return false // read again within CommitLag of a sync
	}
	v.gone.forget(id)
	e := &entry{id: id, doc: d, hash: h, bytes: DocBytes(d)}
	v.fleets.ReplaceOrInsert(e)
	if ok {
		v.ix.replace(old, e)
	} else {
		v.ix.add(e)
	}
	v.digest ^= h
	v.bytes += e.bytes
	v.clusterBytes[d.Cluster] += e.bytes
	if ok {
		v.digest ^= old.hash
		v.bytes -= old.bytes
		v.clusterBytes[d.Cluster] -= old.bytes
		v.feed.record(change{before: old.doc, after: d})
	} else {
		v.feed.record(change{after: d})
	}
	for v.bytes > v.limit() {
		v.evict(v.largest())
	}
	return true
}

func (v *state) limit() int { return cmp.Or(v.maxBytes, DefaultMaxViewBytes) }

// remove takes a fleet out of the view, recording it in the feed.
func (v *state) remove(e *entry) {
	v.digest ^= e.hash
	v.fleets.Delete(e)
	v.ix.remove(e)
	v.bytes -= e.bytes
	v.clusterBytes[e.doc.Cluster] -= e.bytes
	v.feed.record(change{before: e.doc})
}

// largest is the cluster whose fleets take the most of the view.
func (v *state) largest() string { return largestOf(v.clusterBytes) }

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
// of its documents until its next full load (see state.maxBytes).
func (v *state) evict(cluster string) {
	v.overBudget[cluster], v.evicted = true, append(v.evicted, cluster)
	v.clustersChanged = true
	for _, e := range v.clusterEntries(cluster) {
		v.remove(e)
	}
	delete(v.clusterBytes, cluster)
}

// putCluster keeps a cluster's newest document, and records in the feed a
// change of what the API shows of a cluster the watches already know
// (judge records those that appear).
func (v *state) putCluster(c *fleet.ClusterDocument) {
	if old, ok := v.clusters[c.Cluster]; ok {
		if c.SnapshotVersion.Compare(old.SnapshotVersion) < 0 {
			return
		}
		v.digest ^= clusterHash(old)
	}
	v.clustersChanged = true
	v.clusters[c.Cluster] = c
	v.digest ^= clusterHash(c)
	now := shown{hash: v.shownHash(c), doc: c}
	was, had := v.shown[c.Cluster]
	v.shown[c.Cluster] = now
	if st, known := v.stale[c.Cluster]; known && (!had || was.hash != now.hash) {
		v.feed.record(change{cluster: c.Cluster,
			was: clusterState{known: true, stale: st, shown: was.hash, doc: was.doc},
			is:  clusterState{known: true, stale: st, shown: now.hash, doc: c}})
	}
}

// judge sets each cluster's staleness at now, and records in the feed the
// clusters that appeared or whose staleness changed. A cluster whose
// document is gone stays known, stale.
func (v *state) judge(now time.Time, staleAfter time.Duration) {
	first := v.stale == nil // the view's starting point, not a change
	if first {
		v.stale = make(map[string]bool, len(v.clusters))
		v.clustersChanged = true
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

func (v *state) judgeOne(name string, now time.Time, staleAfter time.Duration, record bool) {
	st := IsStale(v.clusters[name], now, staleAfter) || v.overBudget[name]
	old, known := v.stale[name]
	if known && old == st {
		return
	}
	v.stale[name] = st
	v.clustersChanged = true
	if record {
		sh := v.shown[name]
		v.feed.record(change{cluster: name,
			was: clusterState{known: known, stale: !known || old, shown: sh.hash, doc: sh.doc},
			is:  clusterState{known: true, stale: st, shown: sh.hash, doc: sh.doc}})
	}
}
