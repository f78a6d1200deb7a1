package fleetwatch_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/logging"
)

// apiWorld is an in-memory store served by the query function, whose
// instance can be replaced, as a load balancer sends a reconnecting client
// to another instance.
type apiWorld struct {
	mem      *fleetapitest.Memory
	srv      *httptest.Server
	instance atomic.Pointer[http.Handler]
	seq      int64
}

func newAPIWorld(t *testing.T) *apiWorld {
	w := &apiWorld{mem: fleetapitest.NewMemory(time.Now)}
	for _, c := range []string{"pc", "ps5"} {
		w.heartbeat(c, 0)
	}
	w.newInstance()
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { (*w.instance.Load()).ServeHTTP(rw, r) }))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *apiWorld) newInstance() {
	log := logging.New(io.Discard, logging.LevelWarning)
	var h http.Handler = query.NewHandler(fleetapi.NewService(w.mem, fleetapi.Options{WatchPoll: 5 * time.Millisecond, ClusterRefresh: -1, Log: log}), log)
	w.instance.Store(&h)
}

func (w *apiWorld) heartbeat(cluster string, age time.Duration) {
	w.seq++
	w.mem.PutCluster(fleet.ClusterDocument{Cluster: cluster, Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: w.seq},
		SnapshotParts: 1, IngestedAt: time.Now().Add(-age), HeartbeatAt: time.Now().Add(-age)})
}

func (w *apiWorld) put(cluster, name string, ready int64) {
	w.seq++
	w.mem.PutFleet(fleet.Document{Cluster: cluster, Namespace: "games", Name: name, UID: "u", Version: fleet.Version{Term: 1, Seq: w.seq},
		Labels: map[string]string{"platform": cluster}, Spec: &fleet.Spec{Replicas: ready},
		Status: &fleet.DocStatus{Replicas: ready, ReadyReplicas: ready, Counters: map[string]fleet.DocAggregate{}, Lists: map[string]fleet.DocAggregate{}}})
}

func (w *apiWorld) remove(cluster, name string) {
	w.seq++
	w.mem.PutFleet(*fleet.Tombstone(fleet.Key{Cluster: cluster, Namespace: "games", Name: name}, fleet.Version{Term: 1, Seq: w.seq},
		fleet.Publisher{ID: "p"}, time.Now(), time.Now(), time.Hour))
}

// changes records a view's changes for a test to wait on.
type changes struct {
	mu  sync.Mutex
	log []string
}

func (c *changes) add(ch fleetwatch.Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch.Cluster != "" {
		c.log = append(c.log, fmt.Sprintf("%s %s", ch.Kind, ch.Cluster))
		return
	}
	c.log = append(c.log, fmt.Sprintf("%s %s/%s ready=%d", ch.Kind, ch.Fleet.Cluster, ch.Fleet.Name, ch.Fleet.ReadyReplicas))
}

func (c *changes) wait(t *testing.T, want ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.log) >= len(want)
	}, 10*time.Second, 5*time.Millisecond, "changes %v", want)
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.ElementsMatch(t, want, c.log)
	c.log = nil
}

// TestWatchAPIFollowsTheStream: the View fed by the query API starts from
// the whole set, applies changes, marks a stale cluster's fleets and never
// picks them, resumes a broken stream without repeating anything, and on
// another instance, which cannot resume it, reports only what differs.
func TestWatchAPIFollowsTheStream(t *testing.T) {
	w := newAPIWorld(t)
	w.put("pc", "ranked", 3)
	w.put("ps5", "casual", 5)
	var got changes
	client := fleetcastv1connect.NewInformationServiceClient(testhttp.Client, w.srv.URL)
	var failures, recoveries atomic.Int64
	v, err := fleetwatch.WatchAPI(t.Context(), client, fleetwatch.Options{OnChange: got.add,
		OnError: func(error) { failures.Add(1) },
		OnRecover: func(what string) {
			assert.Equal(t, "stream", what)
			recoveries.Add(1)
		}})
	require.NoError(t, err)
	assert.Len(t, v.Fleets(nil), 2, "the initial view")
	f, err := v.Pick(labels.Everything(), fleetwatch.Policy{})
	require.NoError(t, err)
	assert.Contains(t, []string{"ranked", "casual"}, f.Name)

	w.put("pc", "ranked", 7)
	got.wait(t, "Modified pc/ranked ready=7")
	w.remove("ps5", "casual")
	got.wait(t, "Removed ps5/casual ready=5")
	w.put("ps5", "casual", 1)
	got.wait(t, "Added ps5/casual ready=1")

	// The connection breaks; the stream resumes where it was.
	w.srv.CloseClientConnections()
	w.put("pc", "ranked", 8)
	got.wait(t, "Modified pc/ranked ready=8")
	assert.Positive(t, failures.Load(), "the broken stream was reported")
	assert.Equal(t, int64(1), recoveries.Load(), "and so was its recovery")

	// pc turns stale: its fleet stays, marked, and is never picked.
	w.heartbeat("pc", time.Hour)
	require.Eventually(t, func() bool {
		for _, f := range v.Fleets(nil) {
			if f.Cluster == "pc" {
				return f.Stale
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	for range 20 {
		f, err = v.Pick(labels.Everything(), fleetwatch.Policy{})
		require.NoError(t, err)
		assert.Equal(t, "casual", f.Name, "ranked has more ready, but its cluster is stale")
	}
	got.wait(t, "ClusterStale pc", "Modified pc/ranked ready=8") // its stale mark changed
	w.heartbeat("pc", 0)
	got.wait(t, "ClusterFresh pc", "Modified pc/ranked ready=8")

	// Another instance cannot resume the stream: it restarts it, and the
	// view reports only what differs from what it held.
	w.newInstance()
	w.put("ps5", "new", 2)
	w.srv.CloseClientConnections()
	got.wait(t, "Added ps5/new ready=2")
	assert.Len(t, v.Fleets(nil), 3)
}

// TestWatchAPIRejectsWhatTheServerRejects: a filter the API refuses fails
// the watch at once, rather than retrying forever.
func TestWatchAPIRejectsWhatTheServerRejects(t *testing.T) {
	w := newAPIWorld(t)
	client := fleetcastv1connect.NewInformationServiceClient(testhttp.Client, w.srv.URL)
	_, err := fleetwatch.WatchAPI(t.Context(), client, fleetwatch.Options{Clusters: []string{"Not_A_Cluster"}})
	require.Error(t, err)
	// The server's refusal in the read model's words: the parameter
	// (from the error's details) and what is wrong with it.
	e, ok := errors.AsType[*fleetapi.Error](err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fleetapi.InvalidArgument, e.Code)
	assert.Equal(t, "cluster", e.Param)
	assert.Contains(t, e.Message, `"Not_A_Cluster" is not a cluster name`)
}

// TestWatchAPIStaleWithoutNews: a view that hears nothing from the stream
// for StaleAfter marks every cluster stale: it cannot vouch for them.
func TestWatchAPIStaleWithoutNews(t *testing.T) {
	w := newAPIWorld(t)
	w.put("pc", "ranked", 3)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	client := fleetcastv1connect.NewInformationServiceClient(testhttp.Client, w.srv.URL)
	v, err := fleetwatch.WatchAPI(t.Context(), client, fleetwatch.Options{StaleAfter: time.Minute, Now: now})
	require.NoError(t, err)
	assert.False(t, v.Fleets(nil)[0].Stale)
	offset.Store(int64(2 * time.Minute))
	assert.True(t, v.Fleets(nil)[0].Stale)
	_, err = v.Pick(labels.Everything(), fleetwatch.Policy{})
	assert.ErrorIs(t, err, fleetwatch.ErrNoFleet)
}
