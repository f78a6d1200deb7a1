package fleetview

import (
	"iter"
	"maps"
	"slices"

	"github.com/fleetcast/fleetcast/fleet"
)

// step is what a watch sends next: events with their positions, the
// position after them, whether the step goes on (more: the next chunk
// follows at once), and the channel closed when the view changes again.
type step struct {
	events  []Event
	tokens  []position
	next    position
	more    bool
	updated <-chan struct{}
}

func (st *step) add(p Event, pos position) {
	st.events = append(st.events, p)
	st.tokens = append(st.tokens, pos)
}

// cursor is a watch's place in the step it is in the middle of, carried
// from one chunk to the next: at is the position it is valid for (the
// last chunk's next), after the ID of the last fleet event sent in the
// step ("" until one was), added how many of its events were Added (for
// Synced). A position from a resume token has no cursor: the events
// before it are generated again and counted. resumed asks for Synced once
// the watch is steady at the view's newest change, unless lastSynced.
type cursor struct {
	at         position
	valid      bool
	after      string
	added      int
	resumed    bool
	lastSynced bool
}

// note moves the cursor past an event of the step.
func (c *cursor) note(p Event) {
	if p.Kind == Added {
		c.added++
	}
	if p.Doc != nil {
		c.after = p.Doc.Key().DocID()
	}
}

// step brings a watch at pos up to the snapshot's newest change, at most
// max events at a time.
func (s *Snapshot) step(f Filter, pos position, cur *cursor, max int) step {
	now := s.feed.seq
	st := step{updated: s.updated}
	if !cur.valid || cur.at != pos {
		*cur = cursor{at: pos, resumed: cur.resumed, lastSynced: cur.lastSynced}
	}
	ok := s.usable(pos)
	if ok && pos.steady() && pos.To < now {
		// A new step: the changes since.
		pos = position{Epoch: pos.Epoch, Filter: pos.Filter, From: pos.To, To: now}
		*cur = cursor{at: pos, valid: true, resumed: cur.resumed, lastSynced: cur.lastSynced}
	}
	if ok && !pos.steady() {
		ok = s.chunk(f, pos, cur, &st, max)
	}
	if !ok {
		st = step{updated: s.updated}
		pos = position{Epoch: s.epoch, Filter: pos.Filter, Initial: true, To: now}
		st.add(Event{Kind: Restart}, pos)
		*cur = cursor{at: pos, valid: true, resumed: cur.resumed}
		s.chunk(f, pos, cur, &st, max)
	}
	if st.more {
		st.next = st.tokens[len(st.tokens)-1]
		cur.at, cur.valid = st.next, true
		return st
	}
	if len(st.events) > 0 {
		cur.lastSynced = st.events[len(st.events)-1].Kind == Synced
	}
	next := pos.at(pos.To)
	if pos.steady() {
		next = pos
	}
	if next.To == now && cur.resumed {
		// The changes missed are delivered.
		if !cur.lastSynced {
			st.add(Event{Kind: Synced, Count: s.count(f)}, next)
			cur.lastSynced = true
		}
		cur.resumed = false
	}
	st.next = next
	st.more = next.To < now
	cur.at, cur.valid = next, true
	return st
}

// chunk adds to st the next events of the step pos is in the middle of,
// at most max of them, and what ends the step if they are its last:
// Synced after an initial set, and the steady position as the last token.
// It reports false when pos is past the step's end (a token of another
// view's history): the watch must restart.
func (s *Snapshot) chunk(f Filter, pos position, cur *cursor, st *step, max int) bool {
	skip := pos.N // events the client has, to generate again
	if cur.valid && cur.at == pos && cur.after != "" {
		skip = 0 // the generator starts after them
	}
	n := pos.N
	start := len(st.events)
	for p := range s.diffSeq(f, pos.Initial, pos.From, pos.To, cur.after) {
		if skip > 0 {
			skip--
			cur.note(p)
			continue
		}
		if len(st.events)-start >= max {
			st.more = true
			break
		}
		n++
		next := pos
		next.N = n
		st.add(p, next)
		cur.note(p)
	}
	if skip > 0 {
		return false
	}
	if st.more {
		return true
	}
	if pos.Initial {
		st.add(Event{Kind: Synced, Count: cur.added}, pos.at(pos.To))
	} else if len(st.events) > start {
		st.tokens[len(st.tokens)-1] = pos.at(pos.To)
	}
	return true
}

// usable reports whether a watch can go on from pos in this snapshot: a
// position of this Engine whose changes the feed still holds.
func (s *Snapshot) usable(pos position) bool {
	f := &s.feed
	if pos.Epoch != s.epoch || pos.To > f.seq || pos.From > pos.To {
		return false
	}
	if pos.Initial {
		return f.holds(pos.To)
	}
	return f.holds(pos.From)
}

// past is the view as it was at an earlier seq, for a watch of a filter:
// the state then of each fleet that changed since and could match, and of
// each cluster that changed; the others are as they are now.
type past struct {
	fleets   map[string]*fleet.Document // nil: not in the view then
	clusters map[string]clusterState
}

// could reports whether d may match f, in a fresh cluster or a stale one.
// A fleet whose every state since a seq fails it is in the set of f
// neither then nor now, so a watch of f skips its changes: which of those
// states stands for "then" makes no difference.
func could(f Filter, d *fleet.Document) bool { return d != nil && f.Matches(d, false) }

// past rewinds the snapshot to seq, which its feed holds, for a watch of f.
func (s *Snapshot) past(seq uint64, f Filter) past {
	p := past{fleets: map[string]*fleet.Document{}, clusters: map[string]clusterState{}}
	for c := range s.feed.between(seq, s.feed.seq) {
		if c.cluster != "" {
			if _, ok := p.clusters[c.cluster]; !ok {
				p.clusters[c.cluster] = c.was
			}
			continue
		}
		if !could(f, c.before) && !could(f, c.after) {
			continue
		}
		if id := c.fleetID(); !has(p.fleets, id) {
			p.fleets[id] = c.before
		}
	}
	return p
}

func has[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

func (s *Snapshot) fleetAt(p past, id string) *fleet.Document {
	if d, ok := p.fleets[id]; ok {
		return d
	}
	d, _ := s.Fleet(id)
	return d
}

func (s *Snapshot) clusterAt(p past, name string) clusterState {
	if c, ok := p.clusters[name]; ok {
		return c
	}
	return s.clusterNow(name)
}

// clusterFleets adds to ids the fleets of a cluster at p.
func (s *Snapshot) clusterFleets(p past, cluster string, ids map[string]bool) {
	s.ascendCluster(cluster, func(e *entry) bool {
		ids[e.id] = true
		return true
	})
	for id, d := range p.fleets {
		if d != nil && d.Cluster == cluster {
			ids[id] = true
		}
	}
}

// diffSeq yields the events that take a client holding the fleets
// matching f at seq from (none, when initial) to those at seq to, in a
// fixed order — the clusters' by name, then the fleets' by ID — so that a
// resume can skip those delivered; after, when set, skips the clusters and
// the fleets up to that ID (a cursor's). The feed holds from (to, when
// initial). It generates the events as they are taken, and holds none:
// the initial set of a large view costs a watch what it sends of it.
func (s *Snapshot) diffSeq(f Filter, initial bool, from, to uint64, after string) iter.Seq[Event] {
	return func(yield func(Event) bool) {
		pt := s.past(to, f)
		pf := past{}
		if !initial {
			pf = s.past(from, f)
		}
		before := func(name string) clusterState {
			if initial {
				return clusterState{stale: true}
			}
			return s.clusterAt(pf, name)
		}
		var names map[string]bool
		if initial {
			names = make(map[string]bool, len(s.stale))
			for name := range s.stale {
				names[name] = true
			}
		} else {
			names = map[string]bool{}
			for c := range s.feed.between(from, to) {
				if c.cluster != "" {
					names[c.cluster] = true
				}
			}
		}
		var flipped []string
		for _, name := range slices.Sorted(maps.Keys(names)) {
			if !f.HasCluster(name) {
				continue // a watch of some clusters hears of them only
			}
			a, b := before(name), s.clusterAt(pt, name)
			if after == "" && b.known && !a.same(b) {
				if !yield(Event{Kind: ClusterChanged, Cluster: b.doc, Name: name, Stale: b.stale}) {
					return
				}
			}
			if a.stale != b.stale {
				flipped = append(flipped, name)
			}
		}
		for id := range s.diffIDs(f, initial, from, to, pt, pf, flipped, after) {
			var da *fleet.Document
			if !initial {
				da = s.fleetAt(pf, id)
			}
			db := s.fleetAt(pt, id)
			var sa, sb bool
			if da != nil {
				sa = s.clusterAt(pf, da.Cluster).stale
			}
			if db != nil {
				sb = s.clusterAt(pt, db.Cluster).stale
			}
			inA := da != nil && f.Matches(da, sa)
			inB := db != nil && f.Matches(db, sb)
			var p Event
			switch {
			case inB && !inA:
				p = Event{Kind: Added, Doc: db, Stale: sb}
			case inA && !inB && db != nil:
				p = Event{Kind: Removed, Doc: db, Stale: sb}
			case inA && !inB:
				p = Event{Kind: Removed, Doc: da, Stale: sa}
			case inA && inB && (da != db || sa != sb):
				p = Event{Kind: Modified, Doc: db, Stale: sb}
			default:
				continue
			}
			if !yield(p) {
				return
			}
		}
	}
}

// diffIDs yields, in order and each once, the IDs after the given one of
// the fleets whose events diffSeq may yield: for an initial set, every
// fleet of the snapshot and every fleet rewound into it (a merge of two
// sorted sequences, holding neither); otherwise those the feed changed
// between from and to, and the fleets of the clusters whose staleness
// flipped.
func (s *Snapshot) diffIDs(f Filter, initial bool, from, to uint64, pt, pf past, flipped []string, after string) iter.Seq[string] {
	return func(yield func(string) bool) {
		if initial {
			var rewound []string
			for id := range pt.fleets {
				if id > after {
					rewound = append(rewound, id)
				}
			}
			slices.Sort(rewound)
			j := 0
			stopped := false
			s.fromID(after, func(e *entry) bool {
				for j < len(rewound) && rewound[j] < e.id {
					if !yield(rewound[j]) {
						stopped = true
						return false
					}
					j++
				}
				if j < len(rewound) && rewound[j] == e.id {
					j++
				}
				if !yield(e.id) {
					stopped = true
					return false
				}
				return true
			})
			for ; !stopped && j < len(rewound); j++ {
				if !yield(rewound[j]) {
					return
				}
			}
			return
		}
		set := map[string]bool{}
		for c := range s.feed.between(from, to) {
			if c.cluster == "" && (could(f, c.before) || could(f, c.after)) {
				set[c.fleetID()] = true
			}
		}
		for _, name := range flipped {
			s.clusterFleets(pf, name, set)
			s.clusterFleets(pt, name, set)
		}
		for _, id := range slices.Sorted(maps.Keys(set)) {
			if id > after && !yield(id) {
				return
			}
		}
	}
}

// count returns how many live fleets match f in the snapshot.
func (s *Snapshot) count(f Filter) int {
	n := 0
	s.fleets.Ascend(func(e *entry) bool {
		if f.Matches(e.doc, s.clusterNow(e.doc.Cluster).stale) {
			n++
		}
		return true
	})
	return n
}
