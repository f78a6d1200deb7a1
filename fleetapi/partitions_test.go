package fleetapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

// wire is a partition as Partitions reaches it behind its URL: each
// query and placement request goes as its parameters, and is parsed
// again there, page token included.
type wire struct{ API }

func (w wire) ListFleets(ctx context.Context, q Query) (FleetList, error) {
	parsed, err := ParseQuery(q.Values())
	if err != nil {
		return FleetList{}, err
	}
	return w.API.ListFleets(ctx, parsed)
}

func (w wire) Place(ctx context.Context, req PlaceRequest) (Placements, error) {
	parsed, err := ParsePlace(req.Values())
	if err != nil {
		return Placements{}, err
	}
	parsed.Rand = req.Rand
	return w.API.Place(ctx, parsed)
}

func (w wire) Watch(ctx context.Context, q Query, token string, send func(Event) error) error {
	v := q.Values()
	v.Del("orderBy")
	v.Del("pageSize")
	parsed, _, err := ParseWatch(v)
	if err != nil {
		return err
	}
	return w.API.(Watcher).Watch(ctx, parsed, token, send)
}

// faulty is a partition that can be down (every call fails Unavailable)
// or hung (every call waits for its context); kill takes it down and
// breaks its open streams.
type faulty struct {
	API
	down, hung atomic.Bool
	mu         sync.Mutex
	streams    map[*context.CancelFunc]bool
}

func (f *faulty) kill() {
	f.down.Store(true)
	f.mu.Lock()
	defer f.mu.Unlock()
	for cancel := range f.streams {
		(*cancel)()
	}
}

func (f *faulty) Watch(ctx context.Context, q Query, token string, send func(Event) error) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.mu.Lock()
	if f.streams == nil {
		f.streams = map[*context.CancelFunc]bool{}
	}
	f.streams[&cancel] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.streams, &cancel)
		f.mu.Unlock()
	}()
	err := f.API.(Watcher).Watch(sctx, q, token, send)
	if sctx.Err() != nil && ctx.Err() == nil {
		return &Error{Code: Unavailable, Message: "the stream broke"}
	}
	return err
}

func (f *faulty) fault(ctx context.Context) error {
	if f.hung.Load() {
		<-ctx.Done()
		return &Error{Code: Unavailable, Message: "hung", Err: ctx.Err()}
	}
	if f.down.Load() {
		return &Error{Code: Unavailable, Message: "connection refused"}
	}
	return nil
}

func (f *faulty) ListFleets(ctx context.Context, q Query) (FleetList, error) {
	if err := f.fault(ctx); err != nil {
		return FleetList{}, err
	}
	return f.API.ListFleets(ctx, q)
}

func (f *faulty) GetFleet(ctx context.Context, k fleet.Key) (Fleet, error) {
	if err := f.fault(ctx); err != nil {
		return Fleet{}, err
	}
	return f.API.GetFleet(ctx, k)
}

func (f *faulty) ListClusters(ctx context.Context) (ClusterList, error) {
	if err := f.fault(ctx); err != nil {
		return ClusterList{}, err
	}
	return f.API.ListClusters(ctx)
}

func (f *faulty) GetCluster(ctx context.Context, name string) (Cluster, error) {
	if err := f.fault(ctx); err != nil {
		return Cluster{}, err
	}
	return f.API.GetCluster(ctx, name)
}

func (f *faulty) LabelValues(ctx context.Context, key string, includeStale bool) (LabelValues, error) {
	if err := f.fault(ctx); err != nil {
		return LabelValues{}, err
	}
	return f.API.LabelValues(ctx, key, includeStale)
}

func (f *faulty) Place(ctx context.Context, req PlaceRequest) (Placements, error) {
	if err := f.fault(ctx); err != nil {
		return Placements{}, err
	}
	return f.API.Place(ctx, req)
}

// running is d with its ready game servers running.
func running(d *fleet.Document) *fleet.Document {
	d.Status.Replicas = d.Status.ReadyReplicas
	return d
}

// TestPartitionsReportAPartitionThatDoesNotAnswer: while one partition is
// down, and while it hangs, every answer still comes (within the
// timeout, for a hung one), from the others: its clusters listed stale
// as it last listed them, named UnavailableClusters where its fleets
// would be, its fleets left out of placements as stale, a fleet of it
// Unavailable; once it answers again, everything is as before.
func TestPartitionsReportAPartitionThatDoesNotAnswer(t *testing.T) {
	w := newWorld(t)
	for _, c := range []string{"pc", "ps5", "xbox"} {
		w.Mem.PutCluster(fleet.ClusterDocument{Cluster: c, Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: w.Next()},
			SnapshotParts: 1, IngestedAt: w.Clock.Now(), HeartbeatAt: w.Clock.Now(), FleetCount: 3})
		for i := range 3 {
			w.Put(running(doc(c, "games", fmt.Sprint("f", i), map[string]string{"platform": c}, 4, nil)))
		}
	}
	a := &faulty{API: wire{w.service(Options{Clusters: []string{"pc", "ps5"}})}}
	b := &faulty{API: wire{w.service(Options{Clusters: []string{"xbox"}})}}
	all, err := NewPartitions([]Partition{{Name: "a", Clusters: []string{"pc", "ps5"}, API: a}, {Name: "b", Clusters: []string{"xbox"}, API: b}},
		PartitionsOptions{Timeout: DefaultPartitionTimeout}) // what partition a, in memory, answers well within on a busy machine
	require.NoError(t, err)
	ctx := t.Context()
	before, err := all.ListClusters(ctx)
	require.NoError(t, err)
	require.Len(t, before.Items, 3)
	whole, err := all.ListFleets(ctx, Query{})
	require.NoError(t, err)
	require.Equal(t, 9, whole.TotalSize)

	for _, fault := range []string{"down", "hung"} {
		t.Run(fault, func(t *testing.T) {
			if fault == "down" {
				b.down.Store(true)
				defer b.down.Store(false)
			} else {
				b.hung.Store(true)
				defer b.hung.Store(false)
			}
			l, err := all.ListFleets(ctx, Query{})
			require.NoError(t, err)
			assert.Equal(t, 6, l.TotalSize)
			assert.Equal(t, []string{"xbox"}, l.UnavailableClusters)
			l, err = all.ListFleets(ctx, Query{Clusters: []string{"pc"}})
			require.NoError(t, err)
			assert.Empty(t, l.UnavailableClusters, "a query of the others' clusters only")

			cl, err := all.ListClusters(ctx)
			require.NoError(t, err)
			require.Len(t, cl.Items, 3)
			want := before.Items[2]
			want.Stale = true
			assert.Equal(t, want, cl.Items[2], "as it last listed it, stale")
			c, err := all.GetCluster(ctx, "xbox")
			require.NoError(t, err)
			assert.Equal(t, want, c)

			_, err = all.GetFleet(ctx, fleet.Key{Cluster: "xbox", Namespace: "games", Name: "f0"})
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, Unavailable, e.Code)
			assert.Contains(t, e.Message, "partition b, holding clusters xbox, did not answer")

			lv, err := all.LabelValues(ctx, "platform", false)
			require.NoError(t, err)
			assert.Len(t, lv.Values, 2)
			assert.Equal(t, []string{"xbox"}, lv.UnavailableClusters)

			p, err := all.Place(ctx, PlaceRequest{Count: 10})
			require.NoError(t, err)
			assert.Len(t, p.Placements, 6)
			assert.Equal(t, 6, p.Eligible)
			assert.Equal(t, []string{"xbox"}, p.UnavailableClusters)
			require.Len(t, p.LeftOut, 1)
			assert.Equal(t, LeftOut{Reason: StaleCluster, Fleets: 3, Clusters: []string{"xbox"}, ClusterCount: 1,
				Message: "3 fleets of stale clusters (xbox): no heartbeat for 1m30s, or their partition did not answer"}, p.LeftOut[0])
		})
	}
	after, err := all.ListClusters(ctx)
	require.NoError(t, err)
	assert.Equal(t, before, after)
	l, err := all.ListFleets(ctx, Query{})
	require.NoError(t, err)
	assert.Equal(t, whole, l)
}

// TestPartitionsFailOnlyForTheRequestsFault: a request no partition can
// answer fails as it would on one view; a counter that only one
// partition's clusters report is answered from that partition; the
// caller's own deadline fails the answer rather than reporting every
// partition unavailable; a cluster in no partition is named.
func TestPartitionsFailOnlyForTheRequestsFault(t *testing.T) {
	w := newWorld(t)
	w.Heartbeat("pc", 0)
	w.Heartbeat("xbox", 0)
	w.Put(doc("pc", "games", "a", nil, 4, map[string]fleet.DocAggregate{"rooms": {Capacity: 10, Available: 6}}))
	w.Put(doc("xbox", "games", "b", nil, 4, nil))
	a := &faulty{API: wire{w.service(Options{Clusters: []string{"pc"}})}}
	b := &faulty{API: wire{w.service(Options{Clusters: []string{"xbox"}})}}
	all, err := NewPartitions([]Partition{{Name: "a", Clusters: []string{"pc"}, API: a}, {Name: "b", Clusters: []string{"xbox"}, API: b}}, PartitionsOptions{})
	require.NoError(t, err)
	ctx := t.Context()

	l, err := all.ListFleets(ctx, Query{Counter: "rooms", MinAvailable: 1})
	require.NoError(t, err)
	assert.Equal(t, []string{"pc/games/a"}, names(l.Items))
	p, err := all.Place(ctx, PlaceRequest{Need: Need{Counter: "rooms", CounterAvailable: 1}})
	require.NoError(t, err)
	require.Len(t, p.Placements, 1)
	assert.Equal(t, "pc", p.Placements[0].Cluster)

	_, err = all.ListFleets(ctx, Query{Counter: "seats", MinAvailable: 1})
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, InvalidArgument, e.Code)
	assert.Equal(t, "counter", e.Param)

	_, err = all.ListFleets(ctx, Query{Clusters: []string{"switch"}})
	require.ErrorAs(t, err, &e)
	assert.Equal(t, `parameter cluster: cluster "switch" is in no partition of this service`, e.Error())
	_, err = all.GetCluster(ctx, "switch")
	require.ErrorAs(t, err, &e)
	assert.Equal(t, NotFound, e.Code)

	b.hung.Store(true)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = all.ListFleets(short, Query{})
	require.ErrorAs(t, err, &e)
	assert.Equal(t, Unavailable, e.Code)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)

	_, err = NewPartitions([]Partition{{Name: "a", Clusters: []string{"pc"}, API: a}, {Name: "b", Clusters: []string{"pc", "xbox"}, API: b}}, PartitionsOptions{})
	assert.EqualError(t, err, "cluster pc is in partitions a and b")
}

// TestPartitionsPlaceAsOneView: placements over two partitions of 30
// fleets, each of capacity within twice the median: the same eligible
// fleets and fleets left out, by reason, as one view's, each answer
// ranked best first by draw; and over 8 000 draws each fleet comes
// first as often as it does from one view (every fleet's share within 5
// standard deviations of the single view's expectation, weight ÷ total
// weight).
func TestPartitionsPlaceAsOneView(t *testing.T) {
	w := newWorld(t)
	clusters := []string{"eu", "us", "ap"}
	for _, c := range clusters {
		w.Mem.PutCluster(fleet.ClusterDocument{Cluster: c, Labels: map[string]string{"region": c}, SnapshotVersion: fleet.Version{Term: 1, Seq: w.Next()},
			SnapshotParts: 1, IngestedAt: w.Clock.Now(), HeartbeatAt: w.Clock.Now()})
	}
	// The eligible fleets' weights: ranked, ≥ 4 ready, in eu (weight 2)
	// or us (weight 1); ap is in no rule of the policy.
	weights := map[string]float64{}
	total := 0.0
	for i := range 30 {
		c, ready, mode := clusters[i%3], int64(3+i%5), []string{"ranked", "casual"}[i%2]
		name := fmt.Sprint("f", i)
		w.Put(running(doc(c, "games", name, map[string]string{"mode": mode}, ready, nil)))
		if mode == "ranked" && ready >= 4 && c != "ap" {
			weights[c+"/games/"+name] = float64(ready) * map[string]float64{"eu": 2, "us": 1}[c]
			total += weights[c+"/games/"+name]
		}
	}
	one := w.service(Options{})
	all, err := NewPartitions([]Partition{
		{Name: "a", Clusters: []string{"eu"}, API: wire{w.service(Options{Clusters: []string{"eu"}})}},
		{Name: "b", Clusters: []string{"us", "ap"}, API: wire{w.service(Options{Clusters: []string{"us", "ap"}})}},
	}, PartitionsOptions{})
	require.NoError(t, err)
	ctx := t.Context()
	policy, err := ParsePolicy([]string{"region=eu:0:2", "region=us:0:1"})
	require.NoError(t, err)
	req := PlaceRequest{Filter: Query{Selector: mustSelector(t, "mode=ranked")}, Count: 4, Policy: &policy,
		Need: Need{GameServers: 4}, Rand: rand.New(rand.NewPCG(1, 2))}
	want, err := one.Place(ctx, req)
	require.NoError(t, err)
	got, err := all.Place(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, len(weights), got.Eligible)
	assert.Equal(t, want.Eligible, got.Eligible)
	assert.Equal(t, want.LeftOut, got.LeftOut)
	assert.Equal(t, want.Policy, got.Policy)
	assert.Equal(t, want.PolicySource, got.PolicySource)
	require.Len(t, got.Placements, 4)
	for i := 1; i < len(got.Placements); i++ {
		assert.LessOrEqual(t, got.Placements[i-1].DrawKey, got.Placements[i].DrawKey, "best first")
	}

	const draws = 8_000
	first := map[string]int{}
	req.Count = 1
	for range draws {
		p, err := all.Place(ctx, req)
		require.NoError(t, err)
		first[p.Placements[0].Cluster+"/games/"+p.Placements[0].Name]++
	}
	for id, wt := range weights {
		share := wt / total
		sd := math.Sqrt(draws * share * (1 - share))
		assert.InDelta(t, draws*share, float64(first[id]), 5*sd, "%s: weight %v of %v", id, wt, total)
	}
	assert.Len(t, first, len(weights), "only eligible fleets come first")
}

// follower is a client of a watch: the fleets it holds and the clusters
// as it last heard of them, applying each event as a client does.
type follower struct {
	mu       sync.Mutex
	fleets   map[string]Fleet
	clusters map[string]Cluster
	synced   int
	restarts int
	token    string
}

func (f *follower) send(e Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.Kind != Heartbeat {
		f.token = e.ResumeToken
	}
	switch e.Kind {
	case Added, Modified:
		f.fleets[fleetID(e.Fleet)] = e.Fleet
	case Removed:
		delete(f.fleets, fleetID(e.Fleet))
	case ClusterChanged:
		f.clusters[e.Cluster.Cluster] = e.Cluster
	case Synced:
		f.synced++
	case Restart:
		f.restarts++
		clear(f.fleets)
	}
	return nil
}

// holds returns the fleets it holds, by ID, with their ready replicas.
func (f *follower) holds() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int64{}
	for id, fl := range f.fleets {
		out[id] = fl.ReadyReplicas
	}
	return out
}

func (f *follower) stale(cluster string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.clusters[cluster]
	return ok && c.Stale
}

// TestAMergedWatchSurvivesAPartitionKilledMidStream: a watch of every
// fleet over two partitions holds, once synced, what one view lists, and
// follows changes in both. Partition b is killed mid-stream (its stream
// broken, every call refused): b's clusters are sent stale at once, and
// a's changes keep flowing while b is retried. Changes made to b's fleets
// while it is down arrive once it is back, its clusters fresh again; the
// watch never restarts. A watch resumed with the last token gets the
// changes made meanwhile, without a restart.
func TestAMergedWatchSurvivesAPartitionKilledMidStream(t *testing.T) {
	w := newWorld(t)
	for _, c := range []string{"pc", "ps5", "xbox"} {
		w.Heartbeat(c, 0)
		for i := range 5 {
			w.Put(running(doc(c, "games", fmt.Sprint("f", i), map[string]string{"platform": c}, 4, nil)))
		}
	}
	opts := func(clusters ...string) Options {
		return Options{Clusters: clusters, WatchPoll: 5 * time.Millisecond, MaxStaleness: -1, ClusterRefresh: -1, StaleAfter: time.Hour, Now: w.Clock.Now}
	}
	one := NewService(w.Mem, opts())
	a := &faulty{API: wire{NewService(w.Mem, opts("pc", "ps5"))}}
	b := &faulty{API: wire{NewService(w.Mem, opts("xbox"))}}
	all, err := NewPartitions([]Partition{{Name: "a", Clusters: []string{"pc", "ps5"}, API: a}, {Name: "b", Clusters: []string{"xbox"}, API: b}},
		PartitionsOptions{Timeout: 10 * time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	single := func() map[string]int64 {
		l, err := AllFleets(t.Context(), one, Query{})
		require.NoError(t, err)
		out := map[string]int64{}
		for _, f := range l {
			out[fleetID(f)] = f.ReadyReplicas
		}
		return out
	}
	watch := func(ctx context.Context, f *follower, token string) chan error {
		ended := make(chan error, 1)
		go func() { ended <- all.Watch(ctx, Query{}, token, f.send) }()
		return ended
	}
	converges := func(f *follower, why string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, single(), f.holds())
		}, 20*time.Second, 10*time.Millisecond, why)
	}
	f := &follower{fleets: map[string]Fleet{}, clusters: map[string]Cluster{}}
	ended := watch(ctx, f, "")
	require.Eventually(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.synced == 1 }, 20*time.Second, 10*time.Millisecond)
	require.Len(t, f.holds(), 15, "the whole set before Synced")
	converges(f, "the initial set is one view's")

	w.Put(running(doc("pc", "games", "f0", map[string]string{"platform": "pc"}, 7, nil)))
	w.Put(running(doc("xbox", "games", "f9", map[string]string{"platform": "xbox"}, 2, nil)))
	converges(f, "changes in both partitions")

	b.kill()
	require.Eventually(t, func() bool { return f.stale("xbox") }, 20*time.Second, 10*time.Millisecond, "the dead partition's cluster is sent stale")
	assert.False(t, f.stale("pc"))
	w.Put(running(doc("ps5", "games", "f1", map[string]string{"platform": "ps5"}, 9, nil)))
	w.Remove("pc", "games", "f4")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h := f.holds()
		assert.EqualValues(c, 9, h[fleet.Key{Cluster: "ps5", Namespace: "games", Name: "f1"}.DocID()])
		assert.NotContains(c, h, fleet.Key{Cluster: "pc", Namespace: "games", Name: "f4"}.DocID())
	}, 20*time.Second, 10*time.Millisecond, "the live partition's changes keep flowing")
	w.Put(running(doc("xbox", "games", "f0", map[string]string{"platform": "xbox"}, 1, nil)))
	w.Remove("xbox", "games", "f3")

	b.down.Store(false)
	converges(f, "what changed in the dead partition arrives once it is back")
	require.Eventually(t, func() bool { return !f.stale("xbox") }, 20*time.Second, 10*time.Millisecond, "its cluster fresh again")
	f.mu.Lock()
	assert.Zero(t, f.restarts, "no restart: partition b resumed its own stream")
	token := f.token
	f.mu.Unlock()

	// Resumed with the last token, after a change.
	cancel()
	require.NoError(t, <-ended)
	w.Put(running(doc("xbox", "games", "f1", map[string]string{"platform": "xbox"}, 3, nil)))
	resumed := &follower{fleets: f.fleets, clusters: map[string]Cluster{}}
	ctx2, cancel2 := context.WithCancel(t.Context())
	defer cancel2()
	ended = watch(ctx2, resumed, token)
	converges(resumed, "a resumed watch gets what changed meanwhile")
	require.Eventually(t, func() bool { resumed.mu.Lock(); defer resumed.mu.Unlock(); return resumed.synced == 1 }, 20*time.Second, 10*time.Millisecond)
	assert.Zero(t, resumed.restarts)
	cancel2()
	require.NoError(t, <-ended)

	_, err = all.ListFleets(t.Context(), Query{})
	require.NoError(t, err)
	err = all.Watch(t.Context(), Query{}, "not-a-token", func(Event) error { return nil })
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "resumeToken", e.Param)
}

// TestAMergingInstanceTakesFewHeavyReadsAtOnce: a merge waits for its
// partitions, so a merging instance takes DefaultPartitionsHeavySlots
// heavy reads at once (more than a view's one a processor), and refuses
// one past its queue at once, as a view does.
func TestAMergingInstanceTakesFewHeavyReadsAtOnce(t *testing.T) {
	w := newWorld(t)
	all, err := NewPartitions([]Partition{{Name: "a", Clusters: []string{"pc"}, API: w.service(Options{Clusters: []string{"pc"}})}},
		PartitionsOptions{HeavyQueue: 1, HeavyWait: time.Hour})
	require.NoError(t, err)
	var releases []func()
	for range DefaultPartitionsHeavySlots {
		release, err := all.Admit(t.Context())
		require.NoError(t, err, "a slot at once")
		releases = append(releases, release)
	}
	waited := make(chan error, 1)
	go func() {
		release, err := all.Admit(t.Context())
		if err == nil {
			release()
		}
		waited <- err
	}()
	require.Eventually(t, func() bool { return all.admit.waiting.Load() == 1 }, 10*time.Second, time.Millisecond, "the next one waits")
	_, err = all.Admit(t.Context())
	var e *Error
	require.ErrorAs(t, err, &e, "past the queue: refused at once")
	assert.Equal(t, ResourceExhausted, e.Code)
	releases[0]()
	require.NoError(t, <-waited, "the waiting one takes the freed slot")
	for _, r := range releases[1:] {
		r()
	}
}
