package fleetapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
)

// Defaults of the watch Options.
const (
	// DefaultWatchPoll is how often a view with watches reads what was
	// written since its last sync, and judges the clusters' staleness,
	// unless a listener delivers the writes (see Follower).
	DefaultWatchPoll = 250 * time.Millisecond
	// DefaultHeartbeat is how often a watch sends a heartbeat.
	DefaultHeartbeat = 15 * time.Second
)

// EventKind says what a watch event is.
type EventKind string

// Kinds of watch event.
const (
	// A fleet entered the watched set: it was created, started to match
	// the filter, or its cluster turned fresh.
	Added EventKind = "added"
	// A fleet in the set changed; with includeStale, also when its
	// cluster turned stale or fresh.
	Modified EventKind = "modified"
	// A fleet left the set: it was deleted, stopped matching, or its
	// cluster turned stale. Fleet is its last state.
	Removed EventKind = "removed"
	// A cluster appeared, turned stale or fresh, or sent a heartbeat
	// that changed what the API shows of it (its heartbeat time, fleet
	// count, totals, labels), of the watched clusters only when the
	// filter names some. Its fleets' events follow it.
	ClusterChanged EventKind = "cluster"
	// Synced ends the initial set, or the changes missed before a
	// resume: the client now holds the whole set.
	Synced EventKind = "synced"
	// Restart: the watch starts over. Forget every fleet held; the
	// whole set follows, then Synced. Sent when a resume token cannot be used (another
	// instance's, or older than the changes the instance keeps), or
	// when the client fell more than 16 384 changes behind.
	Restart EventKind = "restart"
	// Heartbeat is sent every Options.Heartbeat: a client that hears
	// nothing for longer knows the stream is dead.
	Heartbeat EventKind = "heartbeat"
)

// Event is one message of a watch.
type Event struct {
	Kind EventKind
	// Fleet: of Added, Modified and Removed.
	Fleet Fleet
	// Cluster: of ClusterChanged.
	Cluster Cluster
	// FleetCount: of Synced, the fleets in the set.
	FleetCount int
	// Time: of Heartbeat.
	Time time.Time
	// ResumeToken resumes the watch after this event.
	ResumeToken string
}

// watchOnly are the parameters of GET /v1/fleets that a watch does not
// take: it has no pages, and no order but the events'.
var watchOnly = map[string]string{
	"orderBy": "a watch has no order", "pageSize": "a watch has no pages", "pageToken": "a watch has no pages",
}

// ParseWatch reads the parameters of GET /v1/watch: the filters of
// /v1/fleets and resumeToken.
func ParseWatch(v url.Values) (Query, string, error) {
	v = maps.Clone(v)
	token, err := single(v, "resumeToken")
	if err != nil {
		return Query{}, "", err
	}
	delete(v, "resumeToken")
	for name, why := range watchOnly {
		if _, ok := v[name]; ok {
			return Query{}, "", paramErr(name, "%s", why)
		}
	}
	q, err := ParseQuery(v)
	return q, token, err
}

// position is where a watch stands in the feed of its Service, carried by
// its resume tokens: the client holds the set at seq From (nothing, when
// Initial) and the first N events that take it to the set at seq To.
// From == To and N == 0 when it holds the set at To.
type position struct {
	Epoch   uint64 `json:"e"`
	Filter  string `json:"f"`
	Initial bool   `json:"i,omitempty"`
	From    uint64 `json:"a,omitempty"`
	To      uint64 `json:"b,omitempty"`
	N       int    `json:"n,omitempty"`
}

func (p position) steady() bool { return !p.Initial && p.From == p.To && p.N == 0 }

func (p position) at(seq uint64) position {
	return position{Epoch: p.Epoch, Filter: p.Filter, From: seq, To: seq}
}

func (p position) token() string {
	b, _ := json.Marshal(p) // a struct of numbers and strings
	return base64.RawURLEncoding.EncodeToString(b)
}

func parsePosition(token, filter string) (position, error) {
	var p position
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil || p.Epoch == 0 || p.N < 0 {
		return position{}, paramErr("resumeToken", "not a resume token of this API; start again without one")
	}
	if p.Filter != filter {
		return position{}, paramErr("resumeToken", "a token of a watch with other filters; resume with the same filters")
	}
	return p, nil
}

// watchFilter is q as a watch uses it, and its fingerprint.
func watchFilter(q Query) (Query, string) {
	q = q.normalized()
	q.OrderBy, q.PageSize, q.After = OrderByName, DefaultPageSize, nil
	return q, q.fingerprint()
}

// Watch sends the live fleets matching q, then every change to that set,
// until ctx ends or send fails: send's error is returned, and nil when
// ctx ends. With the resumeToken of an event it had, a client receives
// exactly the events that followed it, then Synced; with a token this
// instance cannot use, Restart and the whole set. Errors before the first
// event are *Error: a bad token or filter (InvalidArgument), or a store
// that cannot be read (Unavailable, Internal).
//
// Every watch of a Service follows the one view, whatever the number of
// watches: while any runs, the view follows its Source's listener (a
// Follower, such as firestoredb.Store), which delivers each write once, or
// else syncs every Options.WatchPoll. A watch holds only its place in
// the view's bounded feed of changes and the events of the step it is
// sending, a step coalescing every change since its previous one to the
// newest state of each fleet: a client that reads slowly gets fewer,
// newer events, and delays no other watch.
func (s *Service) Watch(ctx context.Context, q Query, resumeToken string, send func(Event) error) error {
	q, filter := watchFilter(q)
	var pos position
	if resumeToken != "" {
		var err error
		if pos, err = parsePosition(resumeToken, filter); err != nil {
			return err
		}
	}
	stop, err := s.watching()
	if err != nil {
		return err
	}
	defer stop()
	if err := s.holds(q.Clusters...); err != nil {
		return err
	}
	if err := s.Read(ctx, func(r *Read) error { return r.knownKeys(q) }); err != nil {
		return err
	}
	if resumeToken == "" {
		s.mu.RLock()
		pos = position{Epoch: s.epoch, Filter: filter, Initial: true, To: s.view.feed.seq}
		s.mu.RUnlock()
	}
	heartbeat := time.NewTicker(s.opts.Heartbeat)
	defer heartbeat.Stop()
	cur := &cursor{resumed: resumeToken != ""}
	for {
		st := s.step(q, pos, cur)
		for i, p := range st.events {
			if err := send(s.event(p, st.tokens[i])); err != nil {
				return err
			}
		}
		pos = st.next
		if st.more {
			// The rest of the step, at once: a chunk at a time, so
			// that a watch holds no more than one, however large
			// its set.
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-st.updated:
		case <-heartbeat.C:
			if err := send(Event{Kind: Heartbeat, Time: s.opts.Now(), ResumeToken: pos.token()}); err != nil {
				return err
			}
		}
	}
}

// watching counts a watch, and runs the view's polling while any does;
// stop uncounts it. Past Options.MaxWatches it refuses, ResourceExhausted.
func (s *Service) watching() (stop func(), err error) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.watches >= s.opts.MaxWatches {
		return nil, &Error{Code: ResourceExhausted, Message: fmt.Sprintf(
			"this instance serves its most streams (%d); retry shortly, another instance may take it", s.opts.MaxWatches)}
	}
	if s.watches++; s.watches == 1 {
		s.pollStop = make(chan struct{})
		if f, ok := s.src.(Follower); ok {
			go s.follow(f, s.pollStop)
		} else {
			go s.poll(s.pollStop)
		}
	}
	return func() {
		s.syncMu.Lock()
		defer s.syncMu.Unlock()
		if s.watches--; s.watches == 0 {
			close(s.pollStop)
		}
	}, nil
}

// poll syncs the view every WatchPoll until stop is closed, one sync at a
// time: a slow store slows the polling, and never piles syncs up.
func (s *Service) poll(stop <-chan struct{}) {
	t := time.NewTicker(s.opts.WatchPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		select {
		case <-stop:
			return
		case <-s.join(false).done: // a failure is logged by runSyncs
		}
	}
}

// followRetry is how long a view polls after its listener failed before
// it starts another.
const followRetry = 5 * time.Second

// follow keeps the view current from a listener on its Follower until
// stop is closed: the listener delivers each write once as it commits.
// The view still reads the clusters every ClusterRefresh (at least every
// WatchPoll), and the fleets then too if the listener has been quiet for
// MaxStaleness/2 (see syncOnce). When the listener fails, the view polls
// every WatchPoll, and starts another listener followRetry later, from
// the point its syncs have reached.
func (s *Service) follow(f Follower, stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	var ended chan error // the running listener's end; nil while none runs
	defer func() {
		cancel()
		if ended != nil {
			<-ended
		}
		s.mu.Lock()
		s.view.listening = false
		s.mu.Unlock()
	}()
	var retry time.Time
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case err := <-ended:
			ended = nil
			s.mu.Lock()
			s.view.listening = false
			s.mu.Unlock()
			if err == nil {
				err = errors.New("the listener ended")
			}
			s.opts.Log.Warn("query view listener failed: polling until it restarts",
				"retryInSeconds", followRetry.Seconds(), logging.KeyError, err.Error())
			retry = s.opts.Now().Add(followRetry)
			t.Reset(s.opts.WatchPoll)
			continue
		case <-t.C:
		}
		select {
		case <-stop:
			return
		case <-s.join(false).done: // a failure is logged by runSyncs
		}
		if ended == nil && !s.opts.Now().Before(retry) {
			s.mu.RLock()
			loaded, since := s.view.loaded, s.view.fleetsSince
			s.mu.RUnlock()
			if loaded {
				ch := make(chan error, 1)
				go func() { ch <- f.FollowFleets(ctx, since, s.heard) }()
				ended = ch
			}
		}
		next := s.opts.WatchPoll
		if ended != nil {
			next = max(next, s.opts.ClusterRefresh)
		}
		t.Reset(next)
	}
}

// pending is an event of a step before it is shaped. Its documents are
// the view's, shared, and never modified.
type pending struct {
	kind    EventKind
	doc     *fleet.Document
	cluster *fleet.ClusterDocument
	name    string // of the cluster
	stale   bool
	count   int // of Synced
}

// step is what a watch sends next: events with their positions, the
// position after them, whether the step goes on (more: the next chunk
// follows at once), and the channel closed when the view changes again.
type step struct {
	events  []pending
	tokens  []position
	next    position
	more    bool
	updated <-chan struct{}
}

// StepEvents bounds the events a watch takes from the view at a time: a
// step larger than this (the initial set of a large view) is sent a chunk
// at a time, the view's lock released between chunks, so that a stream
// holds one chunk, however many fleets match, and however slowly its
// client reads.
const StepEvents = 256

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

// step brings a watch at pos up to the view's newest change, at most
// StepEvents events at a time.
func (s *Service) step(q Query, pos position, cur *cursor) step {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v := &s.view
	now := v.feed.seq
	st := step{updated: v.feed.updated}
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
		ok = s.chunk(q, pos, cur, &st)
	}
	if !ok {
		s.opts.Log.Debug("watch: resending the whole set", "tokenEpoch", pos.Epoch, "epoch", s.epoch)
		st = step{updated: v.feed.updated}
		pos = position{Epoch: s.epoch, Filter: pos.Filter, Initial: true, To: now}
		st.add(pending{kind: Restart}, pos)
		*cur = cursor{at: pos, valid: true, resumed: cur.resumed}
		s.chunk(q, pos, cur, &st)
	}
	if st.more {
		st.next = st.tokens[len(st.tokens)-1]
		cur.at, cur.valid = st.next, true
		return st
	}
	if len(st.events) > 0 {
		cur.lastSynced = st.events[len(st.events)-1].kind == Synced
	}
	next := pos.at(pos.To)
	if pos.steady() {
		next = pos
	}
	if next.To == now && cur.resumed {
		// The changes missed are delivered.
		if !cur.lastSynced {
			st.add(pending{kind: Synced, count: v.count(q)}, next)
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
// at most StepEvents of them, and what ends the step if they are its
// last: Synced after an initial set, and the steady position as the last
// token. It reports false when pos is past the step's end (a token of
// another view's history): the watch must restart.
func (s *Service) chunk(q Query, pos position, cur *cursor, st *step) bool {
	v := &s.view
	skip := pos.N // events the client has, to generate again
	if cur.valid && cur.at == pos && cur.after != "" {
		skip = 0 // the generator starts after them
	}
	n := pos.N
	start := len(st.events)
	for p := range v.diffSeq(q, pos.Initial, pos.From, pos.To, cur.after) {
		if skip > 0 {
			skip--
			cur.note(p)
			continue
		}
		if len(st.events)-start >= s.stepEvents {
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
		st.add(pending{kind: Synced, count: cur.added}, pos.at(pos.To))
	} else if len(st.events) > start {
		st.tokens[len(st.tokens)-1] = pos.at(pos.To)
	}
	return true
}

// note moves the cursor past an event of the step.
func (c *cursor) note(p pending) {
	if p.kind == Added {
		c.added++
	}
	if p.doc != nil {
		c.after = p.doc.Key().DocID()
	}
}

func (st *step) add(p pending, pos position) {
	st.events = append(st.events, p)
	st.tokens = append(st.tokens, pos)
}

// usable reports whether a watch can go on from pos in this view: a
// position of this Service whose changes the feed still holds. The lock
// is held.
func (s *Service) usable(pos position) bool {
	f := &s.view.feed
	if pos.Epoch != s.epoch || pos.To > f.seq || pos.From > pos.To {
		return false
	}
	if pos.Initial {
		return f.holds(pos.To)
	}
	return f.holds(pos.From)
}

// event shapes a pending event.
func (s *Service) event(p pending, pos position) Event {
	e := Event{Kind: p.kind, ResumeToken: pos.token()}
	switch p.kind {
	case Added, Modified, Removed:
		e.Fleet = NewFleet(p.doc, p.stale)
	case ClusterChanged:
		if p.cluster != nil {
			e.Cluster = NewCluster(p.cluster, p.stale)
		} else {
			e.Cluster = Cluster{Cluster: p.name, Labels: map[string]string{}, Stale: true}
		}
	case Synced:
		e.FleetCount = p.count
	}
	return e
}

// past is the view as it was at an earlier seq, for a watch of q: the
// state then of each fleet that changed since and could match q, and of
// each cluster that changed; the others are as they are now.
type past struct {
	fleets   map[string]*fleet.Document // nil: not in the view then
	clusters map[string]clusterState
}

// could reports whether d may match q, in a fresh cluster or a stale one.
// A fleet whose every state since a seq fails it is in the set of q
// neither then nor now, so a watch of q skips its changes: which of those
// states stands for "then" makes no difference.
func could(q Query, d *fleet.Document) bool { return d != nil && q.Matches(d, false) }

// past rewinds the view to seq, which the feed holds, for a watch of q.
func (v *view) past(seq uint64, q Query) past {
	p := past{fleets: map[string]*fleet.Document{}, clusters: map[string]clusterState{}}
	for c := range v.feed.between(seq, v.feed.seq) {
		if c.cluster != "" {
			if _, ok := p.clusters[c.cluster]; !ok {
				p.clusters[c.cluster] = c.was
			}
			continue
		}
		if !could(q, c.before) && !could(q, c.after) {
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

func (v *view) fleetAt(p past, id string) *fleet.Document {
	if d, ok := p.fleets[id]; ok {
		return d
	}
	if e := v.byID[id]; e != nil {
		return e.doc
	}
	return nil
}

func (v *view) clusterAt(p past, name string) clusterState {
	if c, ok := p.clusters[name]; ok {
		return c
	}
	st, known := v.stale[name]
	sh := v.shown[name]
	return clusterState{known: known, stale: !known || st, shown: sh.hash, doc: sh.doc}
}

// clusterFleets adds to ids the fleets of a cluster at p. IDs begin with
// the cluster's name and a separator below any character of a name, so a
// cluster's fleets are together in the view's order.
func (v *view) clusterFleets(p past, cluster string, ids map[string]bool) {
	i, _ := slices.BinarySearchFunc(v.sorted, cluster, func(e *entry, c string) int { return strings.Compare(e.doc.Cluster, c) })
	for ; i < len(v.sorted) && v.sorted[i].doc.Cluster == cluster; i++ {
		ids[v.sorted[i].id] = true
	}
	for id, d := range p.fleets {
		if d != nil && d.Cluster == cluster {
			ids[id] = true
		}
	}
}

// diffSeq yields the events that take a client holding the fleets
// matching q at seq from (none, when initial) to those at seq to, in a
// fixed order — the clusters' by name, then the fleets' by ID — so that a
// resume can skip those delivered; after, when set, skips the clusters and
// the fleets up to that ID (a cursor's). The feed holds from (to, when
// initial). It generates the events as they are taken, and holds none:
// the initial set of a large view costs a watch what it sends of it.
func (v *view) diffSeq(q Query, initial bool, from, to uint64, after string) iter.Seq[pending] {
	return func(yield func(pending) bool) {
		pt := v.past(to, q)
		pf := past{}
		if !initial {
			pf = v.past(from, q)
		}
		before := func(name string) clusterState {
			if initial {
				return clusterState{stale: true}
			}
			return v.clusterAt(pf, name)
		}
		var names map[string]bool
		if initial {
			names = make(map[string]bool, len(v.stale))
			for name := range v.stale {
				names[name] = true
			}
		} else {
			names = map[string]bool{}
			for c := range v.feed.between(from, to) {
				if c.cluster != "" {
					names[c.cluster] = true
				}
			}
		}
		var flipped []string
		for _, name := range slices.Sorted(maps.Keys(names)) {
			if len(q.Clusters) > 0 && !slices.Contains(q.Clusters, name) {
				continue // a watch of some clusters hears of them only
			}
			a, b := before(name), v.clusterAt(pt, name)
			if after == "" && b.known && !a.same(b) {
				if !yield(pending{kind: ClusterChanged, cluster: b.doc, name: name, stale: b.stale}) {
					return
				}
			}
			if a.stale != b.stale {
				flipped = append(flipped, name)
			}
		}
		for id := range v.diffIDs(q, initial, from, to, pt, pf, flipped, after) {
			var da *fleet.Document
			if !initial {
				da = v.fleetAt(pf, id)
			}
			db := v.fleetAt(pt, id)
			var sa, sb bool
			if da != nil {
				sa = v.clusterAt(pf, da.Cluster).stale
			}
			if db != nil {
				sb = v.clusterAt(pt, db.Cluster).stale
			}
			inA := da != nil && q.Matches(da, sa)
			inB := db != nil && q.Matches(db, sb)
			var p pending
			switch {
			case inB && !inA:
				p = pending{kind: Added, doc: db, stale: sb}
			case inA && !inB && db != nil:
				p = pending{kind: Removed, doc: db, stale: sb}
			case inA && !inB:
				p = pending{kind: Removed, doc: da, stale: sa}
			case inA && inB && (da != db || sa != sb):
				p = pending{kind: Modified, doc: db, stale: sb}
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
// fleet of the view and every fleet rewound into it (a merge of two
// sorted lists, holding neither); otherwise those the feed changed between
// from and to, and the fleets of the clusters whose staleness flipped.
func (v *view) diffIDs(q Query, initial bool, from, to uint64, pt, pf past, flipped []string, after string) iter.Seq[string] {
	return func(yield func(string) bool) {
		if initial {
			i, _ := slices.BinarySearchFunc(v.sorted, after, func(e *entry, id string) int { return strings.Compare(e.id, id) })
			if i < len(v.sorted) && v.sorted[i].id == after {
				i++
			}
			var rewound []string
			for id := range pt.fleets {
				if id > after {
					rewound = append(rewound, id)
				}
			}
			slices.Sort(rewound)
			j := 0
			for i < len(v.sorted) || j < len(rewound) {
				var id string
				switch {
				case j == len(rewound) || i < len(v.sorted) && v.sorted[i].id < rewound[j]:
					id = v.sorted[i].id
					i++
				case i == len(v.sorted) || rewound[j] < v.sorted[i].id:
					id = rewound[j]
					j++
				default: // in both
					id = v.sorted[i].id
					i, j = i+1, j+1
				}
				if !yield(id) {
					return
				}
			}
			return
		}
		set := map[string]bool{}
		for c := range v.feed.between(from, to) {
			if c.cluster == "" && (could(q, c.before) || could(q, c.after)) {
				set[c.fleetID()] = true
			}
		}
		for _, name := range flipped {
			v.clusterFleets(pf, name, set)
			v.clusterFleets(pt, name, set)
		}
		for _, id := range slices.Sorted(maps.Keys(set)) {
			if id > after && !yield(id) {
				return
			}
		}
	}
}

// count returns how many live fleets match q now.
func (v *view) count(q Query) int {
	n := 0
	for _, e := range v.sorted {
		if q.Matches(e.doc, v.clusterAt(past{}, e.doc.Cluster).stale) {
			n++
		}
	}
	return n
}
