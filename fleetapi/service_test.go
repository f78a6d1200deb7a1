package fleetapi

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
)

// world is fleetapitest's World, and a Service over it.
type world struct{ *fleetapitest.World }

func newWorld(tb testing.TB) *world {
	tb.Helper()
	return &world{fleetapitest.NewWorld()}
}

// service returns a Service over w; unless opts say otherwise, every
// answer waits for a sync that begins after the request.
func (w *world) service(opts Options) *Service {
	opts.Now = w.Clock.Now
	if opts.MaxStaleness == 0 {
		opts.MaxStaleness = -1
	}
	return NewService(w.Mem, opts)
}

func names(l []Fleet) []string {
	out := make([]string, 0, len(l))
	for _, f := range l {
		out = append(out, f.Cluster+"/"+f.Namespace+"/"+f.Name)
	}
	return out
}

func all(t *testing.T, svc *Service, q Query) []string {
	t.Helper()
	l, err := AllFleets(t.Context(), svc, q)
	require.NoError(t, err)
	return names(l)
}

// TestPagesFollowEveryOrder walks every page of every ordering and
// compares the concatenation with a sort of the matching fleets.
func TestPagesFollowEveryOrder(t *testing.T) {
	w := newWorld(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var docs []*fleet.Document
	for i := range 57 {
		d := doc([]string{"pc", "ps5", "xbox"}[i%3], "games", fmt.Sprintf("f%02d", i), map[string]string{"platform": []string{"pc", "ps5"}[i%2]},
			rng.Int64N(4), map[string]fleet.DocAggregate{"rooms": {Available: rng.Int64N(3)}})
		w.Put(d)
		docs = append(docs, d)
	}
	svc := w.service(Options{})
	for _, orderBy := range []string{OrderByName, OrderByReady, OrderByAvailable} {
		for _, size := range []int{1, 7, 19, 100} {
			t.Run(fmt.Sprintf("%s/%d", orderBy, size), func(t *testing.T) {
				q := NewQuery()
				q.OrderBy, q.PageSize, q.Counter = orderBy, size, "rooms"
				var want []item
				for _, d := range docs {
					if q.Matches(d, false) {
						want = append(want, item{id: d.Key().DocID(), doc: d})
					}
				}
				slices.SortFunc(want, q.compare)
				var got []string
				pages := 0
				for {
					page, err := svc.ListFleets(t.Context(), q)
					require.NoError(t, err)
					assert.Equal(t, len(want), page.TotalSize)
					assert.LessOrEqual(t, len(page.Items), size)
					got = append(got, names(page.Items)...)
					pages++
					if page.NextPageToken == "" {
						break
					}
					q, err = q.Next(page.NextPageToken)
					require.NoError(t, err)
				}
				wantNames := make([]string, 0, len(want))
				for _, e := range want {
					wantNames = append(wantNames, e.id)
				}
				gotIDs := make([]string, 0, len(got))
				for _, n := range got {
					p := strings.SplitN(n, "/", 3)
					gotIDs = append(gotIDs, fleet.Key{Cluster: p[0], Namespace: p[1], Name: p[2]}.DocID())
				}
				assert.Equal(t, wantNames, gotIDs)
				assert.Equal(t, (len(want)+size-1)/size, pages)
			})
		}
	}
}

func TestAPageTokenBelongsToItsQuery(t *testing.T) {
	w := newWorld(t)
	for i := range 3 {
		w.Put(doc("pc", "games", fmt.Sprintf("f%d", i), nil, 1, nil))
	}
	q := NewQuery()
	q.PageSize = 1
	page, err := w.service(Options{}).ListFleets(t.Context(), q)
	require.NoError(t, err)
	other := NewQuery()
	other.OrderBy = OrderByReady
	_, err = other.Next(page.NextPageToken)
	assert.Equal(t, "pageToken", err.(*Error).Param)
}

// TestTheViewHasEveryWriteAcknowledgedBeforeTheRead: additions, changes
// and tombstones are in the next answer, whether the clock moves between
// writes and reads or not (commits in one millisecond share a stamp).
func TestTheViewHasEveryWriteAcknowledgedBeforeTheRead(t *testing.T) {
	for _, step := range []time.Duration{0, time.Millisecond, time.Second} {
		t.Run(step.String(), func(t *testing.T) {
			w := newWorld(t)
			svc := w.service(Options{})
			key := fleet.Key{Cluster: "pc", Namespace: "games", Name: "a"}
			w.Put(doc("pc", "games", "a", nil, 1, nil))
			assert.Equal(t, []string{"pc/games/a"}, all(t, svc, NewQuery()))

			w.Clock.Step(step)
			w.Put(doc("pc", "games", "b", nil, 1, nil))
			w.Put(doc("pc", "games", "a", nil, 7, nil))
			assert.Equal(t, []string{"pc/games/a", "pc/games/b"}, all(t, svc, NewQuery()))
			f, err := svc.GetFleet(t.Context(), key)
			require.NoError(t, err)
			assert.EqualValues(t, 7, f.ReadyReplicas)

			w.Clock.Step(step)
			w.Remove("pc", "games", "a")
			assert.Equal(t, []string{"pc/games/b"}, all(t, svc, NewQuery()))
			_, err = svc.GetFleet(t.Context(), key)
			assert.Equal(t, NotFound, CodeOf(err))

			w.Clock.Step(step)
			w.Put(doc("pc", "games", "a", nil, 2, nil)) // revived
			assert.Equal(t, []string{"pc/games/a", "pc/games/b"}, all(t, svc, NewQuery()))
		})
	}
}

// TestACommitVisibleAfterItsStampIsNotMissed: a write stamped before a
// sync but visible only after it (its commit was under way) is in the
// answers once it is acknowledged, as long as it became visible within
// CommitLag of its stamp; Resync bounds how long a later one is missed.
func TestACommitVisibleAfterItsStampIsNotMissed(t *testing.T) {
	w := newWorld(t)
	svc := w.service(Options{CommitLag: 100 * time.Millisecond, Resync: time.Hour})
	all(t, svc, NewQuery())

	commitA := w.Mem.HoldFleet(*doc("pc", "games", "a", nil, 1, nil)) // stamped now, not yet visible
	w.Clock.Step(40 * time.Millisecond)
	w.Put(doc("pc", "games", "b", nil, 1, nil))
	assert.Equal(t, []string{"pc/games/b"}, all(t, svc, NewQuery()), "a is not visible yet")
	w.Clock.Step(50 * time.Millisecond)
	commitA() // acknowledged 90 ms after its stamp
	assert.Equal(t, []string{"pc/games/a", "pc/games/b"}, all(t, svc, NewQuery()))

	w.Settle()
	all(t, svc, NewQuery())
	commitC := w.Mem.HoldFleet(*doc("pc", "games", "c", nil, 1, nil))
	w.Clock.Step(150 * time.Millisecond)
	all(t, svc, NewQuery())
	commitC() // later than CommitLag: missed until the next full load
	assert.Equal(t, []string{"pc/games/a", "pc/games/b"}, all(t, svc, NewQuery()))
	w.Clock.Step(time.Hour)
	w.Heartbeat("pc", 0)
	assert.Equal(t, []string{"pc/games/a", "pc/games/b", "pc/games/c"}, all(t, svc, NewQuery()))
}

// TestReadsCostWhatChanged counts the reads the source bills: the full
// load once, then one per answer when nothing changed and one more per
// fleet written since the previous answer.
func TestReadsCostWhatChanged(t *testing.T) {
	w := newWorld(t)
	for i := range 500 {
		w.Put(doc("pc", "games", fmt.Sprintf("f%03d", i), nil, 1, nil))
	}
	svc := w.service(Options{ClusterRefresh: time.Minute, Resync: 24 * time.Hour})
	w.Settle()
	before := w.Mem.Reads()
	all(t, svc, NewQuery())
	assert.EqualValues(t, 500+3, w.Mem.Reads()-before, "the first answer loads every fleet and cluster")

	for changed := range 5 {
		w.Settle()
		for i := range changed {
			w.Put(doc("pc", "games", fmt.Sprintf("f%03d", i), nil, int64(changed), nil))
		}
		w.Settle()
		before = w.Mem.Reads()
		page, err := svc.ListFleets(t.Context(), NewQuery())
		require.NoError(t, err)
		assert.Equal(t, 500, page.TotalSize)
		assert.LessOrEqual(t, w.Mem.Reads()-before, int64(1+changed), "%d fleets changed", changed)
	}

	t.Run("pages after the first cost no more", func(t *testing.T) {
		w.Settle()
		all(t, svc, NewQuery())
		q := NewQuery()
		for page := 1; page <= 5; page++ {
			before := w.Mem.Reads()
			l, err := svc.ListFleets(t.Context(), q)
			require.NoError(t, err)
			assert.EqualValues(t, 1, w.Mem.Reads()-before, "page %d", page)
			if page < 5 {
				q, err = q.Next(l.NextPageToken)
				require.NoError(t, err)
			}
		}
	})
	t.Run("clusters are read again once ClusterRefresh has passed", func(t *testing.T) {
		w.Clock.Step(2 * time.Minute)
		w.Heartbeat("pc", 0)
		before := w.Mem.Reads()
		all(t, svc, NewQuery())
		assert.EqualValues(t, 2, w.Mem.Reads()-before, "no fleet changed (one read), one cluster did")
	})
	t.Run("syncs within CommitLag read recent writes again", func(t *testing.T) {
		w.Settle()
		all(t, svc, NewQuery())
		w.Put(doc("pc", "games", "f000", nil, 9, nil))
		for range 3 {
			before := w.Mem.Reads()
			all(t, svc, NewQuery())
			assert.EqualValues(t, 1, w.Mem.Reads()-before, "the write, read again by each sync within CommitLag")
			w.Clock.Step(DefaultCommitLag / 4)
		}
		w.Settle()
		all(t, svc, NewQuery())
		before := w.Mem.Reads()
		all(t, svc, NewQuery())
		assert.EqualValues(t, 1, w.Mem.Reads()-before, "nothing written since: the query's minimum")
	})
}

// TestANewInstanceAndAWarmOneAgree: the answers and their ETags depend on
// the documents, not on how the view came to hold them.
func TestANewInstanceAndAWarmOneAgree(t *testing.T) {
	w := newWorld(t)
	warm := w.service(Options{ClusterRefresh: -1})
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 20 {
		for range 10 {
			i := rng.IntN(30)
			name := fmt.Sprintf("f%02d", i)
			if rng.IntN(4) == 0 {
				w.Remove("pc", "games", name)
			} else {
				w.Put(doc([]string{"pc", "ps5"}[i%2], "games", name, map[string]string{"v": fmt.Sprint(rng.IntN(3))}, rng.Int64N(5), nil))
			}
		}
		if round%5 == 0 {
			w.Heartbeat("ps5", time.Duration(rng.IntN(200))*time.Second)
		}
		var warmFleets FleetList
		var warmLabels LabelValues
		var warmClusters ClusterList
		var warmTag string
		require.NoError(t, warm.Read(t.Context(), func(r *Read) error {
			warmFleets, _ = r.Fleets(NewQuery())
			warmLabels, _ = r.Labels("v", true)
			warmClusters, warmTag = r.Clusters(), r.ETag("x")
			return nil
		}))

		cold := w.service(Options{ClusterRefresh: -1})
		require.NoError(t, cold.Read(t.Context(), func(r *Read) error {
			coldFleets, _ := r.Fleets(NewQuery())
			coldLabels, _ := r.Labels("v", true)
			assert.Equal(t, coldFleets, warmFleets, "round %d", round)
			assert.Equal(t, coldLabels, warmLabels)
			assert.Equal(t, r.Clusters(), warmClusters)
			assert.Equal(t, r.ETag("x"), warmTag)
			return nil
		}))
	}
}

func TestETags(t *testing.T) {
	w := newWorld(t)
	w.Put(doc("pc", "games", "a", nil, 1, nil))
	svc := w.service(Options{ClusterRefresh: -1})
	tag := func(key string) (tag string) {
		require.NoError(t, svc.Read(t.Context(), func(r *Read) error { tag = r.ETag(key); return nil }))
		return tag
	}
	first := tag("k")
	assert.Equal(t, first, tag("k"), "nothing changed")
	assert.NotEqual(t, first, tag("other"), "another answer")
	w.Put(doc("pc", "games", "a", nil, 2, nil))
	second := tag("k")
	assert.NotEqual(t, first, second, "a fleet changed")
	w.Clock.Step(DefaultStaleAfter + time.Second)
	assert.NotEqual(t, second, tag("k"), "clusters went stale")
}

// TestAViewLongIdleLoadsAgain: a tombstone expires (Firestore's TTL)
// after TombstoneRetention; a view that has not synced for half of that
// loads everything again rather than keep a fleet whose tombstone it may
// never see.
func TestAViewLongIdleLoadsAgain(t *testing.T) {
	w := newWorld(t)
	w.Put(doc("pc", "games", "a", nil, 1, nil))
	svc := w.service(Options{TombstoneRetention: time.Hour, Resync: 24 * time.Hour})
	assert.Equal(t, []string{"pc/games/a"}, all(t, svc, NewQuery()))

	w.Remove("pc", "games", "a")
	w.Mem.Expire(fleet.Key{Cluster: "pc", Namespace: "games", Name: "a"})
	w.Clock.Step(31 * time.Minute)
	w.Heartbeat("pc", 0)
	assert.Empty(t, all(t, svc, NewQuery()))
}

// TestConcurrentReadersSeeTheirOwnWrites: each reader writes a fleet and
// must find it in its next answer, while other readers share syncs.
func TestConcurrentReadersSeeTheirOwnWrites(t *testing.T) {
	w := newWorld(t)
	svc := w.service(Options{})
	var mu sync.Mutex // world's version counter
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				k := fleet.Key{Cluster: "pc", Namespace: "games", Name: fmt.Sprintf("g%d-%d", g, i)}
				mu.Lock()
				w.Put(doc(k.Cluster, k.Namespace, k.Name, nil, 1, nil))
				mu.Unlock()
				_, err := svc.GetFleet(t.Context(), k)
				assert.NoError(t, err, "%s was written before the read", k)
			}
		})
	}
	wg.Wait()
	assert.Len(t, all(t, svc, NewQuery()), 200)
}

func TestStoreFailures(t *testing.T) {
	w := newWorld(t)
	svc := w.service(Options{})
	w.Mem.Err = status.Error(codes.Unavailable, "connection refused")
	_, err := svc.ListClusters(t.Context())
	assert.Equal(t, Unavailable, CodeOf(err))
	w.Mem.Err = status.Error(codes.PermissionDenied, "missing role")
	_, err = svc.ListClusters(t.Context())
	assert.Equal(t, Internal, CodeOf(err))
	w.Mem.Err = nil
	l, err := svc.ListClusters(t.Context())
	require.NoError(t, err)
	assert.Len(t, l.Items, 3)
}

func TestAnswers(t *testing.T) {
	w := newWorld(t)
	w.Heartbeat("xbox", time.Hour) // stale
	w.Put(doc("pc", "games", "a", map[string]string{"version": "1.42"}, 3, nil))
	w.Put(doc("ps5", "games", "b", map[string]string{"version": "1.42"}, 2, nil))
	w.Put(doc("xbox", "games", "c", map[string]string{"version": "1.41"}, 5, nil))
	svc := w.service(Options{})

	lv, err := svc.LabelValues(t.Context(), "version", false)
	require.NoError(t, err)
	assert.Equal(t, []LabelValue{{Value: "1.42", Fleets: 2, ReadyReplicas: 5, Clusters: []string{"pc", "ps5"}}}, lv.Values)
	lv, err = svc.LabelValues(t.Context(), "version", true)
	require.NoError(t, err)
	assert.Len(t, lv.Values, 2)
	_, err = svc.LabelValues(t.Context(), "bad key", false)
	assert.Equal(t, "key", err.(*Error).Param)

	c, err := svc.GetCluster(t.Context(), "xbox")
	require.NoError(t, err)
	assert.True(t, c.Stale)
	_, err = svc.GetCluster(t.Context(), "switch")
	assert.Equal(t, NotFound, CodeOf(err))
	_, err = svc.GetCluster(t.Context(), "Bad_Name")
	assert.Equal(t, InvalidArgument, CodeOf(err))

	q := NewQuery()
	q.Counter = "seats"
	_, err = svc.ListFleets(t.Context(), q)
	assert.Equal(t, "counter", err.(*Error).Param, "a counter no cluster reports is a typo")

	q = NewQuery()
	q.IncludeStale = true
	l, err := svc.ListFleets(t.Context(), q)
	require.NoError(t, err)
	stale := map[string]bool{}
	for _, f := range l.Items {
		stale[f.Name] = f.Stale
	}
	assert.Equal(t, map[string]bool{"a": false, "b": false, "c": true}, stale)
}

// TestAPageHoldsNoMoreThanItsSize: the pager keeps at most PageSize
// entries however many match, in any order of arrival.
func TestAPageHoldsNoMoreThanItsSize(t *testing.T) {
	q := NewQuery()
	q.OrderBy, q.PageSize = OrderByReady, 5
	p := &pager{q: q}
	rng := rand.New(rand.NewPCG(5, 6))
	var want []item
	for i := range 1000 {
		d := doc("pc", "games", fmt.Sprintf("f%04d", i), nil, rng.Int64N(100), nil)
		e := item{id: d.Key().DocID(), doc: d}
		p.add(e)
		want = append(want, e)
		assert.LessOrEqual(t, len(p.top), 5)
	}
	slices.SortFunc(want, q.compare)
	page, next := p.page()
	assert.Equal(t, want[:5], page)
	assert.NotEmpty(t, next)
	assert.Equal(t, 1000, p.total)
}

// TestMaxStaleness: within MaxStaleness of its newest sync, the view
// answers without reading; from half of it, a sync starts in the
// background; past it, the answer waits for a sync.
func TestMaxStaleness(t *testing.T) {
	w := newWorld(t)
	svc := w.service(Options{MaxStaleness: time.Second, ClusterRefresh: time.Hour})
	all(t, svc, NewQuery())
	w.Clock.Step(2 * time.Second)
	w.Put(doc("pc", "games", "a", nil, 1, nil))
	assert.Equal(t, []string{"pc/games/a"}, all(t, svc, NewQuery()), "the view is older than MaxStaleness: the answer waits")

	w.Clock.Step(100 * time.Millisecond)
	w.Put(doc("pc", "games", "b", nil, 1, nil))
	before := w.Mem.Reads()
	assert.Equal(t, []string{"pc/games/a"}, all(t, svc, NewQuery()), "within MaxStaleness: answered from the view")
	assert.Zero(t, w.Mem.Reads()-before)

	w.Clock.Step(600 * time.Millisecond)
	all(t, svc, NewQuery()) // past half: a sync in the background
	assert.Eventually(t, func() bool {
		return svc.Read(t.Context(), func(r *Read) error {
			_, err := r.Fleet(fleet.Key{Cluster: "pc", Namespace: "games", Name: "b"})
			return err
		}) == nil
	}, 5*time.Second, time.Millisecond)
}

// TestAReaderHoldsNobodyBack: a reading that takes as long as it likes (an
// expensive query, a slow scrape) holds no lock: a sync completes
// meanwhile, and another request answers from the newer snapshot, while
// the first still sees the view it started with.
func TestAReaderHoldsNobodyBack(t *testing.T) {
	w := newWorld(t)
	w.Put(doc("pc", "games", "a", nil, 1, nil))
	svc := w.service(Options{})
	entered, release := make(chan struct{}), make(chan struct{})
	slow := make(chan error, 1)
	go func() {
		slow <- svc.Read(context.Background(), func(r *Read) error {
			close(entered)
			<-release
			_, err := r.Fleet(fleet.Key{Cluster: "pc", Namespace: "games", Name: "b"})
			if CodeOf(err) != NotFound {
				return fmt.Errorf("the slow reading saw a later write: %v", err)
			}
			return nil
		})
	}()
	<-entered
	w.Settle()
	w.Put(doc("pc", "games", "b", nil, 1, nil))
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			if err := svc.Sync(t.Context()); err != nil {
				return err
			}
			_, err := svc.GetFleet(t.Context(), fleet.Key{Cluster: "pc", Namespace: "games", Name: "b"})
			return err
		}()
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "the sync and the other request, while the slow reading runs")
	case <-time.After(30 * time.Second):
		t.Fatal("a sync or a request waited for a slow reading")
	}
	close(release)
	require.NoError(t, <-slow)
}
