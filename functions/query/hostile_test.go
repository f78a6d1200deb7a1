package query_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/internal/testenv/watchtest"
	"github.com/fleetcast/fleetcast/logging"
)

// TestADocumentNoAnswerCanHoldFailsNoAnswer: stored documents that no
// answer can encode — an autoscaler's last scale after year 9999, an
// observedAt past it, a label that is not UTF-8 (written by anything but
// the ingest function, which bounds every time) — are left out of every
// answer, and the other fleets are answered: /v1/fleets, /v1/labels,
// Inform over every protocol, and the initial set of every watch.
func TestADocumentNoAnswerCanHoldFailsNoAnswer(t *testing.T) {
	srv, mem := serverOver(t)
	poison := func(seq int64, name string, edit func(*fleet.Document)) {
		d := fleet.Document{Cluster: "pc", Namespace: "games", Name: name, UID: "u", Version: fleet.Version{Term: 2, Seq: seq},
			Labels: map[string]string{"platform": "pc", "app.kubernetes.io/version": "1.42"}, Spec: &fleet.Spec{Replicas: 1},
			Status: &fleet.DocStatus{Replicas: 1, ReadyReplicas: 1}, ObservedAt: time.Now(), IngestedAt: time.Now()}
		edit(&d)
		mem.PutFleet(d)
	}
	poison(100, "scaled-in-year-10000", func(d *fleet.Document) {
		d.Autoscalers = []fleet.Autoscaler{{Name: "a", Status: fleet.AutoscalerStatus{LastScaleTime: fleet.MaxMicros + 1}}}
	})
	poison(101, "observed-in-year-10000", func(d *fleet.Document) { d.ObservedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) })
	poison(102, "not-utf8", func(d *fleet.Document) { d.Labels["note"] = "\xff" })

	l := getList(t, srv.URL+"/v1/fleets?cluster=pc")
	assert.Len(t, l.Items, 4, "the four good fleets of pc, and none of the three")
	resp, err := testhttp.Client.Get(srv.URL + "/v1/labels/app.kubernetes.io%2Fversion")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	for name, client := range clients(srv) {
		t.Run("Inform/"+name, func(t *testing.T) {
			got, err := client.Inform(t.Context(), connect.NewRequest(&fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Clusters: []string{"pc"}}}))
			require.NoError(t, err)
			assert.Len(t, got.Msg.FleetInformation, 4)
		})
	}
	for _, name := range watchtest.Protocols {
		t.Run("Watch/"+name, func(t *testing.T) {
			w := watchtest.Open(t, srv.URL, name, url.Values{"cluster": {"pc"}})
			defer w.Close()
			assert.Equal(t, []string{"cluster pc stale=false", "added pc/f0", "added pc/f1", "added pc/f2", "added pc/f3", "synced 4"},
				watchtest.Strings(w.Take(t, 6)))
		})
	}

	// A good fleet that turns into such a document leaves the answers
	// rather than keep a state it no longer has.
	poison(103, "f0", func(d *fleet.Document) { d.ObservedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) })
	require.Eventually(t, func() bool { return len(getList(t, srv.URL+"/v1/fleets?cluster=pc").Items) == 3 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"f1", "f2", "f3"}, fleetNames(getList(t, srv.URL+"/v1/fleets?cluster=pc")))
}

func fleetNames(l fleetapi.FleetList) []string {
	var out []string
	for _, f := range l.Items {
		out = append(out, f.Name)
	}
	return out
}

// gzipped compresses b.
func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// informOf is an InformRequest whose JSON is exactly n bytes.
func informOf(n int) []byte {
	const frame = `{"filter":{"selector":""}}`
	return []byte(`{"filter":{"selector":"` + strings.Repeat("a", n-len(frame)) + `"}}`)
}

// TestARequestIsBoundedAfterDecompression: a 64 KiB gzip that inflates to
// 64 MiB is refused as resource_exhausted before it is inflated — over
// Connect (unary and streaming) and over real gRPC — while a request of
// exactly query.MaxRequestBytes is read (and judged on its content).
func TestARequestIsBoundedAfterDecompression(t *testing.T) {
	srv := server(t)
	bomb := gzipped(t, informOf(64<<20))
	require.Less(t, len(bomb), 128<<10, "a small request on the wire")

	post := func(t *testing.T, path, contentType string, header map[string]string, body []byte) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", contentType)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := testhttp.Client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const inform = "/fleetcast.v1.InformationService/Inform"
	t.Run("connect unary", func(t *testing.T) {
		code, body := post(t, inform, "application/json", map[string]string{"Content-Encoding": "gzip"}, bomb)
		assert.Equal(t, http.StatusTooManyRequests, code, body) // Connect's resource_exhausted
		assert.Contains(t, body, `"code":"resource_exhausted"`)

		code, body = post(t, inform, "application/json", map[string]string{"Content-Encoding": "gzip"}, gzipped(t, informOf(query.MaxRequestBytes)))
		assert.Equal(t, http.StatusBadRequest, code, "at the limit: read, and refused for its selector: %s", body)
		assert.Contains(t, body, "filter.selector")
		code, body = post(t, inform, "application/json", map[string]string{"Content-Encoding": "gzip"}, gzipped(t, informOf(query.MaxRequestBytes+1)))
		assert.Equal(t, http.StatusTooManyRequests, code, "one byte past it: %s", body)
	})
	t.Run("connect streaming", func(t *testing.T) {
		frame := binary.BigEndian.AppendUint32([]byte{1}, uint32(len(bomb))) // flag 1: compressed
		code, body := post(t, "/fleetcast.v1.InformationService/WatchFleets", "application/connect+json",
			map[string]string{"Connect-Content-Encoding": "gzip"}, append(frame, bomb...))
		assert.Equal(t, http.StatusOK, code)
		require.GreaterOrEqual(t, len(body), 5)
		end := []byte(body[5:]) // the end-of-stream frame, compressed as the request was
		if body[0]&1 != 0 {
			zr, err := gzip.NewReader(bytes.NewReader(end))
			require.NoError(t, err)
			end, err = io.ReadAll(zr)
			require.NoError(t, err)
		}
		assert.Contains(t, string(end), `"code":"resource_exhausted"`)
	})
	t.Run("grpc", func(t *testing.T) {
		conn, err := grpc.NewClient(strings.TrimPrefix(srv.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		big := &fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Selector: strings.Repeat("a", 64<<20)}}
		err = conn.Invoke(t.Context(), inform, big, new(fleetcastv1.InformResponse), grpc.UseCompressor(grpcgzip.Name))
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		err = conn.Invoke(t.Context(), inform, &fleetcastv1.InformRequest{}, new(fleetcastv1.InformResponse), grpc.UseCompressor(grpcgzip.Name))
		assert.NoError(t, err, "a small request goes through")
	})
	t.Run("plain HTTP", func(t *testing.T) {
		code, _ := post(t, "/v1/fleets", "application/json", nil, make([]byte, query.MaxRequestBytes+1))
		assert.Equal(t, http.StatusMethodNotAllowed, code, "no /v1 endpoint reads a body")
	})
}

// smallBuffers is a listener whose connections have small send buffers,
// so that a client that stops reading blocks the server's writes soon.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// streamServer serves n fleets of one cluster from memory with the
// handler's options, over HTTP/1.1 and h2c, its log in logs.
func streamServer(t *testing.T, n int, view fleetapi.Options, opts ...query.HandlerOption) (*httptest.Server, *syncbuf.Buffer) {
	t.Helper()
	mem := fleetapitest.NewMemory(time.Now)
	now := time.Now()
	mem.PutCluster(fleet.ClusterDocument{Cluster: "pc", Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: 1},
		SnapshotParts: 1, IngestedAt: now, HeartbeatAt: now, FleetCount: int64(n)})
	for i := range n {
		mem.PutFleet(fleet.Document{Cluster: "pc", Namespace: "games", Name: fmt.Sprintf("fleet-%05d", i), UID: "u", Version: fleet.Version{Term: 1, Seq: int64(i + 2)},
			Labels: map[string]string{"platform": "pc", "app.kubernetes.io/version": "1.42.0"}, Spec: &fleet.Spec{Replicas: 10},
			Status: &fleet.DocStatus{Replicas: 10, ReadyReplicas: 5}, ObservedAt: now, IngestedAt: now})
	}
	logs := &syncbuf.Buffer{}
	log := logging.New(logs, logging.LevelWarning)
	view.Log, view.WatchPoll = log, 5*time.Millisecond
	srv := httptest.NewUnstartedServer(query.NewHandler(fleetapi.NewService(mem, view), log, opts...))
	srv.Listener = smallBuffers{srv.Listener}
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, logs
}

// stall opens a watch over protocol that never reads what it is sent,
// with small receive buffers, until the test ends.
func stall(t *testing.T, srvURL, protocol string) {
	t.Helper()
	addr := strings.TrimPrefix(srvURL, "http://")
	if protocol == "grpc" {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10)) // no window growth
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		desc := &grpc.StreamDesc{ServerStreams: true}
		st, err := conn.NewStream(t.Context(), desc, "/fleetcast.v1.InformationService/WatchFleets")
		require.NoError(t, err)
		require.NoError(t, st.SendMsg(&fleetcastv1.WatchFleetsRequest{}))
		require.NoError(t, st.CloseSend())
		return // and never RecvMsg
	}
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	switch protocol {
	case "sse":
		_, err = fmt.Fprintf(c, "GET /v1/watch HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	case "connect":
		body := append(binary.BigEndian.AppendUint32([]byte{0}, 2), "{}"...)
		_, err = fmt.Fprintf(c, "POST /fleetcast.v1.InformationService/WatchFleets HTTP/1.1\r\nHost: %s\r\nContent-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	}
	require.NoError(t, err)
}

// TestAStalledStreamIsDroppedAndFreesItsPlace: a client that opens a
// watch of 3 000 fleets and reads nothing — over SSE, Connect or gRPC —
// is dropped once a write waits past the stream write timeout, logged,
// and its place among the instance's streams is free again: a new watch
// is served although the instance serves one at most.
func TestAStalledStreamIsDroppedAndFreesItsPlace(t *testing.T) {
	for _, protocol := range []string{"sse", "connect", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			srv, logs := streamServer(t, 3000, fleetapi.Options{MaxWatches: 1}, query.WithStreamWriteTimeout(300*time.Millisecond))
			stall(t, srv.URL, protocol)
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "stream dropped: its client read nothing") },
				20*time.Second, 10*time.Millisecond, "the stalled stream is dropped: %s", logs.String())
			assert.Contains(t, logs.String(), `"stalledStreamsTotal":1`)
			require.Eventually(t, func() bool {
				w := watchtest.Open(t, srv.URL, "connect", url.Values{"selector": {"platform=none"}})
				defer w.Close()
				return len(w.Take(t, 2)) == 2 // cluster, synced
			}, 10*time.Second, 50*time.Millisecond)
		})
	}
}

// TestStreamsPerInstanceAreCapped: past MaxWatches streams an instance
// refuses another — 503 with Retry-After and the API's error document over
// SSE, resource_exhausted over Connect and gRPC — and serves it again once
// one ends.
func TestStreamsPerInstanceAreCapped(t *testing.T) {
	srv, _ := streamServer(t, 3, fleetapi.Options{MaxWatches: 2})
	first := watchtest.Open(t, srv.URL, "sse", nil)
	second := watchtest.Open(t, srv.URL, "grpc (h2c)", nil)
	first.Take(t, 5)
	second.Take(t, 5)

	resp, err := testhttp.Client.Get(srv.URL + "/v1/watch")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Contains(t, string(body), `"status":"RESOURCE_EXHAUSTED"`)
	for name, client := range clients(srv) {
		st, err := client.WatchFleets(t.Context(), connect.NewRequest(&fleetcastv1.WatchFleetsRequest{}))
		require.NoError(t, err)
		assert.False(t, st.Receive(), name)
		assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(st.Err()), "%s: %v", name, st.Err())
		st.Close()
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	st, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ServerStreams: true}, "/fleetcast.v1.InformationService/WatchFleets")
	require.NoError(t, err)
	require.NoError(t, st.SendMsg(&fleetcastv1.WatchFleetsRequest{}))
	require.NoError(t, st.CloseSend())
	assert.Equal(t, codes.ResourceExhausted, status.Code(st.RecvMsg(new(fleetcastv1.WatchFleetsResponse))), "real gRPC")

	first.Close()
	// The closed stream's place frees once the server has seen it go:
	// retried without failing the test on an attempt still refused.
	client := clients(srv)["connect"]
	require.Eventually(t, func() bool {
		resp, err := testhttp.Client.Get(srv.URL + "/v1/fleets") // not a stream: never capped
		if err == nil {
			resp.Body.Close()
		}
		st, err := client.WatchFleets(t.Context(), connect.NewRequest(&fleetcastv1.WatchFleetsRequest{}))
		if err != nil {
			return false
		}
		defer st.Close()
		return st.Receive()
	}, 10*time.Second, 20*time.Millisecond, "a place is free again: a new stream is served")
}
