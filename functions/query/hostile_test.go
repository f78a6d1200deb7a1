package query_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"net/http"
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
	"github.com/fleetcast/fleetcast/internal/watchtest"
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
	resp, err := http.Get(srv.URL + "/v1/labels/app.kubernetes.io%2Fversion")
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
		resp, err := http.DefaultClient.Do(req)
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
