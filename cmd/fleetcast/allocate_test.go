package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
	"github.com/fleetcast/fleetcast/internal/testenv/agonestest"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/tlstest"
	"github.com/fleetcast/fleetcast/logging"
)

// clusterAllocator is one cluster's allocator, speaking Agones' API over
// mutual TLS: it allocates the first game server of the fleet a request
// names, or answers RESOURCE_EXHAUSTED, as agones-allocator does, when
// the cluster is full.
type clusterAllocator struct {
	pb.UnimplementedAllocationServiceServer
	cluster string
	full    bool
	mu      sync.Mutex
	got     []*pb.AllocationRequest
}

func (a *clusterAllocator) Allocate(_ context.Context, in *pb.AllocationRequest) (*pb.AllocationResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, proto.CloneOf(in))
	if a.full {
		return nil, status.Error(codes.ResourceExhausted, "there is no available GameServer to allocate")
	}
	fleetName := in.GetGameServerSelectors()[0].GetMatchLabels()["agones.dev/fleet"]
	return &pb.AllocationResponse{GameServerName: fmt.Sprintf("%s-%d", fleetName, len(a.got)), Address: "10.0.0.9", NodeName: "node-" + a.cluster,
		Ports: []*pb.AllocationResponse_GameServerStatusPort{{Name: "default", Port: 7777}}}, nil
}

func (a *clusterAllocator) requests() []*pb.AllocationRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.got
}

// allocateWorld is two fresh clusters, a (region r1) and b (region r2),
// each with fleet games/f of 5 ready game servers and 4 rooms, and each
// advertising the allocator at its address; and the client's files.
type allocateWorld struct {
	project     string
	store       *firestoredb.Store
	a, b        *clusterAllocator
	addr        map[string]string
	cert, key   string // trusted by the allocators
	ca          string // signed the allocators' certificates
	rogue       string // a certificate, with its key, from a CA they do not trust
	rogueKey    string
	unreachable string // an address nothing listens at
}

func newAllocateWorld(t *testing.T) *allocateWorld {
	t.Helper()
	servers, clients, other := tlstest.NewCA(t, "allocators"), tlstest.NewCA(t, "matchmakers"), tlstest.NewCA(t, "rogue")
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	client, rogue := clients.Client(t, "matchmaker"), other.Client(t, "matchmaker")
	w := &allocateWorld{project: emulator.ProjectID(t), a: &clusterAllocator{cluster: "a"}, b: &clusterAllocator{cluster: "b"}, addr: map[string]string{},
		cert: write("client.crt", client.Cert), key: write("client.key", client.Key), ca: write("ca.crt", servers.PEM),
		rogue: write("rogue.crt", rogue.Cert), rogueKey: write("rogue.key", rogue.Key)}
	for _, a := range []*clusterAllocator{w.a, w.b} {
		w.addr[a.cluster] = agonestest.Serve(t, a, servers.Server(t, "allocator-"+a.cluster).TLS(t), clients.Pool())
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	w.unreachable = l.Addr().String()
	require.NoError(t, l.Close())

	w.store = firestoredb.New(emulator.Firestore(t, w.project), time.Hour, time.Now)
	now := time.Now()
	for i, c := range []string{"a", "b"} {
		part := fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)[0]
		part.ClusterLabels, part.AllocatorEndpoint, part.FleetCount = map[string]string{"region": "r" + fmt.Sprint(i+1)}, w.addr[c], 1
		part.Totals = fleet.Status{Replicas: 5, ReadyReplicas: 5, Counters: map[string]fleet.Aggregate{"rooms": {Count: 1, Capacity: 5}}}
		v := fleet.Version{Term: 1, Seq: 1}
		pub := fleet.Publisher{ID: "pub-" + c, Version: "test"}
		_, err := w.store.Apply(t.Context(), fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindSnapshot, Cluster: c,
			Version: v, ObservedAt: fleet.MicrosOf(now), Publisher: pub, Snapshot: part})
		require.NoError(t, err)
		v.Seq++
		_, err = w.store.Apply(t.Context(), fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: c, Namespace: "games", Name: "f",
			Version: v, ObservedAt: fleet.MicrosOf(now), Publisher: pub, Fleet: fleet.State{
				UID: "u", Labels: map[string]string{"platform": "pc"}, Spec: fleet.Spec{Replicas: 5},
				Status: fleet.Status{Replicas: 5, ReadyReplicas: 5, Counters: map[string]fleet.Aggregate{"rooms": {Count: 1, Capacity: 5}}},
			}})
		require.NoError(t, err)
	}
	return w
}

// cli runs fleetcast with the world's project and the client's files.
func (w *allocateWorld) cli(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return runCLI(t, w.project, append(append([]string{"allocate"}, args...), "--tls-cert", w.cert, "--tls-key", w.key, "--tls-ca", w.ca)...)
}

// TestAllocateGoesOnWhenAClusterIsFull: a policy puts cluster a first;
// its allocator is full, so b allocates; each try is Agones' request,
// narrowed to the fleet and namespace with the match's needs, and the
// skipped cluster is said on stderr — reading Firestore and the API
// alike.
func TestAllocateGoesOnWhenAClusterIsFull(t *testing.T) {
	w := newAllocateWorld(t)
	w.a.full = true
	srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(w.store, fleetapi.Options{MaxStaleness: -1, ClusterRefresh: -1}), logging.New(io.Discard, logging.LevelWarning)))
	t.Cleanup(srv.Close)
	for n, api := range [][]string{nil, {"--api", srv.URL}} {
		out, stderr, err := w.cli(t, append([]string{"--counter", "rooms=2", "--policy", "region=r1:0", "--policy", ":1", "-o", "json"}, api...)...)
		require.NoError(t, err, stderr)
		var got allocation
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		assert.Equal(t, "b", got.Cluster)
		assert.Equal(t, "games", got.Namespace)
		assert.Equal(t, "f", got.Fleet)
		var resp map[string]any
		require.NoError(t, json.Unmarshal(got.Allocation, &resp))
		assert.Equal(t, fmt.Sprintf("f-%d", n+1), resp["gameServerName"])
		assert.Equal(t, w.addr["b"], resp["source"], "a remote cluster's allocation names it, as Agones' multi-cluster allocation does")
		require.Len(t, got.Tries, 2)
		assert.Equal(t, allocationTry{Cluster: "a", Namespace: "games", Fleet: "f", Endpoint: w.addr["a"], Outcome: "exhausted",
			Error: "exhausted: there is no available GameServer to allocate", Millis: got.Tries[0].Millis}, got.Tries[0])
		assert.Equal(t, "allocated", got.Tries[1].Outcome)
		assert.Equal(t, fmt.Sprintf("fleetcast: skipped a/games/f at %s: exhausted: there is no available GameServer to allocate\n", w.addr["a"]), stderr)

		for _, a := range []*clusterAllocator{w.a, w.b} {
			reqs := a.requests()
			require.Len(t, reqs, n+1, a.cluster)
			want := &pb.AllocationRequest{Namespace: "games", GameServerSelectors: []*pb.GameServerSelector{{
				MatchLabels: map[string]string{"agones.dev/fleet": "f"}, GameServerState: pb.GameServerSelector_READY,
				Counters: map[string]*pb.CounterSelector{"rooms": {MinAvailable: 2}},
			}}}
			assert.True(t, proto.Equal(want, reqs[n]), "%s got %v", a.cluster, reqs[n])
		}
	}

	out, _, err := w.cli(t, "--policy", "region=r1:0", "--policy", ":1", "-o", "name")
	require.NoError(t, err)
	assert.Equal(t, "gameserver/b/games/f-3\n", out)
	out, _, err = w.cli(t, "--policy", "region=r1:0", "--policy", ":1")
	require.NoError(t, err)
	assert.Equal(t, "CLUSTER   NAMESPACE   FLEET   GAMESERVER   ADDRESS    PORTS          TRIES\n"+
		"b         games       f       f-4          10.0.0.9   default:7777   2\n", out)
}

// TestAllocateExitCodes: what a script can tell apart when no cluster
// allocates, each with one line that says what to do.
func TestAllocateExitCodes(t *testing.T) {
	w := newAllocateWorld(t)
	two := []string{"--policy", "region=r1:0", "--policy", ":1"}

	w.a.full, w.b.full = true, true
	_, stderr, err := w.cli(t, two...)
	require.Error(t, err)
	assert.Equal(t, exitNotFound, exitCode(err))
	assert.Contains(t, err.Error(), "no cluster allocated (2 tried): a/games/f: exhausted")
	assert.Equal(t, 2, strings.Count(stderr, "fleetcast: skipped "), stderr)

	_, _, err = w.cli(t, "--counter", "rooms=5")
	require.Error(t, err)
	assert.Equal(t, exitNotFound, exitCode(err), "no fleet has 5 rooms: nothing is tried")
	assert.Contains(t, err.Error(), "no fleet can take the match")

	w.a.full, w.b.full = false, false
	_, _, err = w.cli(t, append(two, "--endpoint", "a="+w.unreachable, "--endpoint", "b="+w.unreachable, "--connect-timeout", "5s")...)
	require.Error(t, err)
	assert.Equal(t, exitUnavailable, exitCode(err))
	assert.Contains(t, message(err, &global{}), "check that the allocators are reachable from here")

	_, _, err = runCLI(t, w.project, append([]string{"allocate", "--tls-cert", w.rogue, "--tls-key", w.rogueKey, "--tls-ca", w.ca}, two...)...)
	require.Error(t, err)
	assert.Equal(t, exitPermission, exitCode(err), err.Error())
	assert.Contains(t, message(err, &global{}), "check that --tls-cert is signed by a CA the allocators trust")

	_, _, err = w.cli(t, append(two, "--endpoint", "b="+w.addr["b"], "--endpoint", "a="+w.unreachable, "--connect-timeout", "5s")...)
	require.NoError(t, err, "an unreachable cluster is skipped")

	for args, want := range map[string]string{
		"":                                    "--tls-cert is required",
		"--tls-cert nothing":                  "--tls-key is required",
		"--tls-cert x --tls-key y --tls-ca z": "--tls-cert, --tls-key: open x",
	} {
		_, _, err := runCLI(t, w.project, append([]string{"allocate"}, strings.Fields(args)...)...)
		require.Error(t, err, args)
		assert.Equal(t, exitUsage, exitCode(err), args)
		assert.Contains(t, err.Error(), want, args)
	}
	for args, want := range map[string]string{
		"--endpoint a":      "--endpoint a: want CLUSTER=HOST[:PORT]",
		"--endpoint a=x:y":  "--endpoint a=x:y:",
		"--counter rooms=0": "--counter rooms=0: want NAME or NAME=AMOUNT",
	} {
		_, _, err := w.cli(t, strings.Fields(args)...)
		require.Error(t, err, args)
		assert.Equal(t, exitUsage, exitCode(err), args)
		assert.Contains(t, err.Error(), want, args)
	}
	_, _, err = runCLI(t, w.project, "allocate", "--tls-cert", w.cert, "--tls-key", w.key, "--tls-ca", os.DevNull)
	require.Error(t, err)
	assert.Equal(t, exitUsage, exitCode(err))
	assert.Equal(t, "--tls-ca "+os.DevNull+": holds no PEM certificate", err.Error())
}

// TestAllocateHelpExamplesAreValid: the help's examples need a studio's
// certificates and allocators, so the demo cannot run them; each one's
// flags are allocate's, and it gets as far as reading the certificate.
func TestAllocateHelpExamplesAreValid(t *testing.T) {
	help, _, err := runCLI(t, "p", "allocate", "--help")
	require.NoError(t, err)
	_, examples, ok := strings.Cut(help, "\nExamples:\n")
	require.True(t, ok, help)
	examples, _, _ = strings.Cut(examples, "\n\n")
	n := 0
	for line := range strings.SplitSeq(examples, "\n") {
		args := strings.Fields(line)
		require.Equal(t, []string{"fleetcast", "allocate"}, args[:2], line)
		_, _, err := runCLI(t, "p", args[1:]...)
		require.Error(t, err, line)
		assert.Contains(t, err.Error(), "--tls-cert, --tls-key: open client.crt", line)
		n++
	}
	assert.Equal(t, 3, n)
}
