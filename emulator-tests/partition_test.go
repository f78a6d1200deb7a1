package emulatortests

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
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
