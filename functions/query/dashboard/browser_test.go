package dashboard_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetclient"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/browsertest"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
	"github.com/fleetcast/fleetcast/logging"
)

// world is an in-memory store behind a query instance, written as the
// ingest function would. While down, the instance's API answers 503.
type world struct {
	mem  *fleetapitest.Memory
	mu   sync.Mutex
	seq  int64
	url  string
	srv  *httptest.Server
	down atomic.Bool
	// held, while open, holds every /v1/watch request until it closes.
	held atomic.Pointer[chan struct{}]
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{mem: fleetapitest.NewMemory(time.Now)}
	svc := fleetapi.NewService(fleetapitest.Listening{Memory: w.mem}, fleetapi.Options{
		WatchPoll: 20 * time.Millisecond, StaleAfter: time.Minute, Heartbeat: time.Second,
	})
	h := query.NewHandler(svc, logging.New(io.Discard, logging.LevelWarning))
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w.down.Load() && strings.HasPrefix(r.URL.Path, "/v1/") {
			http.Error(rw, `{"error":{"code":503,"status":"UNAVAILABLE","message":"down for the test"}}`, http.StatusServiceUnavailable)
			return
		}
		if held := w.held.Load(); held != nil && r.URL.Path == "/v1/watch" {
			select {
			case <-*held:
			case <-r.Context().Done():
				return
			}
		}
		h.ServeHTTP(rw, r)
	}))
	t.Cleanup(w.srv.Close)
	w.url = w.srv.URL
	return w
}

// outage makes the instance answer 503 and breaks the open streams.
func (w *world) outage() {
	w.down.Store(true)
	w.srv.CloseClientConnections()
}

func (w *world) next() fleet.Version {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	return fleet.Version{Term: 1, Seq: w.seq}
}

// heartbeat writes a cluster's document, its heartbeat age old.
func (w *world) heartbeat(cluster string, fleets int64, age time.Duration) {
	at := time.Now().Add(-age)
	w.mem.PutCluster(fleet.ClusterDocument{
		Cluster: cluster, Labels: map[string]string{"region": "europe-west1"}, SnapshotVersion: w.next(), SnapshotParts: 1,
		IngestedAt: at, HeartbeatAt: at, FleetCount: fleets,
		Totals: fleet.DocStatus{Replicas: 10 * fleets, ReadyReplicas: 4 * fleets},
	})
}

// put writes a live fleet.
func (w *world) put(cluster, name, version string, ready int64) {
	k := fleet.Key{Cluster: cluster, Namespace: "games", Name: name}
	now := time.Now()
	w.mem.PutFleet(fleet.Document{
		Cluster: cluster, Namespace: "games", Name: name, Version: w.next(), DocID: k.DocID(), DocIDHash: fleet.IDHash(k.DocID()),
		UID:    "uid-" + name,
		Labels: map[string]string{"version": version, "platform": cluster},
		Spec:   &fleet.Spec{Replicas: 10},
		Status: &fleet.DocStatus{Replicas: 10, ReadyReplicas: ready, AllocatedReplicas: 10 - ready,
			Counters: map[string]fleet.DocAggregate{"rooms": {Count: 3, Capacity: 40, Available: 37}}},
		ObservedAt: now, IngestedAt: now, LagMillis: 12,
	})
}

// remove writes a fleet's tombstone.
func (w *world) remove(cluster, name string) {
	k := fleet.Key{Cluster: cluster, Namespace: "games", Name: name}
	now := time.Now()
	w.mem.PutFleet(*fleet.Tombstone(k, w.next(), fleet.Publisher{}, now, now, time.Hour))
}

// rowText is the JavaScript expression of the text of a fleet's cell col
// ("" when the row is not shown), parenthesized so that it compares as a
// whole (rowText(...) + ` === "9"`).
func rowText(id, col string) string {
	return fmt.Sprintf(`((document.querySelector('tr[data-id=%q] [data-col=%q]') || {}).textContent || "")`, id, col)
}

// TestDashboardFollowsTheStream: the page loads with no console error,
// shows the clusters and the fleets the filter in its address names,
// updates a row in place (no reload) when the fleet changes, drops a
// deleted fleet, marks a stale cluster, shows the API's error for a bad
// selector, and answers which versions run where.
func TestDashboardFollowsTheStream(t *testing.T) {
	w := newWorld(t)
	w.heartbeat("pc", 2, 0)
	w.heartbeat("ps5", 1, 0)
	w.put("pc", "ranked", "1.42", 3)
	w.put("pc", "casual", "1.43", 5)
	w.put("ps5", "ranked", "1.42", 7)

	b := browsertest.Start(t, 1400, 1000)
	q := url.Values{"selector": {"version in (1.42,1.43)"}, "cluster": {"pc"}}
	b.Do(t, chromedp.Navigate(w.url+"/?"+q.Encode()))
	b.WaitFor(t, "the initial set", `document.body.dataset.synced === "true" && document.querySelectorAll("#fleets tbody tr").length === 2`)
	b.Do(t, chromedp.Evaluate[chromedp.Void](`window.loadedOnce = true`))

	// The address restored the filter.
	assert.Equal(t, "version in (1.42,1.43)", browsertest.Eval[string](t, b, `document.getElementById("selector").value`))
	assert.Equal(t, "pc", browsertest.Eval[string](t, b, `document.getElementById("cluster").value`))
	assert.Equal(t, []string{"pc/games/casual", "pc/games/ranked"},
		browsertest.Eval[[]string](t, b, `[...document.querySelectorAll("#fleets tbody tr")].map(r => r.dataset.id)`))
	assert.Equal(t, "3", browsertest.Eval[string](t, b, rowText("pc/games/ranked", "ready")))
	assert.Equal(t, "Live", browsertest.Eval[string](t, b, `document.getElementById("conn").textContent`))

	// A status change updates the row in place.
	w.put("pc", "ranked", "1.42", 9)
	b.WaitFor(t, "the row updated", rowText("pc/games/ranked", "ready")+` === "9"`)
	assert.True(t, browsertest.Eval[bool](t, b, `window.loadedOnce === true`), "no reload")

	// A deleted fleet disappears.
	w.remove("pc", "casual")
	b.WaitFor(t, "the row gone", `!document.querySelector('tr[data-id="pc/games/casual"]')`)

	// A cluster whose heartbeat ages past StaleAfter is marked, and so
	// are its fleets, which stay shown.
	w.heartbeat("pc", 2, 2*time.Minute)
	b.WaitFor(t, "the stale mark", `document.querySelector('#clusters tr[data-cluster="pc"]')?.dataset.stale === "true"`)
	b.WaitFor(t, "its fleets marked", rowText("pc/games/ranked", "state")+` === "stale"`)
	w.heartbeat("pc", 2, 0)
	b.WaitFor(t, "fresh again", `document.querySelector('#clusters tr[data-cluster="pc"]')?.dataset.stale === "false"`)
	b.WaitFor(t, "its fleets unmarked", rowText("pc/games/ranked", "state")+` === "ok"`)

	// Which versions run where: every cluster's live fleets.
	b.WaitFor(t, "the versions", `document.querySelector('#versions tr[data-value="1.42"] [data-col=fleets]')?.textContent === "2"`)
	assert.Equal(t, 1, browsertest.Eval[int](t, b, `document.querySelectorAll("#versions tbody tr").length`), "1.43 left with casual")
	require.Empty(t, b.Errors(), "the page reported errors")

	// A bad selector: the API's error, where it was typed.
	b.Do(t,
		chromedp.SetValue(chromedp.ID("selector"), "version in (1.42"),
		chromedp.Click(chromedp.CSS(`#filter button[type=submit]`)),
	)
	b.WaitFor(t, "the selector's error", `!document.getElementById("selector-error").hidden`)
	msg := browsertest.Eval[string](t, b, `document.getElementById("selector-error").textContent`)
	assert.Contains(t, msg, "selector")
	assert.Equal(t, "true", browsertest.Eval[string](t, b, `document.getElementById("selector").getAttribute("aria-invalid")`))
	assert.Contains(t, browsertest.Eval[string](t, b, `location.search`), "selector=version+in+%281.42")
	errs := b.Errors()
	require.Len(t, errs, 1, "the browser logs the refused request, and nothing else: %v", errs)
	assert.Contains(t, errs[0], "status of 400")
}

// TestDashboardReconnectsByItself: a broken stream and an instance that
// refuses for a while show as disconnected; the page comes back by itself,
// with what changed meanwhile, and says so.
func TestDashboardReconnectsByItself(t *testing.T) {
	w := newWorld(t)
	w.heartbeat("pc", 1, 0)
	w.put("pc", "ranked", "1.42", 3)
	b := browsertest.Start(t, 1400, 1000)
	b.Do(t, chromedp.Navigate(w.url+"/"))
	b.WaitFor(t, "live", `document.getElementById("conn").dataset.state === "live"`)

	w.outage()
	b.WaitFor(t, "shown disconnected", `document.getElementById("conn").dataset.state === "disconnected"`)
	assert.Contains(t, browsertest.Eval[string](t, b, `document.getElementById("conn").textContent`), "Reconnecting in")
	w.put("pc", "ranked", "1.42", 6) // while the page cannot hear
	w.down.Store(false)
	b.WaitFor(t, "live again", `document.getElementById("conn").dataset.state === "live"`)
	b.WaitFor(t, "what changed meanwhile", rowText("pc/games/ranked", "ready")+` === "6"`)
	for _, e := range b.Errors() {
		// What the browser logs of the broken stream and of the refusals;
		// a request in flight when the connections close is reset, or,
		// closed before a byte of its answer, empty.
		assert.Regexp(t, `/v1/(watch\?|labels/)\S* Failed to load resource: (net::ERR_INCOMPLETE_CHUNKED_ENCODING|net::ERR_CONNECTION_RESET|net::ERR_EMPTY_RESPONSE|the server responded with a status of 503)`, e)
	}
}

// TestDashboardByKeyboard: the sort buttons work from the keyboard and say
// their order; the address keeps the sort; changes are announced in the
// live region.
func TestDashboardByKeyboard(t *testing.T) {
	w := newWorld(t)
	w.heartbeat("pc", 3, 0)
	w.put("pc", "a", "1.42", 9)
	w.put("pc", "b", "1.42", 1)
	w.put("pc", "c", "1.42", 5)
	b := browsertest.Start(t, 1400, 1000)
	b.Do(t, chromedp.Navigate(w.url+"/"))
	b.WaitFor(t, "the set", `document.body.dataset.synced === "true" && document.querySelectorAll("#fleets tbody tr").length === 3`)
	order := `[...document.querySelectorAll("#fleets tbody tr")].map(r => r.dataset.id.split("/")[2]).join("")`
	assert.Equal(t, "abc", browsertest.Eval[string](t, b, order))

	b.Do(t, chromedp.SendKeys(chromedp.CSS(`th[data-sort="ready"] button`), "\r"))
	b.WaitFor(t, "sorted by ready", order+` === "bca"`)
	assert.Equal(t, "ascending", browsertest.Eval[string](t, b, `document.querySelector('th[data-sort="ready"]').getAttribute("aria-sort")`))
	b.Do(t, chromedp.SendKeys(chromedp.CSS(`th[data-sort="ready"] button`), "\r"))
	b.WaitFor(t, "descending", order+` === "acb"`)
	assert.Equal(t, "?sort=ready&desc=1", browsertest.Eval[string](t, b, `location.search`))

	w.put("pc", "b", "1.42", 7)
	b.WaitFor(t, "the change announced", `document.getElementById("announce").textContent.includes("1 changed")`)
	require.Empty(t, b.Errors())

	// The address restores the sort.
	b.Do(t, chromedp.Reload())
	b.WaitFor(t, "sorted after a reload", order+` === "abc"`) // a 9, b 7, c 5
	assert.True(t, strings.HasPrefix(browsertest.Eval[string](t, b, `document.querySelector('th[data-sort="ready"]').getAttribute("aria-sort")`), "desc"))
}

// TestDashboardShowsRolloutsAndAutoscalers: the rollout column says
// rolling with the new and old sets' game servers, then complete, and a
// dash while it is unknown; the autoscaler column shows each autoscaler's
// policy and desired replicas, and warns when several target one fleet.
func TestDashboardShowsRolloutsAndAutoscalers(t *testing.T) {
	w := newWorld(t)
	w.heartbeat("pc", 2, 0)
	w.put("pc", "plain", "1.42", 3)
	scaler := fleet.Autoscaler{Name: "buffer", Policy: fleet.AutoscalerPolicy{Type: "Buffer", BufferSize: "20%", MaxReplicas: 40}, SyncSeconds: 30,
		Status: fleet.AutoscalerStatus{CurrentReplicas: 10, DesiredReplicas: 12, AbleToScale: true}}
	rolling := func(sets []fleet.GameServerSet, scalers ...fleet.Autoscaler) {
		k := fleet.Key{Cluster: "pc", Namespace: "games", Name: "rolling"}
		r := fleet.RolloutOf(10, sets)
		now := time.Now()
		w.mem.PutFleet(fleet.Document{
			Cluster: "pc", Namespace: "games", Name: "rolling", Version: w.next(), DocID: k.DocID(), DocIDHash: fleet.IDHash(k.DocID()),
			UID: "uid-rolling", Labels: map[string]string{"version": "1.43"}, Spec: &fleet.Spec{Replicas: 10},
			Status: &fleet.DocStatus{Replicas: 10, ReadyReplicas: 8, AllocatedReplicas: 2}, Rollout: &r, Autoscalers: scalers,
			ObservedAt: now, IngestedAt: now,
		})
	}
	rolling([]fleet.GameServerSet{{Name: "rolling-a", Replicas: 6, ReadyReplicas: 6}, {Name: "rolling-b", Current: true, Replicas: 4, ReadyReplicas: 2, AllocatedReplicas: 2}}, scaler)

	b := browsertest.Start(t, 1600, 1000)
	b.Do(t, chromedp.Navigate(w.url+"/"))
	b.WaitFor(t, "the initial set", `document.body.dataset.synced === "true" && document.querySelectorAll("#fleets tbody tr").length === 2`)
	assert.Equal(t, "rolling 4 of 10 new · 6 old", browsertest.Eval[string](t, b, rowText("pc/games/rolling", "rollout")))
	assert.Equal(t, "Buffer 20%: 12 desired of 10", browsertest.Eval[string](t, b, rowText("pc/games/rolling", "autoscalers")))
	assert.Equal(t, "—", browsertest.Eval[string](t, b, rowText("pc/games/plain", "rollout")), "unknown, not in progress")
	assert.Equal(t, "—", browsertest.Eval[string](t, b, rowText("pc/games/plain", "autoscalers")))

	limited := scaler
	limited.Name, limited.Policy, limited.Status.ScalingLimited = "rooms", fleet.AutoscalerPolicy{Type: "Counter", Key: "rooms", BufferSize: "5"}, true
	rolling([]fleet.GameServerSet{{Name: "rolling-a"}, {Name: "rolling-b", Current: true, Replicas: 10, ReadyReplicas: 8, AllocatedReplicas: 2}}, scaler, limited)
	b.WaitFor(t, "the rollout complete", rowText("pc/games/rolling", "rollout")+` === "complete"`)
	assert.Equal(t, "2 autoscalersBuffer 20%: 12 desired of 10Counter 5 rooms: 12 desired of 10 limited",
		browsertest.Eval[string](t, b, rowText("pc/games/rolling", "autoscalers")))
	require.Empty(t, b.Errors(), "the page reported errors")
}

// TestDashboardSurvivesOneClustersData: a cluster whose fleet claims
// int64's most ready game servers, and a stored fleet no answer can hold
// (an autoscaler's last scale after year 9999), break neither the page nor
// the other clusters' rows: the page loads with no error, shows every
// fleet but the unanswerable one, and its summary saturates at the most a
// page can count exactly instead of showing a figure that lost its digits.
func TestDashboardSurvivesOneClustersData(t *testing.T) {
	w := newWorld(t)
	w.heartbeat("pc", 1, 0)
	w.heartbeat("liar", 2, 0)
	w.put("pc", "honest", "1.42", 3)
	k := fleet.Key{Cluster: "liar", Namespace: "games", Name: "huge"}
	now := time.Now()
	w.mem.PutFleet(fleet.Document{Cluster: "liar", Namespace: "games", Name: "huge", Version: w.next(), DocID: k.DocID(), DocIDHash: fleet.IDHash(k.DocID()),
		UID: "u", Labels: map[string]string{"version": "1.42"}, Spec: &fleet.Spec{Replicas: math.MaxInt64},
		Status:     &fleet.DocStatus{Replicas: math.MaxInt64, ReadyReplicas: math.MaxInt64},
		ObservedAt: now, IngestedAt: now})
	bad := fleet.Key{Cluster: "liar", Namespace: "games", Name: "far-future"}
	w.mem.PutFleet(fleet.Document{Cluster: "liar", Namespace: "games", Name: "far-future", Version: w.next(), DocID: bad.DocID(), DocIDHash: fleet.IDHash(bad.DocID()),
		UID: "u", Spec: &fleet.Spec{Replicas: 1}, Status: &fleet.DocStatus{Replicas: 1, ReadyReplicas: 1},
		Autoscalers: []fleet.Autoscaler{{Name: "a", Status: fleet.AutoscalerStatus{LastScaleTime: fleet.MaxMicros + 1}}},
		ObservedAt:  now, IngestedAt: now})

	b := browsertest.Start(t, 1400, 1000)
	b.Do(t, chromedp.Navigate(w.url+"/"))
	b.WaitFor(t, "the set", `document.body.dataset.synced === "true" && document.querySelectorAll("#fleets tbody tr").length === 2`)
	assert.Equal(t, []string{"liar/games/huge", "pc/games/honest"},
		browsertest.Eval[[]string](t, b, `[...document.querySelectorAll("#fleets tbody tr")].map(r => r.dataset.id).sort()`))
	assert.Contains(t, browsertest.Eval[string](t, b, `document.getElementById("summary").textContent`),
		"9,007,199,254,740,991 ready replicas", "saturated: the honest cluster's 3 are not lost in a figure past 2^53")
	require.Empty(t, b.Errors(), "the page reported errors")
}

// TestDashboardDrawsTheFirstPageBeforeTheWholeSet: the first page of the
// default order, its count and the clusters' totals are drawn from two
// small answers while the stream has sent nothing yet (here it is held);
// the whole set, once it comes, replaces them, and pages beyond the first
// open.
func TestDashboardDrawsTheFirstPageBeforeTheWholeSet(t *testing.T) {
	w := newWorld(t)
	w.heartbeat("pc", 150, 0)
	for i := range 150 {
		w.put("pc", fmt.Sprintf("f%03d", i), "1.42", int64(i%10))
	}
	held := make(chan struct{})
	w.held.Store(&held)

	b := browsertest.Start(t, 1400, 1000)
	b.Do(t, chromedp.Navigate(w.url+"/"))
	b.WaitFor(t, "the first page, with the stream held", `document.querySelectorAll("#fleets tbody tr").length === 100`)
	assert.Equal(t, "false", browsertest.Eval[string](t, b, `document.body.dataset.synced`), "drawn before the stream's set")
	assert.Equal(t, "f000", browsertest.Eval[string](t, b, rowText("pc/games/f000", "name")), "the first of the default order")
	assert.Contains(t, browsertest.Eval[string](t, b, `document.getElementById("summary").textContent`), "150 fleets matching")
	assert.Contains(t, browsertest.Eval[string](t, b, `document.getElementById("page-info").textContent`), "of 150, page 1 of 2")
	assert.Equal(t, "600", browsertest.Eval[string](t, b,
		`document.querySelector('#clusters tr[data-cluster="pc"] td:nth-of-type(4)').textContent`), "the cluster's ready total")
	assert.True(t, browsertest.Eval[bool](t, b, `document.getElementById("next").disabled`), "other pages wait for the whole set")
	assert.Equal(t, 1.0, browsertest.Eval[float64](t, b, `performance.getEntriesByName("fleetcast:first-render").length`))
	assert.Zero(t, browsertest.Eval[float64](t, b, `performance.getEntriesByName("fleetcast:whole-set").length`))

	close(held)
	b.WaitFor(t, "the whole set", `document.body.dataset.synced === "true" && document.body.dataset.fleets === "150"`)
	assert.Contains(t, browsertest.Eval[string](t, b, `document.getElementById("summary").textContent`), "ready replicas")
	assert.False(t, browsertest.Eval[bool](t, b, `document.getElementById("next").disabled`))
	assert.Equal(t, 1.0, browsertest.Eval[float64](t, b, `performance.getEntriesByName("fleetcast:whole-set").length`))
	assert.Empty(t, b.Errors(), "the page reported errors")
}

// TestDashboardOverPartitions: the dashboard served by a query service
// over two partitions (pc; xbox) of the world's store shows both
// partitions' fleets live. While partition xbox is down (its stream
// broken, its requests refused), the page stays live, marks xbox stale
// and keeps showing pc's changes; once xbox is back, what changed there
// meanwhile shows and xbox is fresh again.
func TestDashboardOverPartitions(t *testing.T) {
	w := newWorld(t)
	log := logging.New(io.Discard, logging.LevelWarning)
	var xboxDown atomic.Bool
	partition := func(down *atomic.Bool, clusters ...string) *httptest.Server {
		svc := fleetapi.NewService(fleetapitest.Listening{Memory: w.mem}, fleetapi.Options{
			WatchPoll: 20 * time.Millisecond, StaleAfter: time.Minute, Heartbeat: time.Second, Clusters: clusters,
		})
		h := query.NewHandler(svc, log)
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if down != nil && down.Load() {
				http.Error(rw, `{"error":{"code":503,"status":"UNAVAILABLE","message":"down for the test"}}`, http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(rw, r)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	pc, xbox := partition(nil, "pc"), partition(&xboxDown, "xbox")
	cfg, err := query.ConfigFromEnv(func(k string) string {
		return map[string]string{"PARTITIONS": "pc=" + pc.URL + "; xbox=" + xbox.URL, "PARTITION_TIMEOUT": "10s"}[k]
	})
	require.NoError(t, err)
	p, err := query.NewPartitions(t.Context(), cfg, fleetclient.Auth{}, log)
	require.NoError(t, err)
	front := httptest.NewServer(query.NewPartitionsHandler(p, log))
	t.Cleanup(front.Close)

	w.heartbeat("pc", 1, 0)
	w.heartbeat("xbox", 1, 0)
	w.put("pc", "ranked", "1.42", 3)
	w.put("xbox", "ranked", "1.42", 4)
	b := browsertest.Start(t, 1400, 1000)
	b.Do(t, chromedp.Navigate(front.URL+"/"))
	b.WaitFor(t, "both partitions' fleets", `document.body.dataset.synced === "true" && document.querySelectorAll("#fleets tbody tr").length === 2`)
	b.WaitFor(t, "live", `document.getElementById("conn").dataset.state === "live"`)

	xboxDown.Store(true)
	xbox.CloseClientConnections()
	b.WaitFor(t, "xbox stale", `document.querySelector('#clusters tr[data-cluster="xbox"]')?.dataset.stale === "true"`)
	w.put("pc", "ranked", "1.42", 8)
	b.WaitFor(t, "pc's change shows meanwhile", rowText("pc/games/ranked", "ready")+` === "8"`)
	assert.Equal(t, "live", browsertest.Eval[string](t, b, `document.getElementById("conn").dataset.state`), "the merged stream stays up")
	w.put("xbox", "ranked", "1.42", 1) // while xbox cannot be heard
	xboxDown.Store(false)
	b.WaitFor(t, "xbox's change once it is back", rowText("xbox/games/ranked", "ready")+` === "1"`)
	b.WaitFor(t, "xbox fresh again", `document.querySelector('#clusters tr[data-cluster="xbox"]')?.dataset.stale === "false"`)
	for _, e := range b.Errors() {
		// The label values asked while xbox was down are answered (its
		// clusters named unavailable): nothing else may fail.
		t.Errorf("the page reported an error: %s", e)
	}
}
