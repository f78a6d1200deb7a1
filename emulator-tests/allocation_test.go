package emulatortests

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetcast/fleetcast/allocator"
	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
	"github.com/fleetcast/fleetcast/internal/testenv/agonestest"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/internal/testenv/tlstest"
)

// allocCluster is one cluster of the allocation tests: its pipeline (a
// topic and the ingest function), a namespace of the control plane
// watched by its publisher, holding a fleet "ranked" whose game servers
// are labelled mode=ranked, and its Agones allocator over mutual TLS.
type allocCluster struct {
	p     *pipeline
	ns    *kubetest.Namespace
	agone *agonestest.Allocator
	addr  string
}

func newAllocCluster(t *testing.T, c *controlplane.ControlPlane, agones *tlstest.CA, servers int) *allocCluster {
	t.Helper()
	p := newPipeline(t)
	ns := kubetest.NewNamespace(t, c)
	p.nsName = ns.Name
	kubetest.StartPublisher(t, p.publisherConfig(ns.Name), c.RESTConfig(), p.transport(""))
	ns.CreateFleet(ns.Name, "ranked", nil)
	ns.Patch(ns.Name, "ranked", map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"mode": "ranked"}}}}})
	require.NoError(t, agonestest.CreateGameServers(t.Context(), ns.Dyn, ns.Name, "ranked", map[string]string{"mode": "ranked"}, servers))
	ns.SetStatus(ns.Name, "ranked", map[string]any{"replicas": int64(servers), "readyReplicas": int64(servers), "allocatedReplicas": int64(0)})
	a := &allocCluster{p: p, ns: ns, agone: agonestest.New(ns.Dyn)}
	a.addr = a.agone.Serve(t, agones.Server(t, "agones-allocator").TLS(t), agones.Pool())
	a.waitReady(int64(servers))
	return a
}

// waitReady waits until Firestore holds the fleet with ready game servers
// and its game servers' labels: what the publisher saw reached the view's
// source.
func (a *allocCluster) waitReady(ready int64) {
	a.p.waitFleets("the fleet's capacity", []string{"ranked"}, func(_ string, d *fleet.Document) bool {
		return live("", d) && d.Status != nil && d.Status.ReadyReplicas == ready && d.GameServerLabels["mode"] == "ranked"
	})
}

func (a *allocCluster) policy(priority int32) allocator.Policy {
	return allocator.Policy{Name: a.p.cluster, Cluster: a.p.cluster, Priority: priority, Weight: 1, Endpoints: []string{a.addr},
		Namespace: a.ns.Name, SecretName: "unused"}
}

// allocateBehindItsBack allocates a game server in the cluster without
// its fleet's status knowing yet, as when Agones' fleet controller lags:
// fleetcast's view still counts it Ready.
func (a *allocCluster) allocateBehindItsBack(t *testing.T, name string) {
	t.Helper()
	gs, err := a.ns.Dyn.Resource(agonestest.GameServerGVR).Namespace(a.ns.Name).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedField(gs.Object, "Allocated", "status", "state"))
	_, err = a.ns.Dyn.Resource(agonestest.GameServerGVR).Namespace(a.ns.Name).Update(t.Context(), gs, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// allocationFront serves an allocation service placing by view with
// policies, on mutual TLS, its forwarder presenting to each
// policy's cluster the client certificate certFor gives. Its client is
// Agones' gRPC client with a certificate the front trusts, whose files
// are in dir (client.crt, client.key, and ca.crt, the CA of the front's
// certificate) for other clients.
func allocationFront(t testing.TB, view *fleetapi.Service, certFor func(*allocator.Policy) tls.Certificate, agones *tlstest.CA, policies []allocator.Policy) *front {
	t.Helper()
	fwd := allocator.NewForwarder(allocator.ForwarderOptions{ConnectTimeout: 2 * time.Second, TLS: func(p *allocator.Policy) (*tls.Config, error) {
		return &tls.Config{Certificates: []tls.Certificate{certFor(p)}, RootCAs: agones.Pool(), MinVersion: tls.VersionTLS12}, nil
	}})
	t.Cleanup(func() { _ = fwd.Close() })
	f := &front{metrics: allocator.NewMetrics(prometheus.NewRegistry()), dir: t.TempDir()}
	f.svc = allocator.NewService(view, fwd, policies, nil, f.metrics)
	ca := tlstest.NewCA(t, "front")
	hs := &http.Server{Handler: allocator.Handler(f.svc, allocator.NewGRPCServer(f.svc)), TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, "fleetcast-allocator").TLS(t)}, ClientCAs: ca.Pool(),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = lis.Addr().String()
	go func() { _ = hs.ServeTLS(lis, "", "") }()
	t.Cleanup(func() { _ = hs.Close() })
	matchmaker := ca.Client(t, "matchmaker")
	for name, b := range map[string][]byte{"client.crt": matchmaker.Cert, "client.key": matchmaker.Key, "ca.crt": ca.PEM} {
		require.NoError(t, os.WriteFile(filepath.Join(f.dir, name), b, 0o600))
	}
	cc, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{matchmaker.TLS(t)}, RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	f.client = pb.NewAllocationServiceClient(cc)
	return f
}

// front is an allocation service of the tests, and its clients.
type front struct {
	client  pb.AllocationServiceClient
	svc     *allocator.Service
	metrics *allocator.Metrics
	addr    string
	dir     string
}

// curl posts body to the front's REST form with curl, as a client of
// Agones' REST API would, over mutual TLS, and returns the HTTP status and
// the answer.
func (f *front) curl(t testing.TB, body string) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "curl", "--silent", "--show-error",
		"--cert", filepath.Join(f.dir, "client.crt"), "--key", filepath.Join(f.dir, "client.key"), "--cacert", filepath.Join(f.dir, "ca.crt"),
		"-H", "Content-Type: application/json", "--data", body, "--write-out", "\n%{http_code}",
		"https://"+f.addr+allocator.RESTPath).Output()
	require.NoError(t, err, "curl: %s", out)
	i := strings.LastIndex(string(out), "\n")
	require.GreaterOrEqual(t, i, 0, "curl: %s", out)
	answer, code := string(out[:i]), string(out[i+1:])
	n, err := strconv.Atoi(code)
	require.NoError(t, err, "curl: %s", out)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(answer), &v), "curl: %s", out)
	return n, v
}

var rankedRequest = &pb.AllocationRequest{GameServerSelectors: []*pb.GameServerSelector{{MatchLabels: map[string]string{"mode": "ranked"}}}}

// TestAllocationThroughFleetcastOnRealGameServers: two clusters, each with
// its publisher and an Agones allocator over GameServers of the control
// plane; a client of Agones' allocation API allocates through fleetcast:
// from the priority-0 cluster while it has room (its publisher then
// reports the capacity fallen), from the next when the first answers
// RESOURCE_EXHAUSTED, past an unreachable allocator and past one that
// refuses fleetcast's certificate, and hears RESOURCE_EXHAUSTED when
// every game server is taken.
func TestAllocationThroughFleetcastOnRealGameServers(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	agones := tlstest.NewCA(t, "agones")
	first, second := newAllocCluster(t, c, agones, 2), newAllocCluster(t, c, agones, 5)
	trusted := agones.Client(t, "fleetcast-allocator").TLS(t)
	policies := []allocator.Policy{first.policy(0), second.policy(1)}
	view := fleetapi.NewService(firestoredb.New(emulator.Firestore(t, project), time.Hour, time.Now), fleetapi.Options{MaxStaleness: -1})
	f := allocationFront(t, view, func(*allocator.Policy) tls.Certificate { return trusted }, agones, policies)
	client, svc, metrics := f.client, f.svc, f.metrics
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	resp, err := client.Allocate(ctx, rankedRequest)
	require.NoError(t, err)
	assert.Equal(t, first.addr, resp.GetSource(), "priority 0 first")
	assert.Equal(t, "ranked-0", resp.GetGameServerName())
	narrowed := &pb.AllocationRequest{Namespace: first.ns.Name, GameServerSelectors: []*pb.GameServerSelector{
		{MatchLabels: map[string]string{"mode": "ranked", allocator.FleetLabel: "ranked"}}}}
	assert.True(t, proto.Equal(narrowed, first.agone.Requests()[0]), "narrowed to the fleet, in the policy's namespace: %v", first.agone.Requests()[0])
	first.waitReady(1) // the publisher saw the capacity fall

	// The first cluster's last Ready game server goes behind fleetcast's
	// back: its allocator says RESOURCE_EXHAUSTED, the second allocates.
	first.allocateBehindItsBack(t, "ranked-1")
	resp, err = client.Allocate(ctx, rankedRequest)
	require.NoError(t, err)
	assert.Equal(t, second.addr, resp.GetSource(), "the first was full")
	assert.Len(t, first.agone.Requests(), 2, "the first was tried")
	assert.InDelta(t, 1, testutil.ToFloat64(metrics.Tries.WithLabelValues(first.p.cluster, allocator.Exhausted)), 0)

	// An unreachable first allocator is skipped within the deadline.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := first.policy(0)
	down.Endpoints = []string{lis.Addr().String()}
	require.NoError(t, lis.Close())
	svc.SetPolicies([]allocator.Policy{down, second.policy(1)})
	resp, err = client.Allocate(ctx, rankedRequest)
	require.NoError(t, err)
	assert.Equal(t, second.addr, resp.GetSource(), "past the unreachable one")
	assert.InDelta(t, 1, testutil.ToFloat64(metrics.Tries.WithLabelValues(first.p.cluster, allocator.Unreachable)), 0)

	// An allocator that trusts another CA's clients refuses fleetcast's
	// certificate: the next cluster allocates.
	stranger := tlstest.NewCA(t, "another studio").Client(t, "fleetcast-allocator").TLS(t)
	f2 := allocationFront(t, view, func(p *allocator.Policy) tls.Certificate {
		if p.Cluster == first.p.cluster {
			return stranger
		}
		return trusted
	}, agones, policies)
	client2, metrics2 := f2.client, f2.metrics
	resp, err = client2.Allocate(ctx, rankedRequest)
	require.NoError(t, err)
	assert.Equal(t, second.addr, resp.GetSource())
	assert.InDelta(t, 1, testutil.ToFloat64(metrics2.Tries.WithLabelValues(first.p.cluster, allocator.CertificateRefused)), 0)
	assert.Len(t, first.agone.Requests(), 2, "the refusing cluster's allocator received nothing")

	// Agones' REST form, with curl: the same allocation, from the second
	// cluster (the first is full), answered as Agones' gateway answers.
	svc.SetPolicies(policies)
	second.waitReady(2)
	code, answer := f.curl(t, `{"gameServerSelectors":[{"matchLabels":{"mode":"ranked"}}]}`)
	assert.Equal(t, http.StatusOK, code, "%v", answer)
	assert.Equal(t, "ranked-3", answer["gameServerName"], "%v", answer)
	assert.Equal(t, second.addr, answer["source"])
	second.waitReady(1)
	_, err = client.Allocate(ctx, rankedRequest)
	require.NoError(t, err)
	second.waitReady(0)
	_, err = client.Allocate(ctx, rankedRequest)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "every game server taken: %v", err)
	code, answer = f.curl(t, `{"gameServerSelectors":[{"matchLabels":{"mode":"ranked"}}]}`)
	assert.Equal(t, http.StatusTooManyRequests, code, "RESOURCE_EXHAUSTED, as Agones' gateway answers it: %v", answer)
	assert.EqualValues(t, codes.ResourceExhausted, answer["code"], "%v", answer)
	code, answer = f.curl(t, `{"gameServerSelectors":[{"matchLabels":{"bad key!":"x"}}]}`)
	assert.Equal(t, http.StatusBadRequest, code, "%v", answer)
	assert.EqualValues(t, codes.InvalidArgument, answer["code"], "%v", answer)
}
