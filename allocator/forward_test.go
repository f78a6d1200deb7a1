package allocator

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	testingclock "k8s.io/utils/clock/testing"

	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
	"github.com/fleetcast/fleetcast/internal/testenv/agonestest"
	"github.com/fleetcast/fleetcast/internal/testenv/tlstest"
)

// stubAllocator is an Agones allocator speaking the allocation API over
// mutual TLS, answering each request as answer says.
type stubAllocator struct {
	pb.UnimplementedAllocationServiceServer
	answer func(ctx context.Context, r *pb.AllocationRequest) (*pb.AllocationResponse, error)
	mu     sync.Mutex
	got    []*pb.AllocationRequest
}

func (s *stubAllocator) Allocate(ctx context.Context, r *pb.AllocationRequest) (*pb.AllocationResponse, error) {
	s.mu.Lock()
	s.got = append(s.got, proto.CloneOf(r))
	s.mu.Unlock()
	return s.answer(ctx, r)
}

func (s *stubAllocator) requests() []*pb.AllocationRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

// pki is the allocators' CA and the client certificate they trust.
type pki struct {
	ca     *tlstest.CA
	client tls.Certificate
}

func newPKI(t *testing.T) pki {
	ca := tlstest.NewCA(t, "allocators")
	return pki{ca: ca, client: ca.Client(t, "fleetcast-allocator").TLS(t)}
}

// serve starts an allocator trusting clientCA's clients, and returns its
// address.
func (p pki) serve(t *testing.T, clientCA *tlstest.CA, a *stubAllocator) string {
	t.Helper()
	return agonestest.Serve(t, a, p.ca.Server(t, "agones-allocator").TLS(t), clientCA.Pool())
}

func (p pki) forwarder(t *testing.T, opts ForwarderOptions) *Forwarder {
	opts.TLS = func(*Policy) (*tls.Config, error) {
		return &tls.Config{Certificates: []tls.Certificate{p.client}, RootCAs: p.ca.Pool(), MinVersion: tls.VersionTLS12}, nil
	}
	f := NewForwarder(opts)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func allocates(name string) *stubAllocator {
	return &stubAllocator{answer: func(context.Context, *pb.AllocationRequest) (*pb.AllocationResponse, error) {
		return &pb.AllocationResponse{GameServerName: name, Address: "10.0.0.1", Ports: []*pb.AllocationResponse_GameServerStatusPort{{Name: "default", Port: 7000}}}, nil
	}}
}

func answers(err error) *stubAllocator {
	return &stubAllocator{answer: func(context.Context, *pb.AllocationRequest) (*pb.AllocationResponse, error) { return nil, err }}
}

func candidate(cluster, addr string) Candidate {
	return Candidate{Policy: &Policy{Name: cluster, Cluster: cluster, Endpoints: []string{addr}}, Namespace: "games", Fleet: cluster + "-fleet"}
}

func outcomes(tries []Try) []string {
	var out []string
	for _, t := range tries {
		out = append(out, t.Cluster+":"+t.Outcome)
	}
	return out
}

var none = func(string) string { return "" }

func request() *pb.AllocationRequest {
	return &pb.AllocationRequest{Namespace: "games", GameServerSelectors: []*pb.GameServerSelector{{MatchLabels: map[string]string{"mode": "ranked"}}}}
}

// TestForwardGoesOnWhenAClusterIsFull: the first cluster has no game
// server (RESOURCE_EXHAUSTED), the second allocates, each asked for its
// candidate's fleet only.
func TestForwardGoesOnWhenAClusterIsFull(t *testing.T) {
	p := newPKI(t)
	full, free := answers(status.Error(codes.ResourceExhausted, "no game server")), allocates("gs-1")
	cands := []Candidate{candidate("pc", p.serve(t, p.ca, full)), candidate("ps5", p.serve(t, p.ca, free))}
	resp, tries, err := p.forwarder(t, ForwarderOptions{}).Allocate(t.Context(), request(), cands, none)
	require.NoError(t, err)
	assert.Equal(t, "gs-1", resp.GetGameServerName())
	assert.Equal(t, cands[1].Policy.Endpoints[0], resp.GetSource(), "the source is the allocator that allocated")
	assert.Equal(t, []string{"pc:exhausted", "ps5:allocated"}, outcomes(tries))
	require.Len(t, free.requests(), 1)
	assert.Equal(t, map[string]string{"mode": "ranked", FleetLabel: "ps5-fleet"}, free.requests()[0].GetGameServerSelectors()[0].GetMatchLabels())
	assert.Equal(t, map[string]string{"mode": "ranked", FleetLabel: "pc-fleet"}, full.requests()[0].GetGameServerSelectors()[0].GetMatchLabels())
}

// TestForwardSkipsAnUnreachableClusterWithinTheDeadline: nothing listens
// at the first cluster's endpoint; the request is allocated by the second
// within its deadline.
func TestForwardSkipsAnUnreachableClusterWithinTheDeadline(t *testing.T) {
	p := newPKI(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := lis.Addr().String()
	require.NoError(t, lis.Close())
	cands := []Candidate{candidate("pc", down), candidate("ps5", p.serve(t, p.ca, allocates("gs-2")))}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, tries, err := p.forwarder(t, ForwarderOptions{ConnectTimeout: 5 * time.Second}).Allocate(ctx, request(), cands, none)
	require.NoError(t, err)
	assert.Equal(t, "gs-2", resp.GetGameServerName())
	assert.Equal(t, []string{"pc:unreachable", "ps5:allocated"}, outcomes(tries))
	assert.ErrorContains(t, tries[0].Err, "connection refused")
}

// TestForwardSkipsAClusterThatRefusesTheCertificate: the first cluster's
// allocator trusts another CA's clients.
func TestForwardSkipsAClusterThatRefusesTheCertificate(t *testing.T) {
	p := newPKI(t)
	other := tlstest.NewCA(t, "another studio")
	strict := allocates("never")
	cands := []Candidate{candidate("pc", p.serve(t, other, strict)), candidate("ps5", p.serve(t, p.ca, allocates("gs-3")))}
	resp, tries, err := p.forwarder(t, ForwarderOptions{ConnectTimeout: 5 * time.Second}).Allocate(t.Context(), request(), cands, none)
	require.NoError(t, err)
	assert.Equal(t, "gs-3", resp.GetGameServerName())
	assert.Equal(t, []string{"pc:certificate_refused", "ps5:allocated"}, outcomes(tries))
	assert.Empty(t, strict.requests())
}

// TestForwardNeverTriesAgainAfterWhatMayHaveAllocated: a cluster that
// answers INTERNAL may have allocated; the request ends with its status,
// and the next cluster is not asked.
func TestForwardNeverTriesAgainAfterWhatMayHaveAllocated(t *testing.T) {
	p := newPKI(t)
	next := allocates("gs-4")
	cands := []Candidate{candidate("pc", p.serve(t, p.ca, answers(status.Error(codes.Internal, "etcd timed out")))),
		candidate("ps5", p.serve(t, p.ca, next))}
	_, tries, err := p.forwarder(t, ForwarderOptions{}).Allocate(t.Context(), request(), cands, none)
	assert.Equal(t, codes.Internal, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "may have allocated")
	assert.Equal(t, []string{"pc:failed"}, outcomes(tries))
	assert.Empty(t, next.requests())
}

// TestForwardStartsNoTryTheDeadlineCannotHold: with less time left than
// the cluster's tries have taken, it is not tried.
func TestForwardStartsNoTryTheDeadlineCannotHold(t *testing.T) {
	p := newPKI(t)
	clock := testingclock.NewFakeClock(time.Now())
	slow := &stubAllocator{answer: func(context.Context, *pb.AllocationRequest) (*pb.AllocationResponse, error) {
		clock.Step(300 * time.Millisecond) // a try that takes 300 ms
		return nil, status.Error(codes.ResourceExhausted, "no game server")
	}}
	cands := []Candidate{candidate("pc", p.serve(t, p.ca, slow))}
	f := p.forwarder(t, ForwarderOptions{Now: clock.Now})
	_, _, err := f.Allocate(t.Context(), request(), cands, none) // learns that its tries take 300 ms
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	ctx, cancel := context.WithDeadline(t.Context(), clock.Now().Add(100*time.Millisecond))
	defer cancel()
	_, tries, err := f.Allocate(ctx, request(), cands, none)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "too little to try cluster pc")
	assert.Equal(t, []string{"pc:failed"}, outcomes(tries))
	assert.Len(t, slow.requests(), 1, "the second request was not sent")
}

func TestForwardSaysWhyNothingAllocated(t *testing.T) {
	p := newPKI(t)
	full := answers(status.Error(codes.ResourceExhausted, "no game server"))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := lis.Addr().String()
	require.NoError(t, lis.Close())
	f := p.forwarder(t, ForwarderOptions{})

	_, _, err = f.Allocate(t.Context(), request(), []Candidate{candidate("pc", p.serve(t, p.ca, full)), candidate("ps5", down)}, none)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "one was full: RESOURCE_EXHAUSTED, which clients back off on")
	assert.Contains(t, status.Convert(err).Message(), "pc/games/pc-fleet: exhausted: no game server")

	_, _, err = f.Allocate(t.Context(), request(), []Candidate{candidate("ps5", down)}, none)
	assert.Equal(t, codes.Unavailable, status.Code(err), "none could be reached")

	_, _, err = f.Allocate(t.Context(), request(), nil, none)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "no candidate")

	noEndpoint := Candidate{Policy: &Policy{Name: "xbox", Cluster: "xbox"}, Namespace: "games", Fleet: "f"}
	_, tries, _ := f.Allocate(t.Context(), request(), []Candidate{noEndpoint}, none)
	assert.Equal(t, []string{"xbox:no_endpoint"}, outcomes(tries))
	resp, tries, err := f.Allocate(t.Context(), request(), []Candidate{noEndpoint}, func(string) string { return p.serve(t, p.ca, allocates("gs-5")) })
	require.NoError(t, err, "the endpoint the cluster advertises")
	assert.Equal(t, "gs-5", resp.GetGameServerName())
	assert.Equal(t, []string{"xbox:allocated"}, outcomes(tries))
}
