package query_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
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
	"github.com/fleetcast/fleetcast/functions/query"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/internal/testenv/watchtest"
	"github.com/fleetcast/fleetcast/logging"
)

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
	for _, name := range watchtest.Protocols {
		t.Run(name, func(t *testing.T) {
			srv, mem := serverOver(t)
			w := watchtest.Open(t, srv.URL, name, url.Values{"selector": {"platform in (pc,ps5)"}})
			assert.Equal(t, []string{"cluster pc stale=false", "cluster ps5 stale=false", "cluster xbox stale=true",
				"added pc/f0", "added pc/f1", "added pc/f2", "added pc/f3",
				"added ps5/f0", "added ps5/f1", "added ps5/f2", "added ps5/f3", "synced 8"}, watchtest.Strings(w.Take(t, 12)))

			put(mem, 100, "pc", "f1", 7)
			e := w.Next(t)
			assert.Equal(t, "modified pc/f1", e.String())
			assert.EqualValues(t, 7, e.Ready)

			mem.PutFleet(*fleet.Tombstone(fleet.Key{Cluster: "pc", Namespace: "games", Name: "f2"}, fleet.Version{Term: 2, Seq: 101},
				fleet.Publisher{ID: "p"}, time.Now(), time.Now(), time.Hour))
			assert.Equal(t, "removed pc/f2", w.Next(t).String())

			// ps5's heartbeat is an hour old: it turns stale, its fleets
			// leave the set.
			mem.PutCluster(fleet.ClusterDocument{Cluster: "ps5", Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 2, Seq: 102},
				SnapshotParts: 1, IngestedAt: time.Now().Add(-time.Hour), HeartbeatAt: time.Now().Add(-time.Hour)})
			events := w.Take(t, 5)
			assert.Equal(t, []string{"cluster ps5 stale=true", "removed ps5/f0", "removed ps5/f1", "removed ps5/f2", "removed ps5/f3"}, watchtest.Strings(events))
			assert.True(t, events[1].Stale)
			last := events[4].Token
			w.Close()

			// Missed while disconnected: a change, a new fleet, a delete.
			put(mem, 103, "pc", "f0", 9)
			put(mem, 104, "pc", "f9", 1)
			mem.PutFleet(*fleet.Tombstone(fleet.Key{Cluster: "pc", Namespace: "games", Name: "f3"}, fleet.Version{Term: 2, Seq: 105},
				fleet.Publisher{ID: "p"}, time.Now(), time.Now(), time.Hour))
			waitFor(t, srv.URL, "pc", 3) // the view has them
			w = watchtest.Open(t, srv.URL, name, url.Values{"selector": {"platform in (pc,ps5)"}, "resumeToken": {last}})
			defer w.Close()
			assert.Equal(t, []string{"modified pc/f0", "removed pc/f3", "added pc/f9", "synced 3"}, watchtest.Strings(w.Take(t, 4)))
			put(mem, 106, "pc", "f9", 2)
			assert.Equal(t, "modified pc/f9", w.Next(t).String(), "and it goes on")
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
		resp, err := testhttp.Client.Get(srv.URL + "/v1/watch?" + tc.params)
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
	resp, err := testhttp.Client.Post(srv.URL+"/v1/watch", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// TestStreamsEndBeforeTheTimeout: with a request deadline (the Functions
// Framework sets one from Cloud Run's timeout), a watch ends shortly before
// it, telling the client to resume: UNAVAILABLE over RPC, an error event
// over SSE. The stream was quiet for longer than the stream write timeout
// before its end: that last message has the whole timeout to be written.
func TestStreamsEndBeforeTheTimeout(t *testing.T) {
	mem := fleetapitest.NewMemory(time.Now)
	log := logging.New(io.Discard, logging.LevelWarning)
	const writeTimeout = 200 * time.Millisecond
	h := query.NewHandler(fleetapi.NewService(mem, fleetapi.Options{Log: log}), log, query.WithStreamWriteTimeout(writeTimeout))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The stream ends 2 s (the margin) before this: after its
		// initial set, and 4 write timeouts of quiet.
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second+5*writeTimeout)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
	defer srv.Close()

	st, err := fleetcastv1connect.NewInformationServiceClient(testhttp.Client, srv.URL).
		WatchFleets(t.Context(), connect.NewRequest(&fleetcastv1.WatchFleetsRequest{}))
	require.NoError(t, err)
	for st.Receive() {
	}
	assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(st.Err()))
	assert.Contains(t, st.Err().Error(), "resume")

	resp, err := testhttp.Client.Get(srv.URL + "/v1/watch")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(body), "event: synced\n")
	assert.True(t, strings.HasSuffix(string(body), "event: error\ndata: {\"code\":503,\"message\":\"the stream reached the server's request timeout; resume with the last resume token\",\"status\":\"UNAVAILABLE\"}\n\n"), body)
}

// TestWatchFleetsOverPlainHTTP: any language can follow WatchFleets with
// an HTTP client and a JSON parser: the Connect protocol frames each
// message with a flag byte and a 4-byte big-endian length, and ends the
// stream with a frame flagged 2 that carries any error.
func TestWatchFleetsOverPlainHTTP(t *testing.T) {
	srv := server(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	body := []byte(`{"filter":{"clusters":["pc"]}}`)
	frame := append([]byte{0, 0, 0, 0, byte(len(body))}, body...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/fleetcast.v1.InformationService/WatchFleets", bytes.NewReader(frame))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/connect+json")
	resp, err := testhttp.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var kinds []string
	for len(kinds) < 5 {
		var head [5]byte
		_, err := io.ReadFull(resp.Body, head[:])
		require.NoError(t, err)
		msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
		_, err = io.ReadFull(resp.Body, msg)
		require.NoError(t, err)
		require.Zero(t, head[0]&2, "the stream ended: %s", msg)
		var m struct {
			ResumeToken string
			Cluster     *struct{ Cluster struct{ ClusterName string } }
			Fleet       *struct {
				Type  string
				Fleet struct{ FleetName string }
			}
		}
		require.NoError(t, json.Unmarshal(msg, &m), "%s", msg)
		require.NotEmpty(t, m.ResumeToken)
		switch {
		case m.Cluster != nil:
			kinds = append(kinds, "cluster "+m.Cluster.Cluster.ClusterName)
		case m.Fleet != nil:
			kinds = append(kinds, m.Fleet.Type+" "+m.Fleet.Fleet.FleetName)
		}
	}
	assert.Equal(t, []string{"cluster pc", "CHANGE_TYPE_ADDED f0", "CHANGE_TYPE_ADDED f1", "CHANGE_TYPE_ADDED f2", "CHANGE_TYPE_ADDED f3"}, kinds)
}
