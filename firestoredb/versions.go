package firestoredb

import (
	"container/list"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetcast/fleetcast/fleet"
)

// DefaultVersionCacheBytes bounds the version cache of a Store: about
// 100 000 fleets at the entry's size, ten times the reference deployment.
const DefaultVersionCacheBytes = 16 << 20

// DefaultVersionCacheTTL is how long an entry answers: half the
// publisher's refresh interval (10 min), so that a refresh, which re-sends
// a fleet unchanged to heal what the store lost (an operator's delete, a
// restore), always reads the document and re-creates it if it is gone.
const DefaultVersionCacheTTL = 5 * time.Minute

// versionEntryOverhead is an entry's size beside its ID: the list
// element, the map entry and the fields, measured roughly.
const versionEntryOverhead = 160

// versions is an instance's cache of the fleet documents it last read or
// wrote: each one's version, update time and the stored fields its type
// lacks. It lets the ingest decide a duplicate with no read, and write a
// change with no read, on the condition that the document's update time
// is still the cached one: a wrong entry (another instance wrote since)
// fails that condition and is forgotten, and the event is applied from a
// read. Least recently used entries go first beyond maxBytes.
type versions struct {
	maxBytes int
	ttl      time.Duration
	mu       sync.Mutex
	used     int
	order    *list.List // of *versionEntry, most recent first
	byID     map[string]*list.Element
	// hits are events answered from an entry; misses those that found
	// none, or one past its age; wrong entries whose condition failed;
	// asideWrites the changes written from a read although an entry was
	// there, while the cache stood aside (trusted).
	hits, misses, wrong, asideWrites atomic.Int64
	// outcomes are the last writeWindow conditional writes made from an
	// entry, a bit each (1: the entry was wrong), newest lowest; tried is
	// how many of them there are, and asideSince the changes written from
	// a read since the cache last tried one (both under mu).
	outcomes   uint64
	tried      int
	asideSince int
}

// writeWindow is how many of the cache's latest conditional writes decide
// whether it is trusted with the next: as many as a uint64 holds.
const writeWindow = 64

// probeEvery: while the cache stands aside, one change in this many is
// still written from its entry, so that it comes back once its entries
// are right again.
const probeEvery = 16

// trusted says whether to write a change from its entry. A wrong entry
// costs the refused write before the read and the write, so the cache
// pays only while most of its entries are right: with no affinity between
// a fleet's events and an instance (Pub/Sub's push, many instances), an
// entry is right about one time in as many instances. When more than half
// of its latest writeWindow writes were refused the cache stands aside for
// changes, which then cost a read and a write as without it, but for one
// in probeEvery; duplicates and stale events are still answered from it,
// which costs nothing whether the entry is right or not.
func (v *versions) trusted() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.tried < writeWindow/2 || bits.OnesCount64(v.outcomes)*2 <= v.tried {
		return true
	}
	v.asideSince++
	if v.asideSince >= probeEvery {
		v.asideSince = 0
		return true
	}
	v.asideWrites.Add(1)
	return false
}

// wrote records whether a conditional write from an entry was refused.
func (v *versions) wrote(refused bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.outcomes <<= 1
	if refused {
		v.outcomes |= 1
	}
	v.tried = min(v.tried+1, writeWindow)
}

type versionEntry struct {
	id string
	// version and deleted are all fleet.ApplyFleetEvent reads of a stored
	// document: whether an event is a duplicate or stale, and whether a
	// newer one updates a live fleet or revives a tombstone.
	version    fleet.Version
	deleted    bool
	updateTime time.Time
	extra      []string
	at         time.Time // when it was learned
}

func (e *versionEntry) size() int {
	n := len(e.id) + versionEntryOverhead
	for _, f := range e.extra {
		n += len(f) + 16
	}
	return n
}

func newVersions(maxBytes int, ttl time.Duration) *versions {
	if maxBytes <= 0 {
		return nil
	}
	return &versions{maxBytes: maxBytes, ttl: ttl, order: list.New(), byID: map[string]*list.Element{}}
}

// get returns the entry of id learned within the TTL before now.
func (v *versions) get(id string, now time.Time) (versionEntry, bool) {
	if v == nil {
		return versionEntry{}, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	el, ok := v.byID[id]
	if !ok || now.Sub(el.Value.(*versionEntry).at) >= v.ttl {
		v.misses.Add(1)
		return versionEntry{}, false
	}
	v.order.MoveToFront(el)
	v.hits.Add(1)
	return *el.Value.(*versionEntry), true
}

// put records what a compare-and-set left document id as, at now: the
// stored document d's version and deletion, and st. An entry for a later
// update time is kept (a slower request finishing last).
func (v *versions) put(id string, d *fleet.Document, st casState, now time.Time) {
	if v == nil || d == nil || !st.Exists || st.UpdateTime.IsZero() {
		return
	}
	e := &versionEntry{id: id, version: d.Version, deleted: d.Deleted, updateTime: st.UpdateTime, extra: st.Extra, at: now}
	v.mu.Lock()
	defer v.mu.Unlock()
	if el, ok := v.byID[id]; ok {
		old := el.Value.(*versionEntry)
		if old.updateTime.After(e.updateTime) {
			return
		}
		v.used += e.size() - old.size()
		el.Value = e
		v.order.MoveToFront(el)
	} else {
		v.byID[id] = v.order.PushFront(e)
		v.used += e.size()
	}
	for v.used > v.maxBytes && v.order.Len() > 0 {
		v.removeLocked(v.order.Back())
	}
}

// forget drops the entry of id: it was wrong.
func (v *versions) forget(id string) {
	if v == nil {
		return
	}
	v.wrong.Add(1)
	v.wrote(true)
	v.mu.Lock()
	defer v.mu.Unlock()
	if el, ok := v.byID[id]; ok {
		v.removeLocked(el)
	}
}

func (v *versions) removeLocked(el *list.Element) {
	e := el.Value.(*versionEntry)
	v.order.Remove(el)
	delete(v.byID, e.id)
	v.used -= e.size()
}

// VersionCacheStats are a Store's version cache counts since it started.
type VersionCacheStats struct {
	// Hits are events decided from an entry; Misses found none (or one
	// too old); Wrong entries were stale, their write refused; Aside the
	// changes written from a read while the cache stood aside, its
	// entries too often wrong (see versions.trusted).
	Hits, Misses, Wrong, Aside int64
	// Entries and Bytes are its size now.
	Entries, Bytes int
}

// VersionCache returns the version cache's counts (zero when off).
func (s *Store) VersionCache() VersionCacheStats {
	v := s.versions
	if v == nil {
		return VersionCacheStats{}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return VersionCacheStats{Hits: v.hits.Load(), Misses: v.misses.Load(), Wrong: v.wrong.Load(), Aside: v.asideWrites.Load(),
		Entries: v.order.Len(), Bytes: v.used}
}
