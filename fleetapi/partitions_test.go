package fleetapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
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

// faulty is a partition that can be down (every call fails Unavailable)
// or hung (every call waits for its context).
type faulty struct {
	API
	down, hung atomic.Bool
	calls      atomic.Int64
}

func (f *faulty) fault(ctx context.Context) error {
	f.calls.Add(1)
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
		PartitionsOptions{Timeout: 300 * time.Millisecond})
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
