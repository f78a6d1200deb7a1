package emulatortests

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
	"github.com/fleetcast/fleetcast/internal/testenv/watchtest"
	"github.com/fleetcast/fleetcast/logging"
)

// TestAPartitionedQueryFunctionServesItsShare: QueryFleets deployed with
// VIEW_CLUSTERS=pc,ps5 — one partition of a deployment whose view would
// not fit one instance — answers from those clusters' fleets alone, read
// through the partition's "cluster in" queries on the emulator, keeps
// following them as they change, and refuses a request about another
// cluster with a 400 that says where to ask. A VIEW_CLUSTERS it cannot
// take keeps the function from starting, said in its answer and log.
func TestAPartitionedQueryFunctionServesItsShare(t *testing.T) {
	a := newAPI(t)
	for _, c := range []string{"pc", "ps5", "xbox"} {
		a.put(fleetSpec{cluster: c, ns: "games", name: "a", ready: 3, rooms: 1, slots: 1})
		a.heartbeat(c, 0)
	}
	host := emulator.Host(t, emulator.FirestoreHostEnv)
	fn, err := startFunctionTarget("QueryFleets", host, "GOOGLE_CLOUD_PROJECT="+a.project, "VIEW_CLUSTERS=ps5, pc", "MAX_STALENESS=0")
	require.NoError(t, err)
	t.Cleanup(fn.stop)
	get := func(path string) response {
		t.Helper()
		return a.doURL(strings.TrimSuffix(fn.url, "/"), http.MethodGet, path, nil)
	}
	type list struct {
		Items []struct{ Cluster, Name string }
	}
	fleets := func() []string {
		var out []string
		for _, f := range decode[list](t, get("/v1/fleets")).Items {
			out = append(out, f.Cluster+"/"+f.Name)
		}
		return out
	}
	assert.Equal(t, []string{"pc/a", "ps5/a"}, fleets(), "the first load")
	a.put(fleetSpec{cluster: "xbox", ns: "games", name: "b", ready: 1}, fleetSpec{cluster: "ps5", ns: "games", name: "b", ready: 1})
	assert.Equal(t, []string{"pc/a", "ps5/a", "ps5/b"}, fleets(), "a sync")
	var clusters []string
	for _, c := range decode[list](t, get("/v1/clusters")).Items {
		clusters = append(clusters, c.Cluster)
	}
	assert.Equal(t, []string{"pc", "ps5"}, clusters)

	for _, path := range []string{"/v1/fleets?cluster=xbox", "/v1/fleets/xbox/games/a", "/v1/clusters/xbox", "/v1/placements?cluster=xbox"} {
		r := get(path)
		assert.Equal(t, http.StatusBadRequest, r.status, path)
		assert.Contains(t, string(r.body), `cluster \"xbox\" is not in this instance's partition (clusters pc, ps5)`, path)
	}

	bad, err := startFunctionTarget("QueryFleets", host, "GOOGLE_CLOUD_PROJECT="+a.project, "VIEW_CLUSTERS=pc,pc")
	require.NoError(t, err)
	t.Cleanup(bad.stop)
	r := a.doURL(strings.TrimSuffix(bad.url, "/"), http.MethodGet, "/v1/fleets", nil)
	assert.Equal(t, http.StatusServiceUnavailable, r.status)
	reason := bad.logs.wait(t, "message", "QueryFleets cannot start", func([]map[string]any) bool { return true })
	assert.Contains(t, reason[0][logging.KeyError], "VIEW_CLUSTERS", "the reason is logged")
}

// TestTheMergedQueryFunctionOutlivesAPartition: QueryFleets deployed with
// PARTITIONS over two partitions' QueryFleets processes on the emulator
// (pc and ps5; xbox) streams every fleet as one watch. When xbox's
// process is killed mid-stream, the merged stream stays up: xbox is sent
// stale, and a change in pc still arrives. Started again on its address,
// xbox is a new instance, which cannot resume its stream: the merged
// stream restarts and sends the whole set, the change made to xbox while
// it was down included, with xbox fresh. Nothing is lost.
func TestTheMergedQueryFunctionOutlivesAPartition(t *testing.T) {
	a := newAPI(t)
	for _, c := range []string{"pc", "ps5", "xbox"} {
		a.put(fleetSpec{cluster: c, ns: "games", name: "a", ready: 3, rooms: 1, slots: 1})
		a.heartbeat(c, 0)
	}
	host := emulator.Host(t, emulator.FirestoreHostEnv)
	pc, err := startFunctionTarget("QueryFleets", host, "GOOGLE_CLOUD_PROJECT="+a.project, "VIEW_CLUSTERS=pc,ps5", "WATCH_POLL=50ms")
	require.NoError(t, err)
	t.Cleanup(pc.stop)
	xport, err := proc.FreePort()
	require.NoError(t, err)
	startXbox := func() *function {
		t.Helper()
		f, err := startServing("function QueryFleets (xbox)", functionBinary, xport, []string{"FUNCTION_TARGET=QueryFleets", "PORT=" + xport,
			"GOOGLE_CLOUD_PROJECT=" + a.project, emulator.FirestoreHostEnv + "=" + host, "VIEW_CLUSTERS=xbox", "WATCH_POLL=50ms"})
		require.NoError(t, err)
		t.Cleanup(f.stop)
		return f
	}
	xbox := startXbox()
	merged, err := startFunctionTarget("QueryFleets", host, "GOOGLE_CLOUD_PROJECT="+a.project,
		"PARTITIONS=pc,ps5="+pc.url+"; xbox="+xbox.url, "PARTITION_TIMEOUT=10s")
	require.NoError(t, err)
	t.Cleanup(merged.stop)

	st := watchtest.Open(t, strings.TrimSuffix(merged.url, "/"), "sse", url.Values{})
	defer st.Close()
	held := map[string]int64{}
	stale := map[string]bool{}
	until := func(what string, done func(watchtest.Event) bool) {
		t.Helper()
		t.Logf("waiting for %s", what) // shown with a failure: what never came
		for {
			e := st.Next(t)
			switch e.Kind {
			case "added", "modified":
				held[e.Name] = e.Ready
			case "removed":
				delete(held, e.Name)
			case "restart":
				clear(held)
			case "cluster":
				stale[e.Name] = e.Stale
			}
			if done(e) {
				return
			}
		}
	}
	until("the initial set", func(e watchtest.Event) bool { return e.Kind == "synced" })
	assert.Equal(t, map[string]int64{"pc/a": 3, "ps5/a": 3, "xbox/a": 3}, held)

	xbox.stop()
	until("xbox sent stale", func(e watchtest.Event) bool { return e.Kind == "cluster" && e.Name == "xbox" && e.Stale })
	a.put(fleetSpec{cluster: "pc", ns: "games", name: "b", ready: 5})
	until("pc's change while xbox is down", func(e watchtest.Event) bool { return e.Name == "pc/b" })
	a.put(fleetSpec{cluster: "xbox", ns: "games", name: "b", ready: 2})

	startXbox()
	until("the restart", func(e watchtest.Event) bool { return e.Kind == "restart" })
	until("the whole set again", func(e watchtest.Event) bool { return e.Kind == "synced" })
	assert.Equal(t, map[string]int64{"pc/a": 3, "ps5/a": 3, "xbox/a": 3, "pc/b": 5, "xbox/b": 2}, held, "nothing lost")
	assert.False(t, stale["xbox"], "xbox fresh again")
	down := merged.logs.matching("message", fleetapi.UnansweredMessage)
	require.NotEmpty(t, down, "the merged function logged the partition that did not answer")
	assert.Equal(t, xbox.url, down[0]["partition"])
}
