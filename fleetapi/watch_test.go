package fleetapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleetview"
)

// watcher is a client of a watch, as strict as can be: an Added fleet it
// holds, or a Modified or Removed one it does not, is an error, so a
// duplicate or lost event fails the test.
type watcher struct {
	t        *testing.T
	svc      *Service
	q        Query
	filter   string
	w        *fleetview.Watcher
	resume   string // the token a new connection resumes from
	token    string // of the last event handled
	fleets   map[string]Fleet
	clusters map[string]Cluster
	log      []Event
}

func newWatcher(t *testing.T, svc *Service, q Query) *watcher {
	q, filter := watchFilter(q)
	w, err := svc.eng.Watch(q, filter, "")
	require.NoError(t, err)
	return &watcher{t: t, svc: svc, q: q, filter: filter, w: w, resume: w.Token(), fleets: map[string]Fleet{}, clusters: map[string]Cluster{}}
}

// step takes the watch's next step, chunk after chunk, and handles its
// first n events (all when n < 0); the others are lost, as by a broken
// connection, after which the next step must be a resume.
func (c *watcher) step(resumed bool, n int) []Event {
	if resumed || c.w == nil { // a new connection
		w, err := c.svc.eng.Watch(c.q, c.filter, c.resume)
		require.NoError(c.t, err)
		c.w = w
	}
	var out []Event
	for {
		st := c.w.Step()
		for _, p := range st.Events {
			if n >= 0 && len(out) >= n {
				if len(out) > 0 {
					// Resume from the last event handled.
					c.resume = out[len(out)-1].ResumeToken
				}
				c.w = nil
				return out
			}
			e := c.svc.event(p)
			c.apply(e)
			out = append(out, e)
		}
		c.resume = c.w.Token()
		if !st.More {
			return out
		}
	}
}

func (c *watcher) apply(e Event) {
	c.t.Helper()
	c.log = append(c.log, e)
	c.token = e.ResumeToken
	id := e.Fleet.Cluster + "/" + e.Fleet.Namespace + "/" + e.Fleet.Name
	switch e.Kind {
	case Added:
		require.NotContains(c.t, c.fleets, id, "added twice")
		c.fleets[id] = e.Fleet
	case Modified:
		require.Contains(c.t, c.fleets, id, "modified unheld")
		require.NotEqual(c.t, c.fleets[id], e.Fleet, "modified to the state held")
		c.fleets[id] = e.Fleet
	case Removed:
		require.Contains(c.t, c.fleets, id, "removed unheld")
		delete(c.fleets, id)
	case Restart:
		clear(c.fleets)
		clear(c.clusters)
	case ClusterChanged:
		if held, ok := c.clusters[e.Cluster.Cluster]; ok {
			require.NotEqual(c.t, held, e.Cluster, "a cluster change that changes nothing")
		}
		c.clusters[e.Cluster.Cluster] = e.Cluster
	}
}

// want returns the fleets a watch of q must hold: the answer of the
// API.
func want(t *testing.T, svc *Service, q Query) map[string]Fleet {
	out := map[string]Fleet{}
	q.PageSize = MaxPageSize
	var l FleetList
	require.NoError(t, svc.Read(t.Context(), func(r *Read) (err error) {
		l, err = r.Fleets(q)
		return err
	}))
	require.Empty(t, l.NextPageToken)
	for _, f := range l.Items {
		out[f.Cluster+"/"+f.Namespace+"/"+f.Name] = f
	}
	return out
}

func parse(t *testing.T, s string) Query {
	v, err := url.ParseQuery(s)
	require.NoError(t, err)
	q, _, err := ParseWatch(v)
	require.NoError(t, err)
	return q
}

func kinds(events []Event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		switch e.Kind {
		case Added, Modified, Removed:
			out = append(out, string(e.Kind)+" "+e.Fleet.Name)
		case ClusterChanged:
			out = append(out, fmt.Sprintf("cluster %s stale=%t", e.Cluster.Cluster, e.Cluster.Stale))
		case Synced:
			out = append(out, fmt.Sprintf("synced %d", e.FleetCount))
		default:
			out = append(out, string(e.Kind))
		}
	}
	return out
}

// TestAWatchFollowsTheSet: the initial set, then each change: added,
// modified, removed, leaving and entering the filter, and a cluster
// turning stale and fresh.
func TestAWatchFollowsTheSet(t *testing.T) {
	w := newWorld(t)
	svc := w.service(Options{TombstoneRetention: time.Hour, Resync: 24 * time.Hour})
	w.Put(doc("pc", "games", "a", map[string]string{"platform": "pc"}, 1, nil))
	w.Put(doc("xbox", "games", "x", map[string]string{"platform": "xbox"}, 1, nil))
	w.Put(doc("ps5", "games", "p", map[string]string{"platform": "ps5"}, 1, nil))
	sync := func() {
		w.Settle()
		require.NoError(t, svc.Sync(t.Context()))
	}
	sync()
	c := newWatcher(t, svc, parse(t, "selector=platform!=ps5"))
	assert.Equal(t, []string{"cluster pc stale=false", "cluster ps5 stale=false", "cluster xbox stale=false",
		"added a", "added x", "synced 2"}, kinds(c.step(false, -1)))
	assert.Empty(t, c.step(false, -1), "nothing changed")

	w.Put(doc("pc", "games", "a", map[string]string{"platform": "pc"}, 2, nil))
	w.Put(doc("pc", "games", "b", map[string]string{"platform": "pc"}, 0, nil))
	w.Put(doc("ps5", "games", "p", map[string]string{"platform": "ps5"}, 3, nil)) // not watched
	sync()
	events := c.step(false, -1)
	assert.Equal(t, []string{"modified a", "added b"}, kinds(events))
	assert.EqualValues(t, 2, events[0].Fleet.ReadyReplicas)

	w.Remove("pc", "games", "b")
	w.Put(doc("xbox", "games", "x", map[string]string{"platform": "ps5"}, 1, nil)) // leaves the filter
	sync()
	events = c.step(false, -1)
	assert.Equal(t, []string{"removed b", "removed x"}, kinds(events))
	assert.Equal(t, "ps5", events[1].Fleet.Labels["platform"], "removed with its newest state")

	w.Put(doc("xbox", "games", "x", map[string]string{"platform": "xbox"}, 1, nil))
	sync()
	assert.Equal(t, []string{"added x"}, kinds(c.step(false, -1)))

	// xbox's heartbeat ages past StaleAfter: its fleets leave; a
	// heartbeat brings them back. Every new heartbeat reaches the watch,
	// with the cluster's new heartbeat time.
	w.Clock.Step(DefaultStaleAfter)
	w.Heartbeat("pc", 0)
	w.Heartbeat("ps5", 0)
	beat := w.Clock.Now()
	sync()
	events = c.step(false, -1)
	assert.Equal(t, []string{"cluster pc stale=false", "cluster ps5 stale=false", "cluster xbox stale=true", "removed x"}, kinds(events))
	assert.Equal(t, beat, events[0].Cluster.HeartbeatAt)
	w.Heartbeat("xbox", 0)
	sync()
	assert.Equal(t, []string{"cluster xbox stale=false", "added x"}, kinds(c.step(false, -1)))
	assert.Equal(t, want(t, svc, c.q), c.fleets)

	// With includeStale, the fleets of a stale cluster stay, marked. A
	// watch of some clusters hears of them only.
	s := newWatcher(t, svc, parse(t, "includeStale=true&cluster=xbox"))
	assert.Equal(t, []string{"cluster xbox stale=false", "added x", "synced 1"}, kinds(s.step(false, -1)))
	w.Clock.Step(DefaultStaleAfter)
	w.Heartbeat("pc", 0)
	w.Heartbeat("ps5", 0)
	sync()
	events = s.step(false, -1)
	assert.Equal(t, []string{"cluster xbox stale=true", "modified x"}, kinds(events), "the other clusters' heartbeats are not its")
	assert.True(t, events[1].Fleet.Stale)
}

// TestASlowWatchGetsTheNewestState: many changes between two steps make
// one event per fleet, with its newest state; a fleet created and deleted
// meanwhile makes none.
func TestASlowWatchGetsTheNewestState(t *testing.T) {
	w := newWorld(t)
	svc := w.service(Options{})
	w.Put(doc("pc", "games", "a", nil, 0, nil))
	require.NoError(t, svc.Sync(t.Context()))
	c := newWatcher(t, svc, NewQuery())
	c.step(false, -1)
	for i := range 50 {
		w.Settle()
		w.Put(doc("pc", "games", "a", nil, int64(i), nil))
		w.Put(doc("pc", "games", "tmp", nil, 1, nil))
		require.NoError(t, svc.Sync(t.Context()))
		w.Remove("pc", "games", "tmp")
		require.NoError(t, svc.Sync(t.Context()))
	}
	events := c.step(false, -1)
	assert.Equal(t, []string{"modified a"}, kinds(events))
	assert.EqualValues(t, 49, events[0].Fleet.ReadyReplicas)
}

// TestAWatchResumesExactly: a client that resumes with the token of the
// last event it handled — at the end of a step, in the middle of one, in
// the initial set — receives exactly the events it did not handle, then
// Synced; with a token of another Service, or older than the feed, Restart
// and the whole set.
func TestAWatchResumesExactly(t *testing.T) {
	w := newWorld(t)
	svc := w.service(Options{})
	for i := range 5 {
		w.Put(doc("pc", "games", fmt.Sprintf("f%d", i), nil, 1, nil))
	}
	require.NoError(t, svc.Sync(t.Context()))

	c := newWatcher(t, svc, NewQuery())
	assert.Len(t, c.step(false, 5), 5, "three clusters and two fleets, then the connection breaks")
	w.Settle()
	w.Remove("pc", "games", "f0")
	w.Put(doc("pc", "games", "f3", nil, 2, nil))
	require.NoError(t, svc.Sync(t.Context()))
	// The rest of the initial set at its seq — f0 included, since the
	// client is told it was removed next — then what changed.
	assert.Equal(t, []string{"added f2", "added f3", "added f4", "synced 5", "removed f0", "modified f3", "synced 4"},
		kinds(c.step(true, -1)))
	assert.Equal(t, want(t, svc, c.q), c.fleets)

	w.Settle()
	for i := range 3 {
		w.Put(doc("pc", "games", fmt.Sprintf("f%d", i+1), nil, 5, nil))
	}
	require.NoError(t, svc.Sync(t.Context()))
	assert.Equal(t, []string{"modified f1"}, kinds(c.step(false, 1)), "then the connection breaks")
	assert.Equal(t, []string{"modified f2", "modified f3", "synced 4"}, kinds(c.step(true, -1)))
	assert.Equal(t, want(t, svc, c.q), c.fleets)

	// Another instance: it cannot know what the client missed.
	other := w.service(Options{})
	require.NoError(t, other.Sync(t.Context()))
	var saw []string
	err := other.Watch(t.Context(), c.q, c.token, func(e Event) error {
		saw = append(saw, kinds([]Event{e})...)
		if e.Kind == Synced {
			return errStop
		}
		return nil
	})
	require.ErrorIs(t, err, errStop)
	assert.Equal(t, []string{"restart", "cluster pc stale=false", "cluster ps5 stale=false", "cluster xbox stale=false",
		"added f1", "added f2", "added f3", "added f4", "synced 4"}, saw)

	// More than the feed keeps since the client's token.
	// (fleets of a cluster without a heartbeat, stale, so outside the set;
	// the feed keeps FeedSize changes and less than a chunk more)
	for i := range fleetview.FeedSize + 1000 {
		w.Put(doc("zz", "games", fmt.Sprintf("z%05d", i), nil, 1, nil))
	}
	w.Settle()
	require.NoError(t, svc.Sync(t.Context()))
	events := c.step(false, -1)
	assert.Equal(t, []string{"restart", "cluster pc stale=false", "cluster ps5 stale=false", "cluster xbox stale=false",
		"added f1", "added f2", "added f3", "added f4", "synced 4"}, kinds(events))
}

var errStop = errors.New("stop")

// TestWatchRejectsBadRequests: a token that is not one, or of other
// filters, and parameters a watch does not take, are named.
func TestWatchRejectsBadRequests(t *testing.T) {
	w := newWorld(t)
	svc := w.service(Options{})
	never := func(Event) error { t.Fatal("no event for a bad request"); return nil }
	for _, tc := range []struct{ query, token, param string }{
		{"", "garbage", "resumeToken"},
		{"", base64.RawURLEncoding.EncodeToString([]byte(`{"e":1,"f":"other"}`)), "resumeToken"},
		{"counter=nosuch", "", "counter"},
	} {
		err := svc.Watch(t.Context(), parse(t, tc.query), tc.token, never)
		var e *Error
		require.ErrorAs(t, err, &e, tc)
		assert.Equal(t, InvalidArgument, e.Code)
		assert.Equal(t, tc.param, e.Param)
	}
	for _, param := range []string{"orderBy=ready", "pageSize=5", "pageToken=x", "resumeToken=a&resumeToken=b", "nosuch=1"} {
		v, err := url.ParseQuery(param)
		require.NoError(t, err)
		_, _, err = ParseWatch(v)
		var e *Error
		require.ErrorAs(t, err, &e, param)
		assert.Equal(t, InvalidArgument, e.Code)
	}
}

// TestWatchesFollowRandomHistories: watches of several filters, stepping
// at random paces and losing the rest of a step at random, hold after
// every step exactly what the API answers.
func TestWatchesFollowRandomHistories(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			w := newWorld(t)
			opts := Options{TombstoneRetention: time.Hour, Resync: 24 * time.Hour}
			if seed%3 == 2 { // a view too small for every fleet: clusters go over budget
				opts.MaxViewBytes = 8 * fleetview.DocBytes(doc("pc", "games", "f0", map[string]string{"platform": "pc"}, 1, nil))
			}
			if seed%2 == 1 {
				opts.stepEvents = 1 + rng.IntN(3) // steps of a few events each
			}
			svc := w.service(opts)
			require.NoError(t, svc.Sync(t.Context()))
			var cs []*watcher
			for _, q := range []string{"", "selector=platform=pc", "minReady=2", "includeStale=true", "cluster=ps5&cluster=xbox"} {
				cs = append(cs, newWatcher(t, svc, parse(t, q)))
			}
			clusters := []string{"pc", "ps5", "xbox"}
			for range 200 {
				c := clusters[rng.IntN(3)]
				name := fmt.Sprintf("f%d", rng.IntN(6))
				switch op := rng.IntN(10); {
				case op < 5:
					w.Put(doc(c, "games", name, map[string]string{"platform": []string{"pc", "ps5"}[rng.IntN(2)]}, rng.Int64N(4), nil))
				case op < 7:
					w.Remove(c, "games", name)
				case op < 8:
					w.Heartbeat(c, []time.Duration{0, 2 * DefaultStaleAfter}[rng.IntN(2)])
				default:
					w.Clock.Step(time.Duration(rng.IntN(40)) * time.Second)
				}
				if rng.IntN(3) == 0 {
					w.Settle()
					require.NoError(t, svc.Sync(t.Context()))
				}
				for _, cl := range cs {
					if rng.IntN(4) != 0 {
						continue
					}
					if rng.IntN(5) == 0 { // a broken connection, then a resume
						cl.step(false, rng.IntN(8))
						cl.step(true, -1)
					} else {
						cl.step(false, -1)
					}
					snap := svc.eng.Current()
					expect := map[string]Fleet{}
					for d := range snap.Fleets() {
						if st := snap.StaleAtSync(d.Cluster); cl.q.Matches(d, st) {
							expect[d.Cluster+"/"+d.Namespace+"/"+d.Name] = NewFleet(d, st)
						}
					}
					require.Equal(t, slices.Sorted(maps.Keys(expect)), slices.Sorted(maps.Keys(cl.fleets)), "filter %s", cl.q.Values().Encode())
					require.Equal(t, expect, cl.fleets)
				}
			}
			for _, cl := range cs {
				for _, e := range cl.log {
					require.NotEqual(t, Restart, e.Kind, "the feed held every change: a resume resends nothing")
				}
			}
		})
	}
}

// TestWatchRunsUntilItsContextEnds: a watch polls the view while it runs,
// sends what changes and a heartbeat when idle, ends without error when
// its context ends, and then nothing polls.
func TestWatchRunsUntilItsContextEnds(t *testing.T) {
	w := newWorld(t)
	svc := w.service(Options{WatchPoll: time.Millisecond, Heartbeat: 50 * time.Millisecond})
	w.Put(doc("pc", "games", "a", nil, 1, nil))
	ctx, cancel := context.WithCancel(t.Context())
	events := make(chan Event, 100)
	done := make(chan error)
	go func() { done <- svc.Watch(ctx, NewQuery(), "", func(e Event) error { events <- e; return nil }) }()
	next := func(kind EventKind) Event {
		for {
			select {
			case e := <-events:
				if e.Kind == kind {
					return e
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s event", kind)
			}
		}
	}
	assert.Equal(t, 1, next(Synced).FleetCount)
	w.Put(doc("pc", "games", "b", nil, 1, nil)) // no request syncs: the polling does
	assert.Equal(t, "b", next(Added).Fleet.Name)
	hb := next(Heartbeat)
	assert.Equal(t, w.Clock.Now(), hb.Time)
	cancel()
	require.NoError(t, <-done)
	assert.Zero(t, svc.eng.Watches())

	// A failed send ends the watch with its error.
	err := svc.Watch(t.Context(), NewQuery(), hb.ResumeToken, func(Event) error { return errStop })
	require.ErrorIs(t, err, errStop)
}

// TestAStuckWatchDelaysNoOther: a watch whose client stopped reading
// (its send blocks) holds no lock the others need: every change still
// reaches them.
func TestAStuckWatchDelaysNoOther(t *testing.T) {
	w := newWorld(t)
	svc := w.service(Options{WatchPoll: time.Millisecond})
	w.Put(doc("pc", "games", "a", nil, 0, nil))
	stuck := make(chan struct{})
	defer close(stuck)
	go func() {
		_ = svc.Watch(t.Context(), NewQuery(), "", func(Event) error {
			<-stuck
			return nil
		})
	}()
	ready := make(chan int64, 1000)
	go func() {
		_ = svc.Watch(t.Context(), NewQuery(), "", func(e Event) error {
			switch e.Kind {
			case Synced:
				ready <- 0
			case Modified:
				ready <- e.Fleet.ReadyReplicas
			}
			return nil
		})
	}()
	require.Zero(t, <-ready, "the initial set")
	for i := range int64(100) {
		w.Put(doc("pc", "games", "a", nil, i+1, nil))
		for got := int64(0); got != i+1; {
			select {
			case got = <-ready:
			case <-time.After(10 * time.Second):
				t.Fatalf("change %d did not reach the reading watch", i+1)
			}
		}
	}
}

// FuzzResumeToken: whatever a client sends as a resume token, a watch
// either refuses it as invalid_argument or goes on from it; positions of
// this Service that it cannot honour restart the watch, and a resumed
// client ends up holding exactly the set.
func FuzzResumeToken(f *testing.F) {
	f.Add("", false, uint64(0), uint64(0), 0)
	f.Add("", true, uint64(0), uint64(3), 2)
	f.Add("", false, uint64(1), uint64(4), 1)
	f.Add("garbage", false, uint64(9), uint64(2), 99)
	f.Fuzz(func(t *testing.T, raw string, initial bool, from, to uint64, n int) {
		w := newWorld(t)
		svc := w.service(Options{})
		for i := range 3 {
			w.Put(doc("pc", "games", fmt.Sprintf("f%d", i), nil, 1, nil))
		}
		require.NoError(t, svc.Sync(t.Context()))
		w.Settle()
		w.Put(doc("pc", "games", "f0", nil, 2, nil))
		w.Remove("pc", "games", "f1")
		require.NoError(t, svc.Sync(t.Context()))

		c := newWatcher(t, svc, NewQuery())
		token := raw
		if raw == "" {
			// A position of this Service's epoch (its tokens' "e").
			b, err := base64.RawURLEncoding.DecodeString(c.resume)
			require.NoError(t, err)
			var own struct {
				Epoch uint64 `json:"e"`
			}
			require.NoError(t, json.Unmarshal(b, &own))
			b, err = json.Marshal(map[string]any{"e": own.Epoch, "f": c.filter, "i": initial, "a": from, "b": to, "n": n})
			require.NoError(t, err)
			token = base64.RawURLEncoding.EncodeToString(b)
		}
		wt, err := svc.eng.Watch(c.q, c.filter, token)
		if err != nil {
			require.True(t, errors.Is(err, fleetview.ErrBadToken) || errors.Is(err, fleetview.ErrOtherFilter), err)
			return
		}
		var events []Event
		for more := true; more; {
			st := wt.Step() // must not panic, whatever the token says
			for _, p := range st.Events {
				events = append(events, svc.event(p))
			}
			more = st.More
		}
		if len(events) > 0 && events[0].Kind == Restart {
			for _, e := range events {
				c.apply(e)
			}
			assert.Equal(t, want(t, svc, c.q), c.fleets, "a restart gives the whole set")
		}
	})
}

// TestALargeSetIsSentAChunkAtATime: a step holds at most StepEvents
// events, whatever the size of the set; the chunks together are the set,
// and a client that broke off inside one resumes exactly after its last
// event.
func TestALargeSetIsSentAChunkAtATime(t *testing.T) {
	w := newWorld(t)
	for i := range 1000 {
		w.Put(doc("pc", "games", fmt.Sprintf("f%04d", i), nil, 1, nil))
	}
	svc := w.service(Options{})
	require.NoError(t, svc.Sync(t.Context()))
	c := newWatcher(t, svc, NewQuery())
	probe, err := svc.eng.Watch(c.q, c.filter, "")
	require.NoError(t, err)
	st := probe.Step()
	require.True(t, st.More)
	assert.Len(t, st.Events, StepEvents, "one chunk")

	// 600 events, then the connection breaks; the resume gives the rest.
	got := c.step(false, 600)
	require.Len(t, got, 600)
	rest := c.step(true, -1)
	require.Len(t, rest, 1000+3-600+1, "the rest, then synced")
	assert.Equal(t, fmt.Sprintf("synced %d", 1000), kinds(rest)[len(rest)-1])
	assert.Equal(t, want(t, svc, c.q), c.fleets)
}
