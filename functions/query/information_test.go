package query_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetpb"
	"github.com/fleetcast/fleetcast/functions/query"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/internal/testenv/watchtest"
	"github.com/fleetcast/fleetcast/logging"
)

// server serves the function over HTTP/1.1 and unencrypted HTTP/2 (h2c,
// for gRPC), from an in-memory store of 3 clusters (xbox stale) and 12
// fleets.
func server(t *testing.T) *httptest.Server {
	t.Helper()
	srv, _ := serverOver(t)
	return srv
}

// serverOver is server, and its store; watches poll it every 5 ms.
func serverOver(t *testing.T) (*httptest.Server, *fleetapitest.Memory) {
	t.Helper()
	return serverWith(t)
}

// serverWith is serverOver with the handler's options.
func serverWith(t *testing.T, hopts ...query.HandlerOption) (*httptest.Server, *fleetapitest.Memory) {
	t.Helper()
	srv, mem, _ := serverOf(t, func(*fleetapi.Options) {}, hopts...)
	return srv, mem
}

// serverOf is serverWith, the Service's options changed by opts, and
// the Service.
func serverOf(t *testing.T, opt func(*fleetapi.Options), hopts ...query.HandlerOption) (*httptest.Server, *fleetapitest.Memory, *fleetapi.Service) {
	t.Helper()
	now := time.Now()
	mem := fleetapitest.NewMemory(time.Now)
	seq := int64(0)
	for i, c := range []string{"pc", "ps5", "xbox"} {
		age := time.Duration(0)
		if c == "xbox" {
			age = time.Hour
		}
		seq++
		mem.PutCluster(fleet.ClusterDocument{Cluster: c, Labels: map[string]string{"platform": c}, SnapshotVersion: fleet.Version{Term: 1, Seq: seq},
			SnapshotParts: 1, IngestedAt: now.Add(-age), HeartbeatAt: now.Add(-age), FleetCount: 4, Publisher: fleet.Publisher{ID: "p", Version: "v"},
			Totals: fleet.DocStatus{ReadyReplicas: int64(i), Counters: map[string]fleet.DocAggregate{"rooms": {Capacity: 40}}, Lists: map[string]fleet.DocAggregate{}}})
		for j := range 4 {
			seq++
			mem.PutFleet(fleet.Document{Cluster: c, Namespace: "games", Name: fmt.Sprintf("f%d", j), UID: "u", Version: fleet.Version{Term: 1, Seq: seq},
				Labels:    map[string]string{"platform": c, "app.kubernetes.io/version": []string{"1.41", "1.42"}[j%2]},
				Spec:      &fleet.Spec{Replicas: 10, Scheduling: "Packed"},
				Status:    &fleet.DocStatus{Replicas: 10, ReadyReplicas: int64(j + i), AllocatedReplicas: 1, Counters: map[string]fleet.DocAggregate{"rooms": {Capacity: 10, Count: int64(j), Available: int64(10 - j)}}, Lists: map[string]fleet.DocAggregate{}},
				Publisher: fleet.Publisher{ID: "p"}, ObservedAt: now.Add(-time.Second), IngestedAt: now, LagMillis: 5})
		}
	}
	log := logging.New(t.Output(), logging.LevelWarning) // shown with a failure, and with -v
	opts := fleetapi.Options{MaxStaleness: -1, WatchPoll: 5 * time.Millisecond, ClusterRefresh: -1, Log: log, MaxWatches: 2000}
	opt(&opts)
	svc := fleetapi.NewService(mem, opts)
	srv := httptest.NewUnstartedServer(query.NewHandler(svc, log, hopts...))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, mem, svc
}

// clients are the generated client over each protocol connect-go speaks.
func clients(srv *httptest.Server) map[string]fleetcastv1connect.InformationServiceClient {
	return watchtest.Clients(srv.URL)
}

func getList(t *testing.T, url string) fleetapi.FleetList {
	t.Helper()
	resp, err := testhttp.Client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var l fleetapi.FleetList
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&l))
	return l
}

// TestInformEqualsTheHTTPAPI: over every protocol, Inform answers what
// /v1/fleets answers for the same filters, page by page.
func TestInformEqualsTheHTTPAPI(t *testing.T) {
	srv := server(t)
	cases := []struct {
		params string
		req    *fleetcastv1.InformRequest
	}{
		{"", &fleetcastv1.InformRequest{}},
		{"selector=app.kubernetes.io/version%3D1.42&includeStale=true",
			&fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Selector: "app.kubernetes.io/version=1.42", IncludeStale: true}}},
		{"cluster=pc&cluster=ps5&minReady=2&orderBy=ready&pageSize=3",
			&fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Clusters: []string{"pc", "ps5"}, MinReady: 2}, OrderBy: fleetcastv1.OrderBy_ORDER_BY_READY, PageSize: 3}},
		{"counter=rooms&minAvailable=8&orderBy=available",
			&fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Counter: "rooms", MinCounterAvailable: 8}, OrderBy: fleetcastv1.OrderBy_ORDER_BY_AVAILABLE}},
	}
	for name, client := range clients(srv) {
		for _, tc := range cases {
			t.Run(name+"/"+tc.params, func(t *testing.T) {
				want := getList(t, srv.URL+"/v1/fleets?"+tc.params)
				resp, err := client.Inform(t.Context(), connect.NewRequest(tc.req))
				require.NoError(t, err)
				got := resp.Msg
				assert.EqualValues(t, want.TotalSize, got.TotalSize)
				assert.Equal(t, want.NextPageToken, got.NextPageToken)
				require.Len(t, got.FleetInformation, len(want.Items))
				for i, w := range want.Items {
					g := got.FleetInformation[i]
					assert.Equal(t, [3]string{w.Cluster, w.Namespace, w.Name}, [3]string{g.ClusterName, g.Namespace, g.FleetName})
					assert.Equal(t, w.ReadyReplicas, g.ReadyGameservers)
					assert.Equal(t, w.AllocatedReplicas, g.AllocatedGameservers)
					assert.Equal(t, w.Stale, g.Stale)
					assert.Equal(t, w.Counters["rooms"].Available, g.Counters["rooms"].GetAvailable())
					assert.Equal(t, w.ObservedAt.UnixMicro(), g.ObservedTime.AsTime().UnixMicro())
					labels := map[string]string{}
					for _, l := range g.Labels {
						labels[l.Key] = l.Value
					}
					assert.Equal(t, w.Labels, labels)
				}
				if got.NextPageToken != "" {
					next := proto(tc.req)
					next.PageToken = got.NextPageToken
					resp, err := client.Inform(t.Context(), connect.NewRequest(next))
					require.NoError(t, err)
					wantNext := getList(t, srv.URL+"/v1/fleets?"+tc.params+"&pageToken="+want.NextPageToken)
					require.Len(t, resp.Msg.FleetInformation, len(wantNext.Items))
					assert.Equal(t, wantNext.Items[0].Name, resp.Msg.FleetInformation[0].FleetName)
				}
			})
		}
	}
}

func proto(r *fleetcastv1.InformRequest) *fleetcastv1.InformRequest {
	return &fleetcastv1.InformRequest{Filter: r.Filter, OrderBy: r.OrderBy, PageSize: r.PageSize}
}

// TestInformationBadRequests: a bad request is invalid_argument naming
// the request's field.
func TestInformationBadRequests(t *testing.T) {
	srv := server(t)
	tests := []struct {
		req   *fleetcastv1.InformRequest
		field string
	}{
		{&fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Selector: "version in (1"}}, "filter.selector"},
		{&fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Clusters: []string{"Not_A_Label"}}}, "filter.clusters"},
		{&fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{MinCounterAvailable: 3}}, "filter.min_counter_available"},
		{&fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Counter: "seats"}}, "filter.counter"},
		{&fleetcastv1.InformRequest{PageSize: 5000}, "page_size"},
		{&fleetcastv1.InformRequest{PageToken: "garbage"}, "page_token"},
		{&fleetcastv1.InformRequest{OrderBy: fleetcastv1.OrderBy_ORDER_BY_AVAILABLE}, "order_by"},
		{&fleetcastv1.InformRequest{OrderBy: 42}, "order_by"},
	}
	for name, client := range clients(srv) {
		for _, tt := range tests {
			t.Run(name+"/"+tt.field, func(t *testing.T) {
				_, err := client.Inform(t.Context(), connect.NewRequest(tt.req))
				require.Error(t, err)
				ce, ok := errors.AsType[*connect.Error](err)
				require.True(t, ok, "%v", err)
				assert.Equal(t, connect.CodeInvalidArgument, ce.Code())
				assert.True(t, strings.HasPrefix(ce.Message(), tt.field+": "), "%q names %s", ce.Message(), tt.field)
			})
		}
		t.Run(name+"/key", func(t *testing.T) {
			_, err := client.LabelValues(t.Context(), connect.NewRequest(&fleetcastv1.LabelValuesRequest{Key: "bad key"}))
			assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
			assert.Contains(t, err.Error(), "key: ")
		})
	}
}

// TestClustersAndLabelsEqualTheHTTPAPI: ListClusters and LabelValues
// answer what /v1/clusters and /v1/labels/{key} do.
func TestClustersAndLabelsEqualTheHTTPAPI(t *testing.T) {
	srv := server(t)
	client := clients(srv)["connect"]
	var wantClusters fleetapi.ClusterList
	resp, err := testhttp.Client.Get(srv.URL + "/v1/clusters")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&wantClusters))
	resp.Body.Close()
	cl, err := client.ListClusters(t.Context(), connect.NewRequest(&fleetcastv1.ListClustersRequest{}))
	require.NoError(t, err)
	require.Len(t, cl.Msg.Clusters, len(wantClusters.Items))
	for i, w := range wantClusters.Items {
		g := cl.Msg.Clusters[i]
		assert.Equal(t, w.Cluster, g.ClusterName)
		assert.Equal(t, w.Stale, g.Stale)
		assert.Equal(t, w.FleetCount, g.FleetCount)
		assert.Equal(t, w.Totals.ReadyReplicas, g.Totals.ReadyGameservers)
		assert.Equal(t, w.Publisher.ID, g.Publisher.Id)
	}

	var wantLabels fleetapi.LabelValues
	resp, err = testhttp.Client.Get(srv.URL + "/v1/labels/app.kubernetes.io%2Fversion?includeStale=true")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&wantLabels))
	resp.Body.Close()
	lv, err := client.LabelValues(t.Context(), connect.NewRequest(&fleetcastv1.LabelValuesRequest{Key: "app.kubernetes.io/version", IncludeStale: true}))
	require.NoError(t, err)
	require.Len(t, lv.Msg.Values, len(wantLabels.Values))
	for i, w := range wantLabels.Values {
		g := lv.Msg.Values[i]
		assert.Equal(t, []any{w.Value, w.Fleets, w.ReadyReplicas, w.AllocatedReplicas, w.Clusters},
			[]any{g.Value, g.Fleets, g.ReadyGameservers, g.AllocatedGameservers, g.Clusters})
	}
}

// TestConnectJSONOverPlainHTTP: any language can call the service with
// an HTTP POST of JSON (the Connect protocol), no generated code needed.
func TestConnectJSONOverPlainHTTP(t *testing.T) {
	srv := server(t)
	post := func(body string) (int, map[string]any) {
		resp, err := testhttp.Client.Post(srv.URL+"/fleetcast.v1.InformationService/Inform", "application/json", bytes.NewBufferString(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var v map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		return resp.StatusCode, v
	}
	status, v := post(`{"filter":{"selector":"platform=pc"},"orderBy":"ORDER_BY_READY"}`)
	require.Equal(t, http.StatusOK, status, "%v", v)
	items := v["fleetInformation"].([]any)
	require.Len(t, items, 4)
	first := items[0].(map[string]any)
	assert.Equal(t, "pc", first["clusterName"])
	assert.Equal(t, "f3", first["fleetName"], "most ready first")
	assert.Equal(t, "3", first["readyGameservers"], "int64 is a JSON string in protobuf's JSON")

	status, v = post(`{"filter":{"selector":"version in (1"}}`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, "invalid_argument", v["code"])
	assert.Contains(t, v["message"], "filter.selector: ")
}

// TestInformationFaultsAreLoggedNotSent: a store failure reaches a
// Connect caller as a code only; its cause goes to the log, as on /v1.
func TestInformationFaultsAreLoggedNotSent(t *testing.T) {
	for _, tt := range []struct {
		err       error
		code      connect.Code
		wantLevel string
	}{
		{status.Error(codes.PermissionDenied, "missing roles/datastore.viewer"), connect.CodeInternal, "ERROR"},
		{status.Error(codes.Unavailable, "connection refused"), connect.CodeUnavailable, "WARNING"},
	} {
		t.Run(tt.err.Error(), func(t *testing.T) {
			var logs syncbuf.Buffer
			mem := fleetapitest.NewMemory(time.Now)
			mem.Err = tt.err
			log := logging.New(&logs, logging.LevelWarning)
			srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(mem, fleetapi.Options{Log: log}), log))
			defer srv.Close()
			_, err := fleetcastv1connect.NewInformationServiceClient(testhttp.Client, srv.URL).
				ListClusters(t.Context(), connect.NewRequest(&fleetcastv1.ListClustersRequest{}))
			assert.Equal(t, tt.code, connect.CodeOf(err))
			assert.NotContains(t, err.Error(), tt.err.Error(), "the cause stays in the log")
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			var line map[string]any
			require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &line))
			assert.Equal(t, tt.wantLevel, line["severity"])
			assert.Equal(t, "/fleetcast.v1.InformationService/ListClusters", line["path"])
			assert.Contains(t, line[logging.KeyError], tt.err.Error())
		})
	}
}

func TestMaxStalenessZeroMeansEveryAnswerWaits(t *testing.T) {
	for _, v := range []string{"0", "0s", "0ms"} {
		c, err := query.ConfigFromEnv(func(k string) string { return map[string]string{"MAX_STALENESS": v}[k] })
		require.NoError(t, err, v)
		assert.Negative(t, c.View.MaxStaleness, v)
	}
	c, err := query.ConfigFromEnv(func(string) string { return "" })
	require.NoError(t, err)
	assert.Equal(t, fleetapi.DefaultMaxStaleness, c.View.MaxStaleness)
	_, err = query.ConfigFromEnv(func(k string) string { return map[string]string{"MAX_STALENESS": "-1s"}[k] })
	assert.ErrorContains(t, err, "MAX_STALENESS")
}

// TestChangeTopicNamesTheFeedTheViewFollows: CHANGE_TOPIC is a Pub/Sub
// topic ID, and a view asked to follow it needs the client OpenChanges
// opens.
func TestChangeTopicNamesTheFeedTheViewFollows(t *testing.T) {
	c, err := query.ConfigFromEnv(func(k string) string { return map[string]string{"CHANGE_TOPIC": "fc-fleet-changes"}[k] })
	require.NoError(t, err)
	assert.Equal(t, "fc-fleet-changes", c.ChangeTopic)
	_, err = query.ConfigFromEnv(func(k string) string { return map[string]string{"CHANGE_TOPIC": "projects/p/topics/t"}[k] })
	assert.ErrorContains(t, err, "CHANGE_TOPIC")
	_, err = query.NewView(nil, c, logging.New(io.Discard, logging.LevelWarning))
	assert.ErrorContains(t, err, "OpenChanges")
}

// placements answers GET /v1/placements?params, checking that the answer
// is not to be cached (each is drawn afresh).
func placements(t *testing.T, url string) fleetapi.Placements {
	t.Helper()
	resp, err := testhttp.Client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	assert.Empty(t, resp.Header.Get("ETag"))
	var p fleetapi.Placements
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	return p
}

// comparable orders a placement's candidates by rank, then by name (the
// order within a rank is drawn at random), and forgets the heartbeats'
// ages, which grow between two requests, and the draws, each request's
// own.
func comparable(p fleetapi.Placements) fleetapi.Placements {
	slices.SortFunc(p.Placements, func(a, b fleetapi.Placement) int {
		return cmp.Or(cmp.Compare(boolInt(a.Stale), boolInt(b.Stale)), cmp.Compare(a.Priority, b.Priority),
			cmp.Compare(a.Cluster+"/"+a.Namespace+"/"+a.Name, b.Cluster+"/"+b.Namespace+"/"+b.Name))
	})
	for i := range p.Placements {
		p.Placements[i].HeartbeatAgeMillis = 0
		p.Placements[i].DrawKey = 0
	}
	return p
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestPlaceEqualsTheHTTPAPI: over every protocol, Place answers what
// /v1/placements answers for the same request: the same candidates in the
// same ranks, the same reasons for the others, the same policy.
func TestPlaceEqualsTheHTTPAPI(t *testing.T) {
	srv := server(t)
	two, one := int32(2), int32(1)
	cases := []struct {
		params    string
		req       *fleetcastv1.PlaceRequest
		placed    int
		leftOut   []fleetapi.Reason
		policySrc string
	}{
		{"count=100", &fleetcastv1.PlaceRequest{Count: 100}, 7, []fleetapi.Reason{fleetapi.StaleCluster, fleetapi.TooLittleCapacity}, "none"},
		{"counter=rooms&minAvailable=8&count=10&policy=platform%3Dps5:0:2&policy=:1",
			&fleetcastv1.PlaceRequest{Filter: &fleetcastv1.FleetFilter{Counter: "rooms", MinCounterAvailable: 8}, Count: 10,
				Policy: []*fleetcastv1.PlacementRule{{ClusterSelector: "platform=ps5", Weight: &two}, {Priority: 1, Weight: &one}}},
			6, []fleetapi.Reason{fleetapi.StaleCluster, fleetapi.TooLittleCapacity}, "request"},
		{"selector=platform%3Dswitch", &fleetcastv1.PlaceRequest{Filter: &fleetcastv1.FleetFilter{Selector: "platform=switch"}},
			0, []fleetapi.Reason{fleetapi.FilteredOut}, "none"},
		{"includeStale=true&count=100&gameServers=3&policy=platform%3Dpc:0",
			&fleetcastv1.PlaceRequest{Filter: &fleetcastv1.FleetFilter{IncludeStale: true}, Count: 100, GameServers: 3,
				Policy: []*fleetcastv1.PlacementRule{{ClusterSelector: "platform=pc"}}},
			1, []fleetapi.Reason{fleetapi.NotInPolicy, fleetapi.TooLittleCapacity}, "request"},
	}
	for name, client := range clients(srv) {
		for _, tc := range cases {
			t.Run(name+"/"+tc.params, func(t *testing.T) {
				want := comparable(placements(t, srv.URL+"/v1/placements?"+tc.params))
				resp, err := client.Place(t.Context(), connect.NewRequest(tc.req))
				require.NoError(t, err)
				got := comparable(fleetpb.FromPlacements(resp.Msg))
				assert.Equal(t, want, got)
				assert.Len(t, got.Placements, tc.placed)
				var reasons []fleetapi.Reason
				for _, l := range got.LeftOut {
					reasons = append(reasons, l.Reason)
				}
				assert.Equal(t, tc.leftOut, reasons)
				assert.Equal(t, tc.policySrc, got.PolicySource)
			})
		}
	}
}

// TestPlaceBadRequests: a bad placement is invalid_argument naming the
// request's field, and 400 naming the parameter.
func TestPlaceBadRequests(t *testing.T) {
	srv := server(t)
	tests := []struct {
		req    *fleetcastv1.PlaceRequest
		params string
		field  string
	}{
		{&fleetcastv1.PlaceRequest{Count: 101}, "count=101", "count"},
		{&fleetcastv1.PlaceRequest{Count: -1}, "count=-1", "count"},
		{&fleetcastv1.PlaceRequest{GameServers: -1}, "gameServers=-1", "game_servers"},
		{&fleetcastv1.PlaceRequest{Policy: []*fleetcastv1.PlacementRule{{ClusterSelector: "region in (eu"}}}, "policy=region+in+(eu:0", "policy"},
		{&fleetcastv1.PlaceRequest{Policy: []*fleetcastv1.PlacementRule{{Priority: -1}}}, "policy=:-1", "policy"},
		{&fleetcastv1.PlaceRequest{Filter: &fleetcastv1.FleetFilter{Counter: "seats"}}, "counter=seats", "filter.counter"},
	}
	for name, client := range clients(srv) {
		for _, tt := range tests {
			t.Run(name+"/"+tt.params, func(t *testing.T) {
				_, err := client.Place(t.Context(), connect.NewRequest(tt.req))
				ce, ok := errors.AsType[*connect.Error](err)
				require.True(t, ok, "%v", err)
				assert.Equal(t, connect.CodeInvalidArgument, ce.Code())
				assert.True(t, strings.HasPrefix(ce.Message(), tt.field+": "), "%q names %s", ce.Message(), tt.field)
				resp, err := testhttp.Client.Get(srv.URL + "/v1/placements?" + tt.params)
				require.NoError(t, err)
				defer resp.Body.Close()
				assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
			})
		}
	}
}

// TestPlacementPolicyFromTheEnvironment: PLACEMENT_POLICY is the default
// policy, rules separated by semicolons; a bad rule stops the start.
func TestPlacementPolicyFromTheEnvironment(t *testing.T) {
	c, err := query.ConfigFromEnv(func(k string) string {
		return map[string]string{"PLACEMENT_POLICY": "region=eu-west:0:100; region=eu-north:1:100 ;"}[k]
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"region=eu-west:0:100", "region=eu-north:1:100"}, c.View.Policy.Strings())
	_, err = query.ConfigFromEnv(func(k string) string { return map[string]string{"PLACEMENT_POLICY": "region=eu-west"}[k] })
	assert.ErrorContains(t, err, `PLACEMENT_POLICY="region=eu-west": "region=eu-west": want SELECTOR:PRIORITY[:WEIGHT]`)
}
