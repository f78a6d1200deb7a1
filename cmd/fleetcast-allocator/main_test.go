package main

import (
	"context"
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fleetcast/fleetcast/allocator"
	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
	"github.com/fleetcast/fleetcast/internal/testenv/agonestest"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
	"github.com/fleetcast/fleetcast/internal/testenv/tlstest"
)

// files are a deployment's: the allocation service's own certificate and
// the CA of its clients (front), the CA of the clusters' allocators and a
// client certificate they trust (agones), written as the Secrets mount
// them.
type files struct {
	front, agones          *tlstest.CA
	tlsCert, tlsKey, caDir string
	secrets                string
}

func newFiles(t *testing.T) files {
	f := files{front: tlstest.NewCA(t, "fleetcast-allocator"), agones: tlstest.NewCA(t, "agones")}
	dir := tlstest.Dir(t)
	srv := f.front.Server(t, "fleetcast-allocator")
	f.tlsCert, f.tlsKey = tlstest.Write(t, dir, "tls.crt", srv.Cert), tlstest.Write(t, dir, "tls.key", srv.Key)
	f.caDir = filepath.Join(dir, "client-ca")
	require.NoError(t, os.Mkdir(f.caDir, 0o700))
	tlstest.Write(t, f.caDir, "client-ca.crt", f.front.PEM)
	f.secrets = filepath.Join(dir, "clusters")
	secret := filepath.Join(f.secrets, "allocator-client-pc")
	require.NoError(t, os.MkdirAll(secret, 0o700))
	client := f.agones.Client(t, "fleetcast-allocator")
	tlstest.Write(t, secret, allocator.SecretCert, client.Cert)
	tlstest.Write(t, secret, allocator.SecretKey, client.Key)
	tlstest.Write(t, secret, allocator.SecretCA, f.agones.PEM)
	return f
}

func (f files) args(policies string) []string {
	return []string{"--addr", "127.0.0.1:0", "--metrics-addr", "", "--tls-cert", f.tlsCert, "--tls-key", f.tlsKey,
		"--client-ca-dir", f.caDir, "--secrets-dir", f.secrets, "--policies", policies}
}

func writePolicies(t *testing.T, yaml string) string {
	return tlstest.Write(t, tlstest.Dir(t), "policies.yaml", []byte(yaml))
}

const pcPolicy = `apiVersion: multicluster.agones.dev/v1
kind: GameServerAllocationPolicy
metadata: {name: pc}
spec:
  priority: 0
  weight: 1
  connectionInfo: {clusterName: pc, secretName: allocator-client-pc}
`

func TestBadConfigurationIsSaidBeforeServing(t *testing.T) {
	f := newFiles(t)
	ok := writePolicies(t, pcPolicy)
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no policies":   {[]string{"--tls-cert", f.tlsCert}, "--policies: required"},
		"missing file":  {f.args(filepath.Join(t.TempDir(), "none.yaml")), "--policies: open"},
		"bad policy":    {f.args(writePolicies(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")), `GameServerAllocationPolicy "x"`},
		"no secret":     {append(f.args(ok), "--secrets-dir", t.TempDir()), `policy "pc": the client certificate of Secret "allocator-client-pc"`},
		"no client CA":  {append(f.args(ok), "--client-ca-dir", t.TempDir()), "no CA certificate"},
		"no server key": {append(f.args(ok), "--tls-key", filepath.Join(t.TempDir(), "none")), "--tls-cert, --tls-key"},
		"max tries":     {append(f.args(ok), "--max-tries", "0"), "--max-tries: want 1 or more"},
		"arguments":     {append(f.args(ok), "extra"), `unexpected arguments ["extra"]`},
	} {
		t.Run(name, func(t *testing.T) {
			err := run(t.Context(), c.args, func(string) string { return "" }, io.Discard, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// stub is a cluster's Agones allocator over mutual TLS, trusting the
// agones CA's clients; it allocates the game servers it is given, one
// per request, then answers RESOURCE_EXHAUSTED.
type stub struct {
	pb.UnimplementedAllocationServiceServer
	mu   sync.Mutex
	free []string
	got  []*pb.AllocationRequest
}

func (s *stub) Allocate(_ context.Context, r *pb.AllocationRequest) (*pb.AllocationResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, proto.CloneOf(r))
	if len(s.free) == 0 {
		return nil, status.Error(codes.ResourceExhausted, "there is no available GameServer to allocate")
	}
	gs := s.free[0]
	s.free = s.free[1:]
	return &pb.AllocationResponse{GameServerName: gs, Address: "10.1.2.3", Ports: []*pb.AllocationResponse_GameServerStatusPort{{Name: "default", Port: 7777}}}, nil
}

func (s *stub) requests() []*pb.AllocationRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

func (f files) serveStub(t *testing.T, s *stub) string {
	return agonestest.Serve(t, s, f.agones.Server(t, "agones-allocator").TLS(t), f.agones.Pool())
}

var serving = regexp.MustCompile(`allocation API on (\S+) `)

// TestAnAgonesClientAllocatesThroughIt: a client of Agones' allocation API
// — the Go package, with a client certificate — allocates from the
// cluster that fleetcast's view says has room, through the allocator
// endpoint that cluster advertises, the request narrowed to the fleet.
func TestAnAgonesClientAllocatesThroughIt(t *testing.T) {
	f := newFiles(t)
	pc := &stub{free: []string{"ranked-abcde"}}
	endpoint := f.serveStub(t, pc)

	project := emulator.ProjectID(t)
	store := firestoredb.New(emulator.Firestore(t, project), time.Hour, time.Now)
	apply := func(seq int64, ev fleet.Event) {
		ev.SchemaVersion, ev.Cluster, ev.Version = fleet.SchemaVersion, "pc", fleet.Version{Term: 1, Seq: seq}
		ev.Publisher, ev.ObservedAt = fleet.Publisher{ID: "pub-pc", Version: "test"}, fleet.MicrosOf(time.Now())
		_, err := store.Apply(t.Context(), ev)
		require.NoError(t, err)
	}
	part := fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)[0]
	part.FleetCount, part.AllocatorEndpoint = 2, endpoint
	apply(1, fleet.Event{Kind: fleet.KindSnapshot, Snapshot: part})
	for i, mode := range []string{"ranked", "casual"} {
		apply(int64(2+i), fleet.Event{Kind: fleet.KindUpsert, Namespace: "games", Name: mode, Fleet: fleet.State{UID: "u-" + mode,
			GameServerLabels: map[string]string{"mode": mode}, Status: fleet.Status{Replicas: 3, ReadyReplicas: 3}}})
	}

	ctx, cancel := context.WithCancel(t.Context())
	stderr := &syncbuf.Buffer{}
	done := make(chan error, 1)
	env := map[string]string{"GOOGLE_CLOUD_PROJECT": project, "MAX_STALENESS": "0"}
	go func() {
		done <- run(ctx, f.args(writePolicies(t, pcPolicy)), func(k string) string { return env[k] }, io.Discard, stderr)
	}()
	require.Eventually(t, func() bool { return serving.MatchString(stderr.String()) }, 30*time.Second, 10*time.Millisecond, "it says where it serves")
	addr := serving.FindStringSubmatch(stderr.String())[1]

	matchmaker := f.front.Client(t, "matchmaker")
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{matchmaker.TLS(t)}, RootCAs: f.front.Pool(), MinVersion: tls.VersionTLS12})))
	require.NoError(t, err)
	defer cc.Close()
	client := pb.NewAllocationServiceClient(cc)
	req := &pb.AllocationRequest{Namespace: "games", GameServerSelectors: []*pb.GameServerSelector{{MatchLabels: map[string]string{"mode": "ranked"}}}}
	resp, err := client.Allocate(t.Context(), req)
	require.NoError(t, err)
	assert.Equal(t, "ranked-abcde", resp.GetGameServerName())
	assert.Equal(t, endpoint, resp.GetSource())
	require.Len(t, pc.requests(), 1)
	assert.Equal(t, map[string]string{"mode": "ranked", allocator.FleetLabel: "ranked"}, pc.requests()[0].GetGameServerSelectors()[0].GetMatchLabels())

	_, err = client.Allocate(t.Context(), req)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the cluster's allocator had no more: %v", err)

	cancel()
	require.NoError(t, <-done)
}
