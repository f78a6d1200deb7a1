package emulatortests

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/internal/emulator"
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
	v := startWatch(t, a.store.Client(), &changeLog{})
	v142 := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/version": "1.42"})

	f, err := v.Pick(v142, fleetwatch.Policy{})
	require.NoError(t, err)
	assert.Equal(t, "pc", f.Cluster, "old/games/ranked has more ready replicas (9) but its cluster is stale")
	assert.Equal(t, int64(8), f.ReadyReplicas)

	f, err = v.Pick(v142, fleetwatch.Policy{Counter: "rooms"})
	require.NoError(t, err)
	assert.Equal(t, "ps5", f.Cluster, "5 rooms free beats 3")

	_, err = v.Pick(labels.SelectorFromSet(labels.Set{"platform": "switch"}), fleetwatch.Policy{})
	assert.ErrorIs(t, err, fleetwatch.ErrNoFleet)

	// A heartbeat turns a cluster fresh again, with no fleet changing.
	a.heartbeat("old", 0)
	eventually(t, "the old cluster fresh again", func() bool {
		f, err := v.Pick(v142, fleetwatch.Policy{})
		return err == nil && f.Cluster == "old"
	})
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
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	eventually(t, "the reset empties the view", func() bool { return len(v.Fleets(nil)) == 0 })
	a.put(fleetSpec{"pc", "games", "after-reset", nil, 3, 3, 3})
	eventually(t, "a write after the reset", func() bool { return len(v.Fleets(nil)) == 1 })
}
