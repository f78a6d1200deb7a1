package allocator

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
	"github.com/fleetcast/fleetcast/internal/testenv/otlptest"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/internal/testenv/tlstest"
	"github.com/fleetcast/fleetcast/telemetry"
)

// front is the allocation service on one mutual-TLS port, as a
// matchmaker reaches it: its CA, a client certificate it trusts, and its
// address.
type front struct {
	ca      *tlstest.CA
	client  tls.Certificate
	addr    string
	metrics *Metrics
}

// serveFront serves svc's clusters' allocators behind a Service over a
// world where pc and ps5 each run a fleet "ranked" of 5 Ready game
// servers labelled mode=ranked, pc at priority 0 and ps5 at 1.
func serveFront(t *testing.T, p pki, pcAddr, ps5Addr string) front {
	t.Helper()
	w := fleetapitest.NewWorld()
	for _, c := range []string{"pc", "ps5"} {
		w.Put(&fleet.Document{Cluster: c, Namespace: "games", Name: "ranked", UID: "u", GameServerLabels: map[string]string{"mode": "ranked"},
			Status: &fleet.DocStatus{Replicas: 5, ReadyReplicas: 5}, Publisher: fleet.Publisher{ID: "p"}})
	}
	w.Settle()
	view := fleetapi.NewService(w.Mem, fleetapi.Options{Now: w.Clock.Now, MaxStaleness: -1, StaleAfter: time.Minute})
	policies := []Policy{
		{Name: "pc", Cluster: "pc", Priority: 0, Weight: 1, Endpoints: []string{pcAddr}},
		{Name: "ps5", Cluster: "ps5", Priority: 1, Weight: 1, Endpoints: []string{ps5Addr}},
	}
	metrics := NewMetrics(prometheus.NewRegistry())
	svc := NewService(view, p.forwarder(t, ForwarderOptions{ConnectTimeout: 5 * time.Second}), policies, nil, metrics)
	f := front{ca: tlstest.NewCA(t, "fleetcast-allocator"), metrics: metrics}
	f.client = f.ca.Client(t, "matchmaker").TLS(t)
	srv := NewGRPCServer(svc)
	hs := &http.Server{Handler: Handler(svc, srv), TLSConfig: &tls.Config{Certificates: []tls.Certificate{f.ca.Server(t, "fleetcast-allocator").TLS(t)},
		ClientCAs: f.ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = hs.ServeTLS(lis, "", "") }()
	t.Cleanup(func() { _ = hs.Close() })
	f.addr = lis.Addr().String()
	return f
}

func (f front) grpcClient(t *testing.T, cert tls.Certificate) pb.AllocationServiceClient {
	cc, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert},
		RootCAs: f.ca.Pool(), MinVersion: tls.VersionTLS12})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return pb.NewAllocationServiceClient(cc)
}

// TestServiceAllocatesThroughAgonesAPI: a client of Agones' allocation
// API, unchanged but for the address, allocates: in the priority 0
// cluster while it has room, in the next when it is full.
func TestServiceAllocatesThroughAgonesAPI(t *testing.T) {
	p := newPKI(t)
	var pcFull atomic.Bool
	pc := &stubAllocator{answer: func(context.Context, *pb.AllocationRequest) (*pb.AllocationResponse, error) {
		if pcFull.Load() {
			return nil, status.Error(codes.ResourceExhausted, "no available GameServer to allocate")
		}
		return &pb.AllocationResponse{GameServerName: "ranked-pc-1"}, nil
	}}
	f := serveFront(t, p, p.serve(t, p.ca, pc), p.serve(t, p.ca, allocates("ranked-ps5-1")))
	client := f.grpcClient(t, f.client)
	req := &pb.AllocationRequest{Namespace: "games", GameServerSelectors: []*pb.GameServerSelector{{MatchLabels: map[string]string{"mode": "ranked"}}}}

	resp, err := client.Allocate(t.Context(), req)
	require.NoError(t, err)
	assert.Equal(t, "ranked-pc-1", resp.GetGameServerName())
	pcFull.Store(true)
	resp, err = client.Allocate(t.Context(), req)
	require.NoError(t, err)
	assert.Equal(t, "ranked-ps5-1", resp.GetGameServerName(), "pc is full: the next priority")
	assert.InDelta(t, 1, testutil.ToFloat64(f.metrics.FailedOver), 0)
	assert.InDelta(t, 1, testutil.ToFloat64(f.metrics.Allocations.WithLabelValues("ps5", Allocated)), 0)

	_, err = client.Allocate(t.Context(), &pb.AllocationRequest{Namespace: "games", GameServerSelectors: []*pb.GameServerSelector{{MatchLabels: map[string]string{"mode": "casual"}}}})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "no fleet's game servers match")

	_, err = client.Allocate(t.Context(), &pb.AllocationRequest{Namespace: "Games!"})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

// TestServiceRefusesAnUntrustedClient: a certificate of another CA does
// not get through the mutual TLS.
func TestServiceRefusesAnUntrustedClient(t *testing.T) {
	p := newPKI(t)
	f := serveFront(t, p, p.serve(t, p.ca, allocates("x")), p.serve(t, p.ca, allocates("y")))
	stranger := tlstest.NewCA(t, "stranger").Client(t, "matchmaker").TLS(t)
	_, err := f.grpcClient(t, stranger).Allocate(t.Context(), &pb.AllocationRequest{Namespace: "games"})
	assert.Equal(t, codes.Unavailable, status.Code(err), "the handshake fails: %v", err)
}

// TestServiceTakesAgonesRESTForm: POST /gameserverallocation with the JSON
// of Agones' gateway, answered with its JSON, errors included.
func TestServiceTakesAgonesRESTForm(t *testing.T) {
	p := newPKI(t)
	f := serveFront(t, p, p.serve(t, p.ca, allocates("ranked-pc-1")), p.serve(t, p.ca, allocates("y")))
	hc := testhttp.New(&http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{f.client}, RootCAs: f.ca.Pool(), MinVersion: tls.VersionTLS12}})
	post := func(body string) (int, map[string]any) {
		resp, err := hc.Post("https://"+f.addr+RESTPath, "application/json", bytes.NewBufferString(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var out map[string]any
		require.NoError(t, json.Unmarshal(b, &out), "%s", b)
		return resp.StatusCode, out
	}
	code, out := post(`{"namespace":"games","gameServerSelectors":[{"matchLabels":{"mode":"ranked"},"gameServerState":"READY"}]}`)
	assert.Equal(t, http.StatusOK, code, "%v", out)
	assert.Equal(t, "ranked-pc-1", out["gameServerName"])

	code, out = post(`{"namespace":"games","gameServerSelectors":[{"matchLabels":{"mode":"casual"}}]}`)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.EqualValues(t, codes.ResourceExhausted, out["code"])

	code, out = post(`{"namespace":`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.EqualValues(t, codes.InvalidArgument, out["code"])
	assert.Contains(t, out["message"], "not an AllocationRequest")
}

// TestEachAllocationIsATraceOfItsTries: a request is a span, and each try
// it forwards a child of it, so that a trace shows which clusters were
// tried and how long each took.
func TestEachAllocationIsATraceOfItsTries(t *testing.T) {
	spans := otlptest.Capture(t, telemetry.Config{Service: "test", SampleRatio: 1})
	p := newPKI(t)
	f := serveFront(t, p, p.serve(t, p.ca, answers(status.Error(codes.ResourceExhausted, "no game server"))), p.serve(t, p.ca, allocates("ranked-ps5-1")))
	_, err := f.grpcClient(t, f.client).Allocate(t.Context(), &pb.AllocationRequest{Namespace: "games",
		GameServerSelectors: []*pb.GameServerSelector{{MatchLabels: map[string]string{"mode": "ranked"}}}})
	require.NoError(t, err)

	var request tracetest.SpanStub
	var tries []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		switch {
		case s.Name == "POST "+AllocatePath:
			request = s
		case s.SpanKind == oteltrace.SpanKindClient && s.Name == strings.TrimPrefix(AllocatePath, "/"):
			tries = append(tries, s)
		}
	}
	require.True(t, request.SpanContext.IsValid(), "the request's span")
	require.Len(t, tries, 2, "one span per try: the full cluster's, then the one that allocated")
	for _, try := range tries {
		assert.Equal(t, request.SpanContext.TraceID(), try.SpanContext.TraceID())
		assert.Equal(t, request.SpanContext.SpanID(), try.Parent.SpanID(), "a try is a child of its request")
	}
}
