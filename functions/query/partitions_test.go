package query_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetclient"
	"github.com/fleetcast/fleetcast/functions/query"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/logging"
)

// serve serves h over HTTP/1.1 and unencrypted HTTP/2 (h2c, for gRPC),
// until the test ends.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// getJSON GETs url and decodes its 200 answer into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := testhttp.Client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

// TestAServiceOverPartitionsAnswersAsOneView: a query service configured
// with PARTITIONS over two partitions' query services (pc and ps5; xbox,
// stale) answers /v1/fleets page by page, /v1/clusters, /v1/labels and
// Inform (Connect, and plain gRPC with grpc-go) as the single view of the
// same store does, and /v1/placements from every partition. When one
// partition's service goes away, the answers still come, its cluster
// listed stale and named unavailable. Its streams (gRPC, server-sent
// events) merge the partitions'; it serves no metrics, and says why.
func TestAServiceOverPartitionsAnswersAsOneView(t *testing.T) {
	whole, mem, _ := serverOf(t, func(*fleetapi.Options) {})
	log := logging.New(t.Output(), logging.LevelWarning)
	partition := func(clusters ...string) *httptest.Server {
		svc := fleetapi.NewService(mem, fleetapi.Options{MaxStaleness: -1, ClusterRefresh: -1, Clusters: clusters, Log: log})
		return serve(t, query.NewHandler(svc, log))
	}
	a, b := partition("pc", "ps5"), partition("xbox")
	cfg, err := query.ConfigFromEnv(func(k string) string {
		return map[string]string{"PARTITIONS": "pc,ps5=" + a.URL + "; xbox=" + b.URL, "PARTITION_TIMEOUT": "10s"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, []query.PartitionConfig{{URL: a.URL, Clusters: []string{"pc", "ps5"}}, {URL: b.URL, Clusters: []string{"xbox"}}}, cfg.Partitions)
	p, err := query.NewPartitions(t.Context(), cfg, fleetclient.Auth{}, log)
	require.NoError(t, err)
	front := serve(t, query.NewPartitionsHandler(p, log))

	for _, params := range []string{"pageSize=2", "pageSize=3&orderBy=ready&includeStale=true", "selector=app.kubernetes.io/version%3D1.42&pageSize=1",
		"cluster=xbox&cluster=pc&includeStale=true&orderBy=available&counter=rooms&pageSize=2"} {
		var want, got []fleetapi.Fleet
		pages := 0
		for _, srv := range []*httptest.Server{whole, front} {
			token := ""
			for {
				u := srv.URL + "/v1/fleets?" + params
				if token != "" {
					u += "&pageToken=" + url.QueryEscape(token)
				}
				var l fleetapi.FleetList
				getJSON(t, u, &l)
				assert.Empty(t, l.UnavailableClusters)
				if srv == front {
					got = append(got, l.Items...)
					pages++
				} else {
					want = append(want, l.Items...)
				}
				if token = l.NextPageToken; token == "" {
					break
				}
			}
		}
		assert.Equal(t, want, got, params)
		assert.Positive(t, pages)
	}
	for _, path := range []string{"/v1/clusters", "/v1/labels/platform", "/v1/labels/app.kubernetes.io/version?includeStale=true", "/v1/clusters/ps5"} {
		var want, got any
		getJSON(t, whole.URL+path, &want)
		getJSON(t, front.URL+path, &got)
		assert.Equal(t, want, got, path)
	}
	var pl fleetapi.Placements
	getJSON(t, front.URL+"/v1/placements?count=8&includeStale=true", &pl)
	assert.Len(t, pl.Placements, 8)
	assert.Equal(t, 11, pl.Eligible, "every fleet with a ready game server")
	assert.False(t, pl.Placements[6].Stale)
	assert.True(t, pl.Placements[7].Stale, "xbox's rank after every fresh fleet")

	// Connect, through the CLI's client, and plain gRPC.
	c, err := fleetclient.New(nil, front.URL)
	require.NoError(t, err)
	all, err := fleetapi.AllFleets(t.Context(), c, fleetapi.Query{IncludeStale: true, PageSize: 5})
	require.NoError(t, err)
	assert.Len(t, all, 12)
	conn, err := grpc.NewClient(strings.TrimPrefix(front.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	iresp, err := fleetcastv1.NewInformationServiceClient(conn).Inform(t.Context(), &fleetcastv1.InformRequest{PageSize: 100})
	require.NoError(t, err)
	assert.Len(t, iresp.GetFleetInformation(), 8, "pc's and ps5's; xbox is stale")
	var resp *http.Response
	// The merged stream over gRPC: every fresh fleet, then Synced.
	sctx, stop := context.WithCancel(t.Context())
	stream, err := fleetcastv1.NewInformationServiceClient(conn).WatchFleets(sctx, &fleetcastv1.WatchFleetsRequest{})
	require.NoError(t, err)
	added := 0
	for {
		m, err := stream.Recv()
		require.NoError(t, err)
		if m.GetSynced() != nil {
			assert.EqualValues(t, 8, m.GetSynced().GetFleetCount())
			break
		}
		if m.GetFleet() != nil {
			added++
		}
	}
	assert.Equal(t, 8, added)
	stop()
	// And as server-sent events, as the dashboard follows it.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, front.URL+"/v1/watch?cluster=xbox&includeStale=true", nil)
	require.NoError(t, err)
	resp, err = testhttp.Client.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	sse := bufio.NewScanner(resp.Body)
	fleets := 0
	for sse.Scan() && !strings.HasPrefix(sse.Text(), "event: synced") {
		if sse.Text() == "event: added" {
			fleets++
		}
	}
	resp.Body.Close()
	assert.Equal(t, 4, fleets, "xbox's, stale")

	mresp, err := testhttp.Client.Get(front.URL + "/metrics")
	require.NoError(t, err)
	var e struct{ Error struct{ Message string } }
	require.NoError(t, json.NewDecoder(mresp.Body).Decode(&e))
	mresp.Body.Close()
	assert.Equal(t, http.StatusNotFound, mresp.StatusCode)
	assert.Contains(t, e.Error.Message, "over partitions (PARTITIONS)")

	// Partition b goes away: xbox is stale and unavailable.
	b.Close()
	var l fleetapi.FleetList
	getJSON(t, front.URL+"/v1/fleets?includeStale=true&pageSize=100", &l)
	assert.Len(t, l.Items, 8)
	assert.Equal(t, []string{"xbox"}, l.UnavailableClusters)
	var cl fleetapi.ClusterList
	getJSON(t, front.URL+"/v1/clusters", &cl)
	require.Len(t, cl.Items, 3)
	assert.Equal(t, "xbox", cl.Items[2].Cluster)
	assert.True(t, cl.Items[2].Stale)
	assert.EqualValues(t, 4, cl.Items[2].FleetCount, "as it last listed it")
	getJSON(t, front.URL+"/v1/placements?count=8&includeStale=true", &pl)
	assert.Len(t, pl.Placements, 7, "pc's and ps5's")
	assert.Equal(t, []string{"xbox"}, pl.UnavailableClusters)
}

// TestPartitionsFromTheEnvironment: PARTITIONS' mistakes are refused,
// each saying what is wrong.
func TestPartitionsFromTheEnvironment(t *testing.T) {
	for v, want := range map[string]string{
		"pc":                                  `"pc": want CLUSTER[,CLUSTER...]=URL`,
		"pc=ftp://x":                          "want an http(s) URL",
		"PC=https://a.example":                "PC",
		"pc=https://a.example;pc=https://b":   "cluster pc is in two partitions",
		" ; ":                                 "no partition",
		"pc,,ps5=https://a.example":           `"pc,,ps5=https://a.example"`,
		"pc=https://a.example ps5=http://b:1": "",
	} {
		env := map[string]string{"PARTITIONS": v}
		_, err := query.ConfigFromEnv(func(k string) string { return env[k] })
		if want == "" {
			assert.NoError(t, err, v)
			continue
		}
		require.Error(t, err, v)
		assert.Contains(t, err.Error(), "PARTITIONS", v)
		assert.Contains(t, err.Error(), want, v)
	}
	_, err := query.ConfigFromEnv(func(k string) string {
		return map[string]string{"PARTITIONS": "pc=https://a.example", "VIEW_CLUSTERS": "pc"}[k]
	})
	assert.ErrorContains(t, err, "a service over partitions holds no view")
	cfg, err := query.ConfigFromEnv(func(string) string { return "" })
	require.NoError(t, err)
	assert.Equal(t, fleetapi.DefaultPartitionTimeout, cfg.PartitionTimeout)
}
