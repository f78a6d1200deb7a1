package query_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetapitest"
	"github.com/fleetcast/fleetcast/functions/query"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/logging"
)

// event is a watch event as a test reads it off any protocol.
type event struct {
	kind  string // added, modified, removed, cluster, synced, restart, heartbeat
	name  string // cluster/fleet, or cluster
	ready int64
	stale bool
	count int
	token string
}

func (e event) String() string {
	switch e.kind {
	case "synced":
		return fmt.Sprintf("synced %d", e.count)
	case "cluster":
		return fmt.Sprintf("cluster %s stale=%t", e.name, e.stale)
	case "added", "modified", "removed":
		return e.kind + " " + e.name
	}
	return e.kind
}

// stream is one open watch: next returns its next event other than a
// heartbeat.
type stream struct {
	next  func(t *testing.T) event
	close func()
}

// opener opens a watch over one protocol: filter and resume token as
// /v1/watch parameters.
type opener func(t *testing.T, params url.Values) stream

func openers(srvURL string, clients map[string]fleetcastv1connect.InformationServiceClient) map[string]opener {
	out := map[string]opener{"sse": func(t *testing.T, params url.Values) stream { return openSSE(t, srvURL, params) }}
	for name, c := range clients {
		out[name] = func(t *testing.T, params url.Values) stream { return openRPC(t, c, params) }
	}
	return out
}

func openRPC(t *testing.T, c fleetcastv1connect.InformationServiceClient, params url.Values) stream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req := &fleetcastv1.WatchFleetsRequest{Filter: &fleetcastv1.FleetFilter{Clusters: params["cluster"], Selector: params.Get("selector"),
		IncludeStale: params.Get("includeStale") == "true"}, ResumeToken: params.Get("resumeToken")}
	st, err := c.WatchFleets(ctx, connect.NewRequest(req))
	require.NoError(t, err)
	return stream{close: cancel, next: func(t *testing.T) event {
		t.Helper()
		for {
			require.True(t, st.Receive(), "stream ended: %v", st.Err())
			m := st.Msg()
			e := event{token: m.GetResumeToken()}
			switch ev := m.GetEvent().(type) {
			case *fleetcastv1.WatchFleetsResponse_Fleet:
				f := ev.Fleet.GetFleet()
				e.kind = strings.ToLower(strings.TrimPrefix(ev.Fleet.GetType().String(), "CHANGE_TYPE_"))
				e.name, e.ready, e.stale = f.GetClusterName()+"/"+f.GetFleetName(), f.GetReadyGameservers(), f.GetStale()
			case *fleetcastv1.WatchFleetsResponse_Cluster:
				e.kind, e.name, e.stale = "cluster", ev.Cluster.GetCluster().GetClusterName(), ev.Cluster.GetCluster().GetStale()
			case *fleetcastv1.WatchFleetsResponse_Synced:
				e.kind, e.count = "synced", int(ev.Synced.GetFleetCount())
			case *fleetcastv1.WatchFleetsResponse_Restart:
				e.kind = "restart"
			case *fleetcastv1.WatchFleetsResponse_Heartbeat:
				continue
			default:
				t.Fatalf("unknown event %v", m)
			}
			return e
		}
	}}
}

// openSSE reads GET /v1/watch as a browser's EventSource does.
func openSSE(t *testing.T, srvURL string, params url.Values) stream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	token := params.Get("resumeToken")
	params = cloneWithout(params, "resumeToken")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srvURL+"/v1/watch?"+params.Encode(), nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	if token != "" {
		req.Header.Set("Last-Event-ID", token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return stream{close: func() { cancel(); resp.Body.Close() }, next: func(t *testing.T) event {
		t.Helper()
		for {
			var id, kind, data string
			for sc.Scan() && sc.Text() != "" {
				field, value, _ := strings.Cut(sc.Text(), ": ")
				switch field {
				case "id":
					id = value
				case "event":
					kind = value
				case "data":
					data = value
				}
			}
			require.NoError(t, sc.Err())
			require.NotEmpty(t, kind, "stream ended")
			e := event{kind: kind, token: id}
			switch kind {
			case "heartbeat":
				continue
			case "added", "modified", "removed":
				var f fleetapi.Fleet
				require.NoError(t, json.Unmarshal([]byte(data), &f))
				e.name, e.ready, e.stale = f.Cluster+"/"+f.Name, f.ReadyReplicas, f.Stale
			case "cluster":
				var c fleetapi.Cluster
				require.NoError(t, json.Unmarshal([]byte(data), &c))
				e.name, e.stale = c.Cluster, c.Stale
			case "synced":
				var s struct{ FleetCount int }
				require.NoError(t, json.Unmarshal([]byte(data), &s))
				e.count = s.FleetCount
			}
			return e
		}
	}}
}

func cloneWithout(v url.Values, name string) url.Values {
	out := url.Values{}
	for k, vals := range v {
		if k != name {
			out[k] = vals
		}
	}
	return out
}

func (s stream) take(t *testing.T, n int) []event {
	t.Helper()
	out := make([]event, 0, n)
	for range n {
		out = append(out, s.next(t))
	}
	return out
}

func strs(events []event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, e.String())
	}
	return out
}

// put writes a fleet of the test server's store at a new version.
func put(mem *fleetapitest.Memory, seq int64, cluster, name string, ready int64) {
	mem.PutFleet(fleet.Document{Cluster: cluster, Namespace: "games", Name: name, UID: "u", Version: fleet.Version{Term: 2, Seq: seq},
		Labels: map[string]string{"platform": cluster}, Spec: &fleet.Spec{Replicas: 10},
		Status:    &fleet.DocStatus{Replicas: 10, ReadyReplicas: ready, Counters: map[string]fleet.DocAggregate{}, Lists: map[string]fleet.DocAggregate{}},
		Publisher: fleet.Publisher{ID: "p"}, ObservedAt: time.Now(), IngestedAt: time.Now()})
}

// TestWatchFleetsOverEveryProtocol: Connect (binary and JSON), gRPC-Web,
// gRPC over h2c and Server-Sent Events deliver the initial set, then a
// change, a delete and a cluster going stale; a client that reconnects
// with the token of the last event it handled gets exactly what it
// missed.
func TestWatchFleetsOverEveryProtocol(t *testing.T) {
	for _, name := range []string{"sse", "connect", "connect-json", "grpc-web", "grpc (h2c)"} {
		t.Run(name, func(t *testing.T) {
			srv, mem := serverOver(t)
			open := openers(srv.URL, clients(srv))[name]
			w := open(t, url.Values{"selector": {"platform in (pc,ps5)"}})
			assert.Equal(t, []string{"cluster pc stale=false", "cluster ps5 stale=false", "cluster xbox stale=true",
				"added pc/f0", "added pc/f1", "added pc/f2", "added pc/f3",
				"added ps5/f0", "added ps5/f1", "added ps5/f2", "added ps5/f3", "synced 8"}, strs(w.take(t, 12)))

			put(mem, 100, "pc", "f1", 7)
			e := w.next(t)
			assert.Equal(t, "modified pc/f1", e.String())
			assert.EqualValues(t, 7, e.ready)

			mem.PutFleet(*fleet.Tombstone(fleet.Key{Cluster: "pc", Namespace: "games", Name: "f2"}, fleet.Version{Term: 2, Seq: 101},
				fleet.Publisher{ID: "p"}, time.Now(), time.Now(), time.Hour))
			assert.Equal(t, "removed pc/f2", w.next(t).String())

			// ps5's heartbeat is an hour old: it turns stale, its fleets
			// leave the set.
			mem.PutCluster(fleet.ClusterDocument{Cluster: "ps5", Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 2, Seq: 102},
				SnapshotParts: 1, IngestedAt: time.Now().Add(-time.Hour), HeartbeatAt: time.Now().Add(-time.Hour)})
			events := w.take(t, 5)
			assert.Equal(t, []string{"cluster ps5 stale=true", "removed ps5/f0", "removed ps5/f1", "removed ps5/f2", "removed ps5/f3"}, strs(events))
			assert.True(t, events[1].stale)
			last := events[4].token
			w.close()

			// Missed while disconnected: a change, a new fleet, a delete.
			put(mem, 103, "pc", "f0", 9)
			put(mem, 104, "pc", "f9", 1)
			mem.PutFleet(*fleet.Tombstone(fleet.Key{Cluster: "pc", Namespace: "games", Name: "f3"}, fleet.Version{Term: 2, Seq: 105},
				fleet.Publisher{ID: "p"}, time.Now(), time.Now(), time.Hour))
			waitFor(t, srv.URL, "pc", 3) // the view has them
			w = open(t, url.Values{"selector": {"platform in (pc,ps5)"}, "resumeToken": {last}})
			defer w.close()
			assert.Equal(t, []string{"modified pc/f0", "removed pc/f3", "added pc/f9", "synced 3"}, strs(w.take(t, 4)))
			put(mem, 106, "pc", "f9", 2)
			assert.Equal(t, "modified pc/f9", w.next(t).String(), "and it goes on")
		})
	}
}

// waitFor polls /v1/fleets until cluster has n fleets.
func waitFor(t *testing.T, srvURL, cluster string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		return len(getList(t, srvURL+"/v1/fleets?cluster="+cluster).Items) == n
	}, 10*time.Second, 5*time.Millisecond)
}

// TestWatchBadRequests: a bad filter or token is invalid_argument naming
// the field, over RPC, and a 400 naming the parameter over SSE.
func TestWatchBadRequests(t *testing.T) {
	srv := server(t)
	for name, client := range clients(srv) {
		for _, tc := range []struct {
			req   *fleetcastv1.WatchFleetsRequest
			field string
		}{
			{&fleetcastv1.WatchFleetsRequest{Filter: &fleetcastv1.FleetFilter{Selector: "version in (1"}}, "filter.selector"},
			{&fleetcastv1.WatchFleetsRequest{ResumeToken: "garbage"}, "resume_token"},
			{&fleetcastv1.WatchFleetsRequest{Filter: &fleetcastv1.FleetFilter{Counter: "seats"}}, "filter.counter"},
		} {
			t.Run(name+"/"+tc.field, func(t *testing.T) {
				st, err := client.WatchFleets(t.Context(), connect.NewRequest(tc.req))
				if err == nil {
					assert.False(t, st.Receive())
					err = st.Err()
				}
				ce, ok := errors.AsType[*connect.Error](err)
				require.True(t, ok, "%v", err)
				assert.Equal(t, connect.CodeInvalidArgument, ce.Code())
				assert.True(t, strings.HasPrefix(ce.Message(), tc.field+": "), "%q names %s", ce.Message(), tc.field)
			})
		}
	}
	for _, tc := range []struct{ params, param string }{
		{"selector=version+in+(1", "selector"}, {"resumeToken=garbage", "resumeToken"}, {"pageSize=3", "pageSize"}, {"orderBy=ready", "orderBy"},
	} {
		resp, err := http.Get(srv.URL + "/v1/watch?" + tc.params)
		require.NoError(t, err)
		var body struct {
			Error struct{ Status, Param string }
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, tc.params)
		assert.Equal(t, "INVALID_ARGUMENT", body.Error.Status)
		assert.Equal(t, tc.param, body.Error.Param)
	}
	resp, err := http.Post(srv.URL+"/v1/watch", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// TestStreamsEndBeforeTheTimeout: with a request deadline (the Functions
// Framework sets one from Cloud Run's timeout), a watch ends shortly before
// it, telling the client to resume: UNAVAILABLE over RPC, an error event
// over SSE.
func TestStreamsEndBeforeTheTimeout(t *testing.T) {
	mem := fleetapitest.NewMemory(time.Now)
	log := logging.New(io.Discard, logging.LevelWarning)
	h := query.NewHandler(fleetapi.NewService(mem, fleetapi.Options{Log: log}), log)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second+300*time.Millisecond)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
	defer srv.Close()

	st, err := fleetcastv1connect.NewInformationServiceClient(http.DefaultClient, srv.URL).
		WatchFleets(t.Context(), connect.NewRequest(&fleetcastv1.WatchFleetsRequest{}))
	require.NoError(t, err)
	for st.Receive() {
	}
	assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(st.Err()))
	assert.Contains(t, st.Err().Error(), "resume")

	resp, err := http.Get(srv.URL + "/v1/watch")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(body), "event: synced\n")
	assert.True(t, strings.HasSuffix(string(body), "event: error\ndata: {\"code\":503,\"message\":\"the stream reached the function's timeout; resume with the last resume token\",\"status\":\"UNAVAILABLE\"}\n\n"), body)
}
