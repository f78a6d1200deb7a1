package emulatortests

import (
	"context"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// changeLog collects the changes a watch reports.
type changeLog struct {
	mu  sync.Mutex
	log []fleetwatch.Change
}

func (c *changeLog) add(ch fleetwatch.Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, ch)
}

func (c *changeLog) kinds(name string) []fleetwatch.ChangeKind {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []fleetwatch.ChangeKind
	for _, ch := range c.log {
		if ch.Fleet.Name == name {
			out = append(out, ch.Kind)
		}
	}
	return out
}

// clusterChanges returns the clusters' changes, as "KIND cluster".
func (c *changeLog) clusterChanges() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, ch := range c.log {
		if ch.Cluster != "" {
			out = append(out, string(ch.Kind)+" "+ch.Cluster)
		}
	}
	return out
}

func startWatch(tb testing.TB, client *firestore.Client, log *changeLog) *fleetwatch.View {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	v, err := fleetwatch.Watch(ctx, client, fleetwatch.Options{OnChange: log.add})
	require.NoError(tb, err)
	tb.Cleanup(func() {
		cancel()
		select {
		case <-v.Done():
		case <-time.After(10 * time.Second):
			tb.Error("the watch did not end after its context was cancelled")
		}
	})
	return v
}

func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v", what, waitTimeout)
		}
		letTimePass(10 * time.Millisecond)
	}
}

func TestWatchFollowsWritesAndTombstones(t *testing.T) {
	a := newAPI(t)
	seed(a)
	log := &changeLog{}
	v := startWatch(t, a.store.Client(), log)
	assert.Len(t, v.Fleets(nil), 5, "the initial view has every live fleet, stale ones too")
	assert.Len(t, v.Fleets(labels.SelectorFromSet(labels.Set{"app.kubernetes.io/version": "1.42"})), 3)

	a.put(fleetSpec{"pc", "games", "fresh", map[string]string{"platform": "pc"}, 4, 4, 4})
	eventually(t, "the new fleet in the view", func() bool { return len(v.Fleets(nil)) == 6 })
	a.put(fleetSpec{"pc", "games", "fresh", map[string]string{"platform": "pc"}, 9, 4, 4})
	eventually(t, "the change in the view", func() bool {
		for _, f := range v.Fleets(nil) {
			if f.Name == "fresh" {
				return f.ReadyReplicas == 9
			}
		}
		return false
	})
	a.remove("pc", "games", "fresh")
	eventually(t, "the tombstone removes it", func() bool { return len(v.Fleets(nil)) == 5 })
	assert.Equal(t, []fleetwatch.ChangeKind{fleetwatch.Added, fleetwatch.Modified, fleetwatch.Removed}, log.kinds("fresh"))
}

func TestPickSkipsStaleClustersAndFollowsThePolicy(t *testing.T) {
	a := newAPI(t)
	seed(a)
	log := &changeLog{}
	v := startWatch(t, a.store.Client(), log)
	v142 := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/version": "1.42"})

	// Picks are drawn in proportion to capacity, never from a stale
	// cluster: old/games/ranked has the most ready replicas (9).
	picked := func(p fleetwatch.Policy) map[string]int {
		counts := map[string]int{}
		for range 400 {
			f, err := v.Pick(v142, p)
			require.NoError(t, err)
			counts[f.Cluster]++
		}
		return counts
	}
	byReady := picked(fleetwatch.Policy{})
	assert.ElementsMatch(t, []string{"pc", "ps5"}, slices.Collect(maps.Keys(byReady)), "%v", byReady)
	assert.Greater(t, byReady["pc"], byReady["ps5"]/2, "8 ready against 6: %v", byReady)
	byRooms := picked(fleetwatch.Policy{Counter: "rooms"})
	assert.ElementsMatch(t, []string{"pc", "ps5"}, slices.Collect(maps.Keys(byRooms)), "%v", byRooms)
	assert.Greater(t, byRooms["ps5"], byRooms["pc"], "5 rooms free against 3: %v", byRooms)

	_, err := v.Pick(labels.SelectorFromSet(labels.Set{"platform": "switch"}), fleetwatch.Policy{})
	assert.ErrorIs(t, err, fleetwatch.ErrNoFleet)

	// A heartbeat turns a cluster fresh again, with no fleet changing,
	// and the watch says so.
	a.heartbeat("old", 0)
	eventually(t, "the old cluster fresh again", func() bool {
		f, err := v.Pick(v142, fleetwatch.Policy{})
		return err == nil && f.Cluster == "old"
	})
	eventually(t, "ClusterFresh old", func() bool { return slices.Contains(log.clusterChanges(), "ClusterFresh old") })

	// A cluster whose heartbeat ages past StaleAfter turns stale with
	// nothing written: the watch judges staleness as time passes.
	a.heartbeat("ps5", fleetapi.DefaultStaleAfter-time.Second)
	eventually(t, "ClusterStale ps5", func() bool { return slices.Contains(log.clusterChanges(), "ClusterStale ps5") })
	assert.Equal(t, []string{"ClusterFresh old", "ClusterStale ps5"}, log.clusterChanges())
}

// TestWatchRecoversFromInterruptions: the listener's connection is cut,
// and the emulator's documents are reset; the view follows both.
func TestWatchRecoversFromInterruptions(t *testing.T) {
	a := newAPI(t)
	seed(a)
	proxy := newFaultProxy(t, emulator.Host(t, emulator.FirestoreHostEnv))
	client, err := firestore.NewClient(context.Background(), a.project, emulator.EmulatorOptions(proxy.addr())...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	v := startWatch(t, client, &changeLog{})
	require.Len(t, v.Fleets(nil), 5)

	proxy.setDown(true)
	a.put(fleetSpec{"pc", "games", "during-outage", nil, 3, 3, 3})
	letTimePass(time.Second)
	proxy.setDown(false)
	eventually(t, "the write made during the outage", func() bool { return len(v.Fleets(nil)) == 6 })

	// Reset the emulator's documents under the listener.
	req, err := http.NewRequest(http.MethodDelete, "http://"+emulator.Host(t, emulator.FirestoreHostEnv)+
		"/emulator/v1/projects/"+a.project+"/databases/(default)/documents", nil)
	require.NoError(t, err)
	resp, err := testhttp.Client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	eventually(t, "the reset empties the view", func() bool { return len(v.Fleets(nil)) == 0 })
	a.put(fleetSpec{"pc", "games", "after-reset", nil, 3, 3, 3})
	eventually(t, "a write after the reset", func() bool { return len(v.Fleets(nil)) == 1 })
}

// TestWatchFailsFastWhenPermissionIsDenied: a client that Firestore's
// security rules refuse gets the PermissionDenied from Watch at once,
// where it used to retry forever, silently.
func TestWatchFailsFastWhenPermissionIsDenied(t *testing.T) {
	project := emulator.ProjectID(t)
	host := emulator.Host(t, emulator.FirestoreHostEnv)
	rules := `{"rules":{"files":[{"content":"rules_version = '2';\nservice cloud.firestore {\n  match /databases/{db}/documents/{doc=**} {\n    allow read, write: if false;\n  }\n}"}]}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://"+host+"/emulator/v1/projects/"+project+":securityRules", strings.NewReader(rules))
	require.NoError(t, err)
	resp, err := testhttp.Client.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "setting the rules: %s", body)

	// A client without the emulator's owner credentials, as a user's
	// would be: the rules apply to it.
	conn, err := grpc.NewClient(host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	client := emulator.Firestore(t, project, option.WithGRPCConn(conn))
	start := time.Now()
	_, err = fleetwatch.Watch(t.Context(), client, fleetwatch.Options{StartTimeout: time.Minute})
	require.Error(t, err)
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	assert.Less(t, time.Since(start), 10*time.Second, "at once, not after the start timeout")
}

// TestClosingTheClientEndsTheWatch: a watch whose Firestore client is
// closed ends, saying so, rather than retrying a client that cannot work.
func TestClosingTheClientEndsTheWatch(t *testing.T) {
	a := newAPI(t)
	seed(a)
	client, err := firestore.NewClient(context.Background(), a.project)
	require.NoError(t, err)
	v, err := fleetwatch.Watch(t.Context(), client, fleetwatch.Options{})
	require.NoError(t, err)
	require.NoError(t, client.Close())
	select {
	case <-v.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watch goes on with a closed client")
	}
	assert.ErrorContains(t, v.Err(), "the Firestore client was closed")
}
