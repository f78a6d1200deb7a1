package publisher_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleet"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/internal/testenv/tlstest"
)

// informClient dials addr with plain grpc-go over TLS, trusting roots and
// presenting client (none when nil).
func informClient(t *testing.T, addr string, roots *x509.CertPool, client *tls.Certificate) fleetcastv1.InformationServiceClient {
	t.Helper()
	return informClientNamed(t, addr, roots, client, "localhost")
}

// informClientNamed is informClient, the server's certificate checked for
// serverName.
func informClientNamed(t *testing.T, addr string, roots *x509.CertPool, client *tls.Certificate, serverName string) fleetcastv1.InformationServiceClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return fleetcastv1.NewInformationServiceClient(conn)
}

// informed is a publisher that does not publish (no Pub/Sub, no Lease),
// serving InformationService over mutual TLS on the control plane, with
// fleet ranked (1 ready of 3) in its namespace.
type informed struct {
	e    *kubetest.Namespace
	addr string
	ca   *tlstest.CA
	dir  string          // of its TLS files
	cert tls.Certificate // a client certificate of its client CA
	c    fleetcastv1.InformationServiceClient
}

func startInformed(t *testing.T) *informed {
	t.Helper()
	in := &informed{e: newNamespace(t), ca: tlstest.NewCA(t, "fleetcast-test-ca"), dir: tlstest.Dir(t)}
	server := in.ca.Server(t, "fleetcast-publisher")
	cfg := kubetest.Config("pc", in.e.Name)
	cfg.Publish, cfg.Project, cfg.Topic, cfg.LeaseName = false, "", "", "unused"
	cfg.GRPCAddr = freeAddr(t)
	cfg.TLSCertFile = tlstest.Write(t, in.dir, "tls.crt", server.Cert)
	cfg.TLSPrivateKeyFile = tlstest.Write(t, in.dir, "tls.key", server.Key)
	cfg.ClientCAFile = tlstest.Write(t, in.dir, "ca.crt", in.ca.PEM)
	cfg.ClusterLabels = map[string]string{"region": "europe-west1"}
	in.e.CreateFleet(in.e.Name, "ranked", map[string]string{"platform": "pc"})
	setReady(in.e, in.e.Name, "ranked", 1)
	kubetest.StartPublisher(t, cfg, cp.RESTConfig(), nil)
	in.addr, in.cert = cfg.GRPCAddr, in.ca.Client(t, "matchmaker").TLS(t)
	in.c = informClient(t, in.addr, in.ca.Pool(), &in.cert)
	return in
}

// TestInformationServiceOverMutualTLS: a grpc-go client with a
// certificate of the client CA calls every RPC of a publisher that does
// not publish, and its watch sees a status patch; one without a
// certificate, with one of another CA, or in plaintext is refused; a
// rotated server certificate is served without a restart, and the watch
// opened before it goes on.
func TestInformationServiceOverMutualTLS(t *testing.T) {
	in := startInformed(t)
	ctx, cancel := context.WithTimeout(t.Context(), waitTime)
	defer cancel()
	checkEveryRPC(ctx, t, in)

	w, err := in.c.WatchFleets(ctx, &fleetcastv1.WatchFleetsRequest{Filter: &fleetcastv1.FleetFilter{Selector: "platform=pc"}})
	require.NoError(t, err)
	for m, err := w.Recv(); m.GetSynced() == nil; m, err = w.Recv() {
		require.NoError(t, err)
	}
	setReady(in.e, in.e.Name, "ranked", 3)
	assert.Equal(t, int64(3), nextChange(t, w).GetReadyGameservers())

	checkRefusals(ctx, t, in)
	checkRotation(ctx, t, in)
	setReady(in.e, in.e.Name, "ranked", 2)
	assert.Equal(t, int64(2), nextChange(t, w).GetReadyGameservers(), "the watch opened before the rotation goes on")
}

// nextChange is the next fleet change of a watch: a MODIFIED one.
func nextChange(t *testing.T, w grpc.ServerStreamingClient[fleetcastv1.WatchFleetsResponse]) *fleetcastv1.FleetInformation {
	t.Helper()
	for {
		m, err := w.Recv()
		require.NoError(t, err)
		if ch := m.GetFleet(); ch != nil {
			assert.Equal(t, fleetcastv1.ChangeType_CHANGE_TYPE_MODIFIED, ch.GetType())
			return ch.GetFleet()
		}
	}
}

func checkEveryRPC(ctx context.Context, t *testing.T, in *informed) {
	t.Helper()
	var inf *fleetcastv1.InformResponse
	require.Eventually(t, func() bool {
		var err error
		inf, err = in.c.Inform(ctx, &fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Selector: "platform=pc"}})
		require.NoError(t, err)
		return len(inf.GetFleetInformation()) == 1 && inf.GetFleetInformation()[0].GetReadyGameservers() == 1
	}, waitTime, 20*time.Millisecond, "Inform answers the fleet")
	f := inf.GetFleetInformation()[0]
	assert.Equal(t, "pc", f.GetClusterName(), "cluster_name is --cluster")
	assert.Equal(t, "ranked", f.GetFleetName())
	assert.Equal(t, in.e.Name, f.GetNamespace())
	assert.False(t, f.GetStale())

	got, err := in.c.GetFleet(ctx, &fleetcastv1.GetFleetRequest{ClusterName: "pc", Namespace: in.e.Name, FleetName: "ranked"})
	require.NoError(t, err)
	assert.Equal(t, int64(3), got.GetFleetInformation().GetReplicas())
	clusters, err := in.c.ListClusters(ctx, &fleetcastv1.ListClustersRequest{})
	require.NoError(t, err)
	require.Len(t, clusters.GetClusters(), 1)
	assert.Equal(t, int64(1), clusters.GetClusters()[0].GetFleetCount())
	one, err := in.c.GetCluster(ctx, &fleetcastv1.GetClusterRequest{ClusterName: "pc"})
	require.NoError(t, err)
	assert.Equal(t, "europe-west1", labelOf(one.GetCluster().GetLabels(), "region"))
	_, err = in.c.GetCluster(ctx, &fleetcastv1.GetClusterRequest{ClusterName: "xbox"})
	assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	lv, err := in.c.LabelValues(ctx, &fleetcastv1.LabelValuesRequest{Key: "platform"})
	require.NoError(t, err)
	require.Len(t, lv.GetValues(), 1)
	assert.Equal(t, int64(1), lv.GetValues()[0].GetReadyGameservers())
	placed, err := in.c.Place(ctx, &fleetcastv1.PlaceRequest{Filter: &fleetcastv1.FleetFilter{Selector: "platform=pc"}})
	require.NoError(t, err)
	require.Len(t, placed.GetPlacements(), 1, "Place ranks the cluster's own fleets")
	assert.Equal(t, []any{"pc", "ranked", int64(1)}, []any{placed.GetPlacements()[0].GetClusterName(), placed.GetPlacements()[0].GetFleetName(),
		placed.GetPlacements()[0].GetAvailable()})
	_, err = in.c.Inform(ctx, &fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Selector: "platform in (pc"}})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "the filters are the query side's: %v", err)
}

// checkRefusals: no client certificate, one of another CA, plaintext.
func checkRefusals(ctx context.Context, t *testing.T, in *informed) {
	t.Helper()
	otherCert := tlstest.NewCA(t, "another-ca").Client(t, "intruder").TLS(t)
	conn, err := grpc.NewClient(in.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	for what, client := range map[string]fleetcastv1.InformationServiceClient{
		"no client certificate":       informClient(t, in.addr, in.ca.Pool(), nil),
		"a certificate of another CA": informClient(t, in.addr, in.ca.Pool(), &otherCert),
		"plaintext to the TLS port":   fleetcastv1.NewInformationServiceClient(conn),
	} {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := client.Inform(rctx, &fleetcastv1.InformRequest{})
		cancel()
		assert.Equal(t, codes.Unavailable, status.Code(err), "%s is refused: %v", what, err)
	}
}

// checkRotation: a server certificate of a new CA replaces the files (the
// key a moment after the certificate, as a rotation may be caught
// half-written); new connections get it, without a restart.
func checkRotation(ctx context.Context, t *testing.T, in *informed) {
	t.Helper()
	rotated := tlstest.NewCA(t, "rotated-ca")
	next := rotated.Server(t, "fleetcast-publisher")
	tlstest.Write(t, in.dir, "tls.crt", next.Cert)
	letTimePass(1100 * time.Millisecond) // a handshake may look at the half-written pair meanwhile
	tlstest.Write(t, in.dir, "tls.key", next.Key)
	require.Eventually(t, func() bool {
		c := informClient(t, in.addr, rotated.Pool(), &in.cert)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := c.ListClusters(rctx, &fleetcastv1.ListClustersRequest{})
		return err == nil
	}, waitTime, 100*time.Millisecond, "the rotated certificate is served")
}

func labelOf(ls []*fleetcastv1.Label, key string) string {
	for _, l := range ls {
		if l.GetKey() == key {
			return l.GetValue()
		}
	}
	return ""
}

// TestLeaderAndStandbyBothServe: with publishing and leader election on,
// the leader and the standby each serve InformationService from their own
// informers (here in plaintext, asked for: a grpc-go client with insecure
// credentials), and both see a change the standby never publishes.
func TestLeaderAndStandbyBothServe(t *testing.T) {
	e := newNamespace(t)
	rec := newRecorder()
	e.CreateFleet(e.Name, "f1", map[string]string{"platform": "pc"})
	clients := map[string]fleetcastv1.InformationServiceClient{}
	for _, id := range []string{"pub-a", "pub-b"} {
		cfg := electedConfig(e.Name, id)
		cfg.GRPCAddr, cfg.GRPCPlaintext = freeAddr(t), true
		kubetest.StartPublisher(t, cfg, cp.RESTConfig(), rec)
		conn, err := grpc.NewClient(cfg.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		clients[id] = fleetcastv1.NewInformationServiceClient(conn)
	}
	rec.waitFor(t, "a leader publishing", func(evs []fleet.Event) bool { return len(evs) > 0 })
	setReady(e, e.Name, "f1", 2)
	for id, c := range clients {
		require.Eventually(t, func() bool {
			resp, err := c.GetFleet(t.Context(), &fleetcastv1.GetFleetRequest{ClusterName: "pc", Namespace: e.Name, FleetName: "f1"})
			require.NoError(t, err, id)
			return resp.GetFleetInformation().GetReadyGameservers() == 2
		}, waitTime, 20*time.Millisecond, "%s serves the change", id)
	}
	leaders := map[string]bool{}
	for _, ev := range rec.all() {
		leaders[ev.Publisher.ID] = true
	}
	assert.Len(t, leaders, 1, "one of the two published: the other is a standby, and serves too")
}
