package emulatortests

import (
	"bytes"
	"cloud.google.com/go/firestore"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/schemas"
	"github.com/fleetcast/fleetcast/version"
)

// api is the query API served in-process over a fresh Firestore project,
// with every response checked against the OpenAPI document.
type api struct {
	tb      testing.TB
	project string
	fs      *firestore.Client
	store   *firestoredb.Store
	srv     *httptest.Server
	seq     int64
	live    map[fleet.Key]int64 // seq of each live fleet's last upsert
}

var (
	openAPIOnce      sync.Once
	openAPIValidator validator.Validator
	openAPIErr       error
)

func apiValidator(tb testing.TB) validator.Validator {
	tb.Helper()
	openAPIOnce.Do(func() {
		doc, err := libopenapi.NewDocument(schemas.QueryAPIOpenAPI)
		if err != nil {
			openAPIErr = err
			return
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			openAPIErr = fmt.Errorf("openapi: %v", errs)
			return
		}
		if ok, verrs := v.ValidateDocument(); !ok {
			openAPIErr = fmt.Errorf("query_api.openapi.yaml is not a valid OpenAPI document: %v", verrs)
			return
		}
		openAPIValidator = v
	})
	require.NoError(tb, openAPIErr)
	return openAPIValidator
}

func newAPI(tb testing.TB) *api {
	tb.Helper()
	project := emulator.ProjectID(tb)
	fs := emulator.Firestore(tb, project)
	store := firestoredb.New(fs, time.Hour, time.Now)
	h := query.NewHandler(fleetapi.NewService(store, fleetapi.Options{MaxStaleness: -1, ClusterRefresh: -1}), logging.New(io.Discard, logging.LevelWarning))
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return &api{tb: tb, project: project, fs: fs, store: store, srv: srv, seq: 1, live: map[fleet.Key]int64{}}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request and validates the response against the OpenAPI
// document (after undoing gzip).
func (a *api) do(method, path string, header map[string]string) response {
	a.tb.Helper()
	return a.doAt(a.srv, method, path, header)
}

// doAt is do on the instance srv.
func (a *api) doAt(srv *httptest.Server, method, path string, header map[string]string) response {
	a.tb.Helper()
	return a.doURL(srv.URL, method, path, header)
}

// doURL is do on the instance serving at base.
func (a *api) doURL(base, method, path string, header map[string]string) response {
	a.tb.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	require.NoError(a.tb, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	require.NoError(a.tb, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(a.tb, err)
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		require.NoError(a.tb, err)
		body, err = io.ReadAll(zr)
		require.NoError(a.tb, err)
	}
	if method == http.MethodGet && resp.StatusCode != http.StatusNotFound || strings.HasPrefix(path, "/v1/fleets/") {
		check := &http.Response{StatusCode: resp.StatusCode, Header: resp.Header.Clone(), Body: io.NopCloser(bytes.NewReader(body)), Request: req}
		check.Header.Del("Content-Encoding")
		if resp.StatusCode != http.StatusMethodNotAllowed {
			ok, errs := apiValidator(a.tb).ValidateHttpResponse(req, check)
			if !ok {
				for _, e := range errs {
					a.tb.Errorf("%s %s → %d does not match the OpenAPI document: %s (%s) %s", method, path, resp.StatusCode, e.Message, e.Reason, body)
				}
			}
		}
	}
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

func (a *api) get(path string) response {
	a.tb.Helper()
	return a.do(http.MethodGet, path, nil)
}

func decode[T any](tb testing.TB, r response) T {
	tb.Helper()
	var v T
	require.NoError(tb, json.Unmarshal(r.body, &v), string(r.body))
	return v
}

type fleetSpec struct {
	cluster, ns, name string
	labels            map[string]string
	ready             int64
	rooms             int64 // available rooms: capacity 10, count 10-rooms
	slots             int64 // available list capacity
}

// put stores fleets through the ingest core, as the function would.
func (a *api) put(specs ...fleetSpec) {
	a.tb.Helper()
	for _, s := range specs {
		a.seq++
		ev := fleet.Event{
			SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: s.cluster,
			Version: fleet.Version{Term: 1, Seq: a.seq}, ObservedAt: fleet.MicrosOf(time.Now()),
			Publisher: fleet.Publisher{ID: "p"}, Namespace: s.ns, Name: s.name,
			Fleet: fleet.State{UID: "u-" + s.name, Labels: s.labels, Spec: fleet.Spec{Replicas: 10, Scheduling: "Packed"},
				Status: fleet.Status{Replicas: 10, ReadyReplicas: s.ready, AllocatedReplicas: 10 - s.ready,
					Counters: map[string]fleet.Aggregate{"rooms": {Count: 10 - s.rooms, Capacity: 10}},
					Lists:    map[string]fleet.Aggregate{"slots": {Count: 20 - s.slots, Capacity: 20}}}},
		}
		_, err := a.store.Apply(a.tb.Context(), ev)
		require.NoError(a.tb, err)
		a.live[ev.Key()] = a.seq
	}
}

func (a *api) remove(cluster, ns, name string) {
	a.tb.Helper()
	a.seq++
	delete(a.live, fleet.Key{Cluster: cluster, Namespace: ns, Name: name})
	_, err := a.store.Apply(a.tb.Context(), fleet.Event{
		SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindDelete, Cluster: cluster,
		Version: fleet.Version{Term: 1, Seq: a.seq}, ObservedAt: fleet.MicrosOf(time.Now()),
		Publisher: fleet.Publisher{ID: "p"}, Namespace: ns, Name: name,
	})
	require.NoError(a.tb, err)
}

// heartbeat records a snapshot of cluster taken and ingested age ago,
// listing its live fleets as a publisher would.
func (a *api) heartbeat(cluster string, age time.Duration) {
	a.tb.Helper()
	a.heartbeatSkewed(cluster, age, 0)
}

// heartbeatSkewed records a snapshot of cluster ingested age ago by a
// publisher whose clock is skew ahead of the ingest function's.
func (a *api) heartbeatSkewed(cluster string, age, skew time.Duration) {
	a.tb.Helper()
	a.seq++
	var entries []fleet.SnapshotEntry
	for k, seq := range a.live {
		if k.Cluster == cluster {
			entries = append(entries, fleet.SnapshotEntry{Namespace: k.Namespace, Name: k.Name, Version: fleet.Version{Term: 1, Seq: seq}})
		}
	}
	part := fleet.SplitSnapshot(entries, fleet.DefaultSnapshotPartBytes)[0]
	part.FleetCount = int64(len(entries))
	part.Totals = fleet.Status{
		Counters: map[string]fleet.Aggregate{"rooms": {Capacity: 10 * part.FleetCount}},
		Lists:    map[string]fleet.Aggregate{"slots": {Capacity: 20 * part.FleetCount}},
	}
	part.ClusterLabels = map[string]string{"platform": cluster}
	ingestedAt := time.Now().Add(-age)
	store := firestoredb.New(a.fs, time.Hour, func() time.Time { return ingestedAt })
	_, err := store.Apply(a.tb.Context(), fleet.Event{
		SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindSnapshot, Cluster: cluster,
		Version: fleet.Version{Term: 1, Seq: a.seq}, ObservedAt: fleet.MicrosOf(ingestedAt.Add(skew)),
		Publisher: fleet.Publisher{ID: "p", Version: "test"}, Snapshot: part,
	})
	require.NoError(a.tb, err)
}

func names(l queryFleetList) []string {
	var out []string
	for _, f := range l.Items {
		out = append(out, f.Cluster+"/"+f.Namespace+"/"+f.Name)
	}
	return out
}

type queryFleetList struct {
	Items []struct {
		Cluster, Namespace, Name string
		ReadyReplicas            int64
		Labels                   map[string]string
		Stale                    bool
	} `json:"items"`
	NextPageToken string `json:"nextPageToken"`
	TotalSize     int    `json:"totalSize"`
}

// seed is a small world: two healthy clusters and a stale one.
func seed(a *api) {
	a.heartbeat("pc", 0)
	a.heartbeat("ps5", 0)
	a.heartbeat("old", 10*time.Minute)
	v142 := map[string]string{"app.kubernetes.io/version": "1.42", "platform": "pc", "mode": "ranked"}
	v141 := map[string]string{"app.kubernetes.io/version": "1.41", "platform": "pc", "mode": "casual", "beta": "true"}
	a.put(
		fleetSpec{"pc", "games", "ranked", v142, 8, 3, 15},
		fleetSpec{"pc", "games", "casual", v141, 2, 9, 1},
		fleetSpec{"pc", "tools", "bots", map[string]string{"platform": "pc"}, 5, 0, 0},
		fleetSpec{"ps5", "games", "ranked", map[string]string{"app.kubernetes.io/version": "1.42", "platform": "ps5"}, 6, 5, 5},
		fleetSpec{"old", "games", "ranked", v142, 9, 9, 9},
		fleetSpec{"pc", "games", "gone", v142, 7, 7, 7},
	)
	a.remove("pc", "games", "gone")
}

func TestQueryFilters(t *testing.T) {
	a := newAPI(t)
	seed(a)
	tests := []struct {
		query string
		want  []string
	}{
		{"", []string{"pc/games/casual", "pc/games/ranked", "pc/tools/bots", "ps5/games/ranked"}},
		{"includeStale=true", []string{"old/games/ranked", "pc/games/casual", "pc/games/ranked", "pc/tools/bots", "ps5/games/ranked"}},
		{"cluster=ps5", []string{"ps5/games/ranked"}},
		{"cluster=ps5&cluster=pc&namespace=tools", []string{"pc/tools/bots"}},
		{"selector=" + url.QueryEscape("app.kubernetes.io/version=1.42"), []string{"pc/games/ranked", "ps5/games/ranked"}},
		{"selector=" + url.QueryEscape("app.kubernetes.io/version in (1.41,1.42),platform=pc"), []string{"pc/games/casual", "pc/games/ranked"}},
		{"selector=" + url.QueryEscape("!beta,platform==pc"), []string{"pc/games/ranked", "pc/tools/bots"}},
		{"selector=" + url.QueryEscape("mode notin (casual)"), []string{"pc/games/ranked", "pc/tools/bots", "ps5/games/ranked"}},
		{"selector=beta", []string{"pc/games/casual"}},
		{"minReady=6", []string{"pc/games/ranked", "ps5/games/ranked"}},
		{"counter=rooms&minAvailable=5", []string{"pc/games/casual", "ps5/games/ranked"}},
		{"list=slots&minListAvailable=10", []string{"pc/games/ranked"}},
		{"orderBy=ready", []string{"pc/games/ranked", "ps5/games/ranked", "pc/tools/bots", "pc/games/casual"}},
		{"orderBy=available&counter=rooms", []string{"pc/games/casual", "ps5/games/ranked", "pc/games/ranked", "pc/tools/bots"}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			r := a.get("/v1/fleets?" + tt.query)
			require.Equal(t, http.StatusOK, r.status, string(r.body))
			l := decode[queryFleetList](t, r)
			got := names(l)
			if !strings.Contains(tt.query, "orderBy") {
				sort.Strings(got)
			}
			assert.Equal(t, tt.want, got)
			assert.Equal(t, len(tt.want), l.TotalSize)
			for _, f := range l.Items {
				assert.Equal(t, f.Cluster == "old", f.Stale)
			}
		})
	}
}

func TestQueryPagination(t *testing.T) {
	a := newAPI(t)
	a.heartbeat("pc", 0)
	for i := range 23 {
		a.put(fleetSpec{"pc", "games", fmt.Sprintf("f%02d", i), nil, int64(i % 5), 1, 1})
	}
	for _, order := range []string{"name", "ready"} {
		t.Run(order, func(t *testing.T) {
			var all []string
			token := ""
			pages := 0
			for {
				q := "/v1/fleets?pageSize=7&orderBy=" + order
				if token != "" {
					q += "&pageToken=" + url.QueryEscape(token)
				}
				l := decode[queryFleetList](t, a.get(q))
				assert.Equal(t, 23, l.TotalSize)
				all = append(all, names(l)...)
				pages++
				if token = l.NextPageToken; token == "" {
					break
				}
				require.Less(t, pages, 10, "pagination must end")
			}
			assert.Equal(t, 4, pages)
			full := names(decode[queryFleetList](t, a.get("/v1/fleets?pageSize=1000&orderBy="+order)))
			assert.Equal(t, full, all, "the pages concatenate to the whole list: no duplicates, no gaps")
			uniq := slices.Compact(slices.Sorted(slices.Values(all)))
			assert.Len(t, uniq, 23)
		})
	}
	// A token belongs to its query.
	l := decode[queryFleetList](t, a.get("/v1/fleets?pageSize=7"))
	r := a.get("/v1/fleets?pageSize=7&orderBy=ready&pageToken=" + url.QueryEscape(l.NextPageToken))
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, string(r.body), `"param":"pageToken"`)
}

func TestQueryEndpoints(t *testing.T) {
	a := newAPI(t)
	seed(a)

	r := a.get("/v1/fleets/pc/games/ranked")
	require.Equal(t, http.StatusOK, r.status)
	f := decode[map[string]any](t, r)
	assert.Equal(t, "1.42", f["labels"].(map[string]any)["app.kubernetes.io/version"])
	assert.Equal(t, 3.0, f["counters"].(map[string]any)["rooms"].(map[string]any)["available"])
	assert.Equal(t, false, f["stale"])
	assert.Equal(t, true, decode[map[string]any](t, a.get("/v1/fleets/old/games/ranked"))["stale"])
	assert.Equal(t, http.StatusNotFound, a.get("/v1/fleets/pc/games/gone").status, "a tombstone is not a fleet")
	assert.Equal(t, http.StatusNotFound, a.get("/v1/fleets/pc/games/never").status)

	clusters := decode[struct {
		Items []struct {
			Cluster string
			Stale   bool
		}
	}](t, a.get("/v1/clusters"))
	require.Len(t, clusters.Items, 3)
	for _, c := range clusters.Items {
		assert.Equal(t, c.Cluster == "old", c.Stale, c.Cluster)
	}
	c := decode[map[string]any](t, a.get("/v1/clusters/ps5"))
	assert.Equal(t, "ps5", c["labels"].(map[string]any)["platform"])
	assert.Equal(t, http.StatusNotFound, a.get("/v1/clusters/nope").status)

	type labelValues struct {
		Key    string
		Values []struct {
			Value         string
			Fleets        int64
			ReadyReplicas int64
			Clusters      []string
		}
	}
	lv := decode[labelValues](t, a.get("/v1/labels/app.kubernetes.io%2Fversion"))
	assert.Equal(t, "app.kubernetes.io/version", lv.Key)
	require.Len(t, lv.Values, 2)
	assert.Equal(t, "1.42", lv.Values[0].Value)
	assert.Equal(t, int64(2), lv.Values[0].Fleets, "the stale cluster and the tombstone do not count")
	assert.Equal(t, int64(14), lv.Values[0].ReadyReplicas)
	assert.Equal(t, []string{"pc", "ps5"}, lv.Values[0].Clusters)
	assert.Equal(t, "1.41", lv.Values[1].Value)
	lv = decode[labelValues](t, a.get("/v1/labels/app.kubernetes.io%2Fversion?includeStale=true"))
	assert.Equal(t, int64(3), lv.Values[0].Fleets)

	v := decode[version.Info](t, a.get("/v1/version"))
	assert.Equal(t, version.Get(query.Program), v, "the instance's build")
}

func TestQueryETagsAndGzip(t *testing.T) {
	a := newAPI(t)
	seed(a)
	first := a.get("/v1/fleets")
	etag := first.header.Get("ETag")
	require.NotEmpty(t, etag)
	assert.False(t, strings.HasPrefix(etag, "W/"), "a strong ETag")

	again := a.do(http.MethodGet, "/v1/fleets", map[string]string{"If-None-Match": etag})
	assert.Equal(t, http.StatusNotModified, again.status)
	assert.Empty(t, again.body)

	a.put(fleetSpec{"pc", "games", "ranked", map[string]string{"app.kubernetes.io/version": "1.42", "platform": "pc"}, 1, 1, 1})
	changed := a.do(http.MethodGet, "/v1/fleets", map[string]string{"If-None-Match": etag})
	assert.Equal(t, http.StatusOK, changed.status)
	assert.NotEqual(t, etag, changed.header.Get("ETag"))

	gz := a.do(http.MethodGet, "/v1/fleets", map[string]string{"Accept-Encoding": "gzip"})
	assert.Equal(t, "gzip", gz.header.Get("Content-Encoding"))
	assert.JSONEq(t, string(changed.body), string(gz.body))
	assert.Equal(t, http.StatusNotModified, a.do(http.MethodGet, "/v1/fleets", map[string]string{"Accept-Encoding": "gzip", "If-None-Match": gz.header.Get("ETag")}).status)
}

func TestQueryBadInput(t *testing.T) {
	a := newAPI(t)
	seed(a)
	tests := []struct{ path, param string }{
		{"/v1/fleets?selector=" + url.QueryEscape("version in (1.2"), "selector"},
		{"/v1/fleets?selector=" + url.QueryEscape("Bad Key=1"), "selector"},
		{"/v1/fleets?pageSize=-1", "pageSize"},
		{"/v1/fleets?pageSize=1001", "pageSize"},
		{"/v1/fleets?pageSize=ten", "pageSize"},
		{"/v1/fleets?minReady=-3", "minReady"},
		{"/v1/fleets?minAvailable=3", "minAvailable"},
		{"/v1/fleets?counter=rooms&minAvailable=x", "minAvailable"},
		{"/v1/fleets?counter=room&minAvailable=1", "counter"},
		{"/v1/fleets?list=slot", "list"},
		{"/v1/fleets?minListAvailable=1", "minListAvailable"},
		{"/v1/fleets?orderBy=age", "orderBy"},
		{"/v1/fleets?orderBy=available", "orderBy"},
		{"/v1/fleets?pageToken=garbage", "pageToken"},
		{"/v1/fleets?cluster=PC", "cluster"},
		{"/v1/fleets?namespace=a.b", "namespace"},
		{"/v1/fleets?includeStale=maybe", "includeStale"},
		{"/v1/fleets?namespace=a&namespace=b", "namespace"},
		{"/v1/fleets?colour=blue", "colour"},
		{"/v1/fleets/PC/games/ranked", "cluster"},
		{"/v1/clusters/PC", "cluster"},
		{"/v1/clusters?x=1", "x"},
		{"/v1/version?x=1", "x"},
		{"/v1/labels/bad%20key", "key"},
		{"/v1/labels/app.kubernetes.io%2Fversion?includeStale=1", "includeStale"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r := a.get(tt.path)
			require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
			e := decode[struct {
				Error struct {
					Code    int
					Status  string
					Message string
					Param   string
				}
			}](t, r)
			assert.Equal(t, 400, e.Error.Code)
			assert.Equal(t, "INVALID_ARGUMENT", e.Error.Status)
			assert.Equal(t, tt.param, e.Error.Param)
			assert.Contains(t, e.Error.Message, tt.param)
		})
	}
	t.Run("unknown path", func(t *testing.T) {
		r := a.get("/v2/fleets")
		assert.Equal(t, http.StatusNotFound, r.status)
		assert.Contains(t, string(r.body), `"status":"NOT_FOUND"`)
	})
	t.Run("wrong method", func(t *testing.T) {
		r := a.do(http.MethodPost, "/v1/fleets", nil)
		assert.Equal(t, http.StatusMethodNotAllowed, r.status)
		assert.Equal(t, "GET, HEAD", r.header.Get("Allow"))
		assert.Contains(t, string(r.body), `"status":"METHOD_NOT_ALLOWED"`)
	})
}

// TestQueryFleetsIsServedByTheFunctionsFramework: the registered function,
// its lazy Firestore client and its configuration, as deployed.
func TestQueryFleetsIsServedByTheFunctionsFramework(t *testing.T) {
	fn, err := startFunctionTarget("QueryFleets", emulator.Host(t, emulator.FirestoreHostEnv))
	require.NoError(t, err)
	t.Cleanup(fn.stop)
	// The runner's project is the package's; its clusters exist if other
	// tests ran, but the answer's shape is what matters here.
	resp, err := testhttp.Client.Get(fn.url + "v1/clusters")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	resp, err = testhttp.Client.Get(fn.url + "v1/fleets?pageSize=0")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestOpenAPIValidationCanFail guards the guard: a response that breaks
// the document is reported.
func TestOpenAPIValidationCanFail(t *testing.T) {
	v := apiValidator(t)
	req := httptest.NewRequest(http.MethodGet, "/v1/clusters", nil)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"items":[{"cluster":"UPPER"}]}`)), Request: req}
	ok, errs := v.ValidateHttpResponse(req, resp)
	assert.False(t, ok)
	assert.NotEmpty(t, errs)
}

// TestStalenessIsJudgedOnTheIngestClock: a publisher whose clock is 2
// minutes slow does not make its live cluster stale, and one 2 minutes fast
// does not keep a cluster that stopped sending heartbeats fresh.
func TestStalenessIsJudgedOnTheIngestClock(t *testing.T) {
	a := newAPI(t)
	// Ingested now, stamped 2 minutes in the past.
	a.heartbeatSkewed("slow", 0, -2*time.Minute)
	// Ingested 100 s ago (stale after 90 s), stamped 20 s in the future.
	a.heartbeatSkewed("fast", 100*time.Second, 2*time.Minute)
	clusters := decode[struct {
		Items []struct {
			Cluster     string
			Stale       bool
			HeartbeatAt time.Time
		}
	}](t, a.get("/v1/clusters"))
	require.Len(t, clusters.Items, 2)
	for _, c := range clusters.Items {
		switch c.Cluster {
		case "slow":
			assert.False(t, c.Stale, "a live cluster with a slow clock is not stale")
			assert.Less(t, c.HeartbeatAt, time.Now().Add(-time.Minute), "heartbeatAt stays the publisher's time, for information")
		case "fast":
			assert.True(t, c.Stale, "a quiet cluster with a fast clock is stale")
			assert.Greater(t, c.HeartbeatAt, time.Now(), "its heartbeatAt lies in the future")
		}
	}
}

// instance serves the API from a view of its own over a's project, as a
// second instance of the function would.
func (a *api) instance() *httptest.Server {
	a.tb.Helper()
	store := firestoredb.New(a.fs, time.Hour, time.Now)
	srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(store, fleetapi.Options{MaxStaleness: -1, ClusterRefresh: -1}),
		logging.New(io.Discard, logging.LevelWarning)))
	a.tb.Cleanup(srv.Close)
	return srv
}

// on sends a GET to another instance, validated as a.get's are.
func (a *api) on(srv *httptest.Server, path string) response {
	a.tb.Helper()
	return a.doAt(srv, http.MethodGet, path, nil)
}

// TestQueryViewFollowsAcknowledgedWrites: on the Firestore emulator,
// every write the ingest core acknowledged before a request (upserts from
// writers racing each other, so that commits share server timestamps, and
// tombstones) is in that request's answer; a new instance, loading
// everything, answers as the warm one does, with the same ETag.
func TestQueryViewFollowsAcknowledgedWrites(t *testing.T) {
	a := newAPI(t)
	seed(a)
	warm := a.srv
	a.get("/v1/fleets") // the warm instance loads now, and follows writes from here on

	var mu sync.Mutex // a.seq and a.live
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 15 {
				name := fmt.Sprintf("w%d-%02d", w, i)
				mu.Lock()
				a.seq++
				seq := a.seq
				mu.Unlock()
				ev := fleet.Event{
					SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "pc",
					Version: fleet.Version{Term: 1, Seq: seq}, ObservedAt: fleet.MicrosOf(time.Now()),
					Publisher: fleet.Publisher{ID: "p"}, Namespace: "games", Name: name,
					Fleet: fleet.State{UID: "u", Labels: map[string]string{"writer": fmt.Sprint(w)}, Status: fleet.Status{ReadyReplicas: int64(i)}},
				}
				_, err := a.store.Apply(t.Context(), ev)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				a.live[ev.Key()] = seq
				mu.Unlock()
				r := a.on(warm, "/v1/fleets/pc/games/"+name)
				assert.Equal(t, http.StatusOK, r.status, "%s was acknowledged before the request: %s", name, r.body)
			}
		})
	}
	wg.Wait()
	list := decode[queryFleetList](t, a.get("/v1/fleets?selector=writer&pageSize=1000"))
	assert.Len(t, list.Items, 60)

	a.remove("pc", "games", "w0-00")
	assert.Equal(t, http.StatusNotFound, a.get("/v1/fleets/pc/games/w0-00").status, "a tombstone removes the fleet from the next answer")
	list = decode[queryFleetList](t, a.get("/v1/fleets?selector=writer&pageSize=1000"))
	assert.Len(t, list.Items, 59)

	fresh := a.instance()
	for _, path := range []string{"/v1/fleets?pageSize=1000", "/v1/fleets?selector=writer&orderBy=ready&pageSize=7",
		"/v1/clusters", "/v1/clusters/pc", "/v1/labels/writer", "/v1/fleets/pc/games/w1-03"} {
		w, f := a.on(warm, path), a.on(fresh, path)
		require.Equal(t, http.StatusOK, w.status, "%s: %s", path, w.body)
		assert.JSONEq(t, string(w.body), string(f.body), path)
		assert.Equal(t, w.header.Get("ETag"), f.header.Get("ETag"), "%s: the ETag depends on the documents only", path)
	}
}

// TestWritesAreStampedWithTheCommitTime: every document the ingest core
// writes, tombstones and cluster documents included, carries the server's
// writtenAt, which the view follows.
func TestWritesAreStampedWithTheCommitTime(t *testing.T) {
	a := newAPI(t)
	before := time.Now().Add(-time.Second)
	a.put(fleetSpec{"pc", "games", "a", nil, 1, 1, 1}, fleetSpec{"pc", "games", "b", nil, 1, 1, 1})
	a.remove("pc", "games", "b")
	a.heartbeat("pc", 0)
	fleets, err := a.store.FleetsWrittenSince(t.Context(), before)
	require.NoError(t, err)
	require.Len(t, fleets.Docs, 2)
	newest := before
	for _, d := range fleets.Docs {
		assert.WithinDuration(t, time.Now(), d.WrittenAt, 10*time.Second, d.Name)
		assert.False(t, d.WrittenAt.Before(newest), "oldest first")
		newest = d.WrittenAt
	}
	assert.True(t, fleets.Docs[1].Deleted, "the tombstone is stamped too, last")
	clusters, err := a.store.ClustersWrittenSince(t.Context(), before)
	require.NoError(t, err)
	require.Len(t, clusters.Docs, 1)
	later, err := a.store.FleetsWrittenSince(t.Context(), newest.Add(time.Millisecond))
	require.NoError(t, err)
	assert.Empty(t, later.Docs)
}

// TestFollowFleetsDeliversEachWriteOnce: the view's realtime listener on
// the emulator delivers the fleets written since its point (tombstones
// included) and then every acknowledged write, each once, with a read
// time by which every write acknowledged before it was delivered, and is
// billed one read per document delivered (at least one to start).
func TestFollowFleetsDeliversEachWriteOnce(t *testing.T) {
	a := newAPI(t)
	// "old" is stamped before the listener's point, "a" at it: "a" is
	// written again until the server stamps it later than "old".
	a.put(fleetSpec{"pc", "games", "old", nil, 1, 1, 1})
	stamp := func(name string) time.Time {
		docs, err := a.store.FleetsWrittenSince(t.Context(), time.Time{})
		require.NoError(t, err)
		for _, d := range docs.Docs {
			if d.Name == name {
				return d.WrittenAt
			}
		}
		t.Fatalf("no fleet %s", name)
		return time.Time{}
	}
	old := stamp("old")
	var since time.Time
	require.Eventually(t, func() bool {
		a.put(fleetSpec{"pc", "games", "a", nil, 1, 1, 1})
		since = stamp("a")
		return since.After(old)
	}, 10*time.Second, time.Millisecond, "a write stamped later than the one before it")

	type delivery struct {
		docs     []*fleet.Document
		readTime time.Time
	}
	deliveries := make(chan delivery, 100)
	ctx, cancel := context.WithCancel(t.Context())
	ended := make(chan error, 1)
	listens := a.store.Billing().Reads[firestoredb.CauseListen]
	go func() {
		ended <- a.store.FollowFleets(ctx, since, func(p fleet.Page[fleet.Document], readTime time.Time) {
			assert.Empty(t, p.Unreadable)
			deliveries <- delivery{p.Docs, readTime}
		})
	}()
	next := func() delivery {
		t.Helper()
		select {
		case d := <-deliveries:
			return d
		case <-time.After(10 * time.Second):
			t.Fatal("the listener delivered nothing")
			return delivery{}
		}
	}
	first := next()
	require.Len(t, first.docs, 1, "the fleets written since the point, and no older")
	assert.Equal(t, "a", first.docs[0].Name)

	// Writes acknowledged one after the other: every snapshot holds each
	// write acknowledged before its read time.
	acked := map[string]time.Time{}
	seen := map[string]int64{} // ready replicas delivered, by name
	var delivered int
	var readTimes []time.Time
	for i := range 20 {
		name := fmt.Sprintf("f%d", i%5)
		if i == 19 {
			a.remove("pc", "games", "a")
			name = "a"
		} else {
			a.put(fleetSpec{"pc", "games", name, nil, int64(i), 1, 1})
		}
		acked[name] = time.Now()
		for got := false; !got; {
			d := next()
			readTimes = append(readTimes, d.readTime)
			delivered += len(d.docs)
			for _, doc := range d.docs {
				if doc.Deleted {
					seen[doc.Name] = -1
				} else {
					seen[doc.Name] = doc.Status.ReadyReplicas
				}
			}
			got = name == "a" && seen["a"] == -1 || name != "a" && seen[name] == int64(i)
			if !got {
				assert.True(t, d.readTime.Before(acked[name]), "a snapshot read at %s, after %s was acknowledged, lacks it", d.readTime, name)
			}
		}
	}
	assert.Equal(t, 20, delivered, "each write once")
	assert.True(t, slices.IsSortedFunc(readTimes, func(x, y time.Time) int { return x.Compare(y) }), "read times never go back")
	assert.Equal(t, int64(1+20), a.store.Billing().Reads[firestoredb.CauseListen]-listens, "a read per document delivered")
	cancel()
	require.NoError(t, <-ended, "ended by its context")
}

// TestPlacementsOverFirestore: /v1/placements over documents the ingest
// core wrote answers as the OpenAPI document says: the candidates with
// their qualifying capacity, every other fleet counted by reason, never
// a deleted one; answers are not to be stored; bad input is a 400 naming
// the parameter.
func TestPlacementsOverFirestore(t *testing.T) {
	a := newAPI(t)
	seed(a)
	r := a.get("/v1/placements?selector=app.kubernetes.io%2Fversion%3D1.42&counter=rooms&minAvailable=4&count=5")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
	assert.Empty(t, r.header.Get("ETag"))
	p := decode[fleetapi.Placements](t, r)
	require.Len(t, p.Placements, 1, "%s", r.body)
	c := p.Placements[0]
	assert.Equal(t, []string{"ps5", "games", "ranked", "counter:rooms"}, []string{c.Cluster, c.Namespace, c.Name, c.Resource})
	assert.Equal(t, int64(5), c.Available)
	assert.Equal(t, int64(6), c.ReadyReplicas)
	assert.Equal(t, 1, p.Eligible)
	got := map[fleetapi.Reason]int{}
	for _, l := range p.LeftOut {
		got[l.Reason] = l.Fleets
	}
	assert.Equal(t, map[fleetapi.Reason]int{fleetapi.FilteredOut: 2, fleetapi.StaleCluster: 1, fleetapi.TooLittleCapacity: 1}, got,
		"casual and bots filtered out, old stale, pc's ranked has 3 rooms; the deleted fleet is nowhere")

	r = a.get("/v1/placements?count=0")
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, string(r.body), `"param":"count"`)
	r = a.do(http.MethodPost, "/v1/placements", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, r.status)
	assert.Equal(t, "GET, HEAD", r.header.Get("Allow"))
}
