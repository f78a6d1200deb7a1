package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/gen/agones/allocation"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
)

// pki is a CA and the PEM files of a server and a client certificate it
// signed, in dir.
type pki struct {
	dir        string
	serverPair tls.Certificate
	pool       *x509.CertPool
}

func newPKI(t *testing.T) pki {
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "allocator-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		kder, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	scert, skey := issue("agones-allocator", 2, x509.ExtKeyUsageServerAuth)
	ccert, ckey := issue("matchmaker", 3, x509.ExtKeyUsageClientAuth)
	for name, b := range map[string][]byte{
		"ca.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), "client.crt": ccert, "client.key": ckey,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	pair, err := tls.X509KeyPair(scert, skey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pki{dir: dir, serverPair: pair, pool: pool}
}

// fakeAllocator is an agones-allocator: mutual TLS, the AllocationService,
// and either room for one more game server or none.
type fakeAllocator struct {
	allocation.UnimplementedAllocationServiceServer
	full bool
	mu   sync.Mutex
	got  []*allocation.AllocationRequest
}

func (a *fakeAllocator) Allocate(_ context.Context, r *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, r)
	if a.full {
		// What Agones' allocator answers when no game server matches.
		return nil, status.Error(codes.ResourceExhausted, "there is no available GameServer to allocate")
	}
	return &allocation.AllocationResponse{GameServerName: "rooms-x7k2p", Address: "203.0.113.7", NodeName: "node-1",
		Ports: []*allocation.AllocationResponse_GameServerStatusPort{{Name: "default", Port: 7654}}}, nil
}

func (p pki) serve(t *testing.T, a *fakeAllocator) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{p.serverPair}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	})))
	allocation.RegisterAllocationServiceServer(srv, a)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// fakeFleetcast answers Place with two candidates, best first, each with
// the allocator endpoint its cluster advertises, as the query API would
// for -l platform=pc --min-ready 1.
type fakeFleetcast struct {
	fleetcastv1connect.UnimplementedInformationServiceHandler
	got       *fleetcastv1.PlaceRequest
	endpoints map[string]string // advertised, by cluster
	none      bool              // answer no candidate
}

func (f *fakeFleetcast) Place(_ context.Context, r *connect.Request[fleetcastv1.PlaceRequest]) (*connect.Response[fleetcastv1.PlaceResponse], error) {
	f.got = r.Msg
	if f.none {
		return connect.NewResponse(&fleetcastv1.PlaceResponse{LeftOut: []*fleetcastv1.LeftOut{{Reason: fleetcastv1.LeftOutReason_LEFT_OUT_REASON_STALE,
			Fleets: 2, Clusters: []string{"pc-eu"}, ClusterCount: 1, Message: "2 fleets of stale clusters (pc-eu): no heartbeat for 1m30s"}}}), nil
	}
	p := func(cluster, name string, ready int64) *fleetcastv1.Placement {
		return &fleetcastv1.Placement{ClusterName: cluster, Namespace: "games", FleetName: name, Labels: []*fleetcastv1.Label{{Key: "platform", Value: "pc"}},
			AllocatorEndpoint: f.endpoints[cluster], Resource: fleetapi.ResourceGameServers, Available: ready, ReadyGameservers: ready, Weight: 1}
	}
	return connect.NewResponse(&fleetcastv1.PlaceResponse{Placements: []*fleetcastv1.Placement{
		p("pc-eu", "rooms-eu", 3), p("pc-us", "rooms-us", 2),
	}, Eligible: 2}), nil
}

// TestAllocatesOnTheNextCandidateWhenTheFirstFilledUp: fleetcast ranks
// pc-eu first, but its allocator has no Ready game server left; the
// example tries pc-us, whose allocator allocates, over mutual TLS.
func TestAllocatesOnTheNextCandidateWhenTheFirstFilledUp(t *testing.T) {
	p := newPKI(t)
	eu, us := &fakeAllocator{full: true}, &fakeAllocator{}
	euAddr, usAddr := p.serve(t, eu), p.serve(t, us)
	// pc-eu advertises a dead endpoint, which --allocator overrides;
	// pc-us advertises its real one.
	fc := &fakeFleetcast{endpoints: map[string]string{"pc-eu": "127.0.0.1:1", "pc-us": usAddr}}
	path, h := fleetcastv1connect.NewInformationServiceHandler(fc)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	query := httptest.NewServer(mux)
	defer query.Close()

	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"--fleetcast", query.URL, "-l", "platform=pc", "--min-ready", "1",
		"--allocator", "pc-eu=" + euAddr, "--policy", "region=eu:0:3", "--policy", ":1",
		"--cert", filepath.Join(p.dir, "client.crt"), "--key", filepath.Join(p.dir, "client.key"), "--ca", filepath.Join(p.dir, "ca.crt")}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	assert.Equal(t, "pc-us/games/rooms-us: game server rooms-x7k2p at 203.0.113.7 ports 7654 (default)\n", out.String())
	assert.Contains(t, errOut.String(), "candidate 1 of 2, pc-eu/games/rooms-eu (3 gameServers available when fleetcast saw it): filled up since: there is no available GameServer to allocate; trying the next")

	require.NotNil(t, fc.got)
	assert.Equal(t, "platform=pc", fc.got.GetFilter().GetSelector())
	assert.EqualValues(t, 1, fc.got.GetGameServers(), "what the match needs")
	assert.EqualValues(t, 3, fc.got.GetCount(), "--candidates")
	require.Len(t, fc.got.GetPolicy(), 2)
	assert.Equal(t, "region=eu", fc.got.GetPolicy()[0].GetClusterSelector())
	assert.EqualValues(t, 3, fc.got.GetPolicy()[0].GetWeight())
	assert.EqualValues(t, 1, fc.got.GetPolicy()[1].GetPriority())
	for _, a := range []*fakeAllocator{eu, us} {
		require.Len(t, a.got, 1)
		assert.Equal(t, "games", a.got[0].GetNamespace())
		require.Len(t, a.got[0].GetGameServerSelectors(), 1)
	}
	assert.Equal(t, map[string]string{"agones.dev/fleet": "rooms-eu"}, eu.got[0].GetGameServerSelectors()[0].GetMatchLabels())
	assert.Equal(t, map[string]string{"agones.dev/fleet": "rooms-us"}, us.got[0].GetGameServerSelectors()[0].GetMatchLabels())
	assert.Equal(t, allocation.GameServerSelector_READY, us.got[0].GetGameServerSelectors()[0].GetGameServerState())
}

// TestEveryCandidateFailing says why each failed; the allocator refuses a
// client without a certificate.
func TestEveryCandidateFailing(t *testing.T) {
	p := newPKI(t)
	addr := p.serve(t, &fakeAllocator{full: true})
	path, h := fleetcastv1connect.NewInformationServiceHandler(&fakeFleetcast{})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	query := httptest.NewServer(mux)
	defer query.Close()
	args := []string{"--fleetcast", query.URL, "--allocator", "pc-eu=" + addr,
		"--cert", filepath.Join(p.dir, "client.crt"), "--key", filepath.Join(p.dir, "client.key"), "--ca", filepath.Join(p.dir, "ca.crt")}
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, &out, &errOut)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no candidate could allocate")
	assert.Contains(t, err.Error(), "pc-eu/games/rooms-eu: filled up since")
	assert.Contains(t, err.Error(), "pc-us/games/rooms-us: cluster pc-us advertises no allocator endpoint")
	assert.Empty(t, out.String())

	// No candidate: the reasons fleetcast gives.
	none := httptest.NewServer(func() http.Handler {
		path, h := fleetcastv1connect.NewInformationServiceHandler(&fakeFleetcast{none: true})
		mux := http.NewServeMux()
		mux.Handle(path, h)
		return mux
	}())
	defer none.Close()
	err = run(t.Context(), append([]string{"--fleetcast", none.URL}, args[2:]...), &out, &errOut)
	require.Error(t, err)
	assert.Equal(t, `no fleet matching "" can take the match: nowhere to allocate (2 fleets of stale clusters (pc-eu): no heartbeat for 1m30s)`, err.Error())

	// Without a client certificate the handshake fails: mutual TLS.
	cfg, err := parseFlags(args, &errOut)
	require.NoError(t, err)
	cfg.tls.Certificates = nil
	cfg.timeout = 2 * time.Second
	_, err = allocate(t.Context(), cfg, fleetapi.Placement{Cluster: "pc-eu", Namespace: "games", Name: "rooms-eu"})
	require.Error(t, err)
	assert.NotEqual(t, codes.ResourceExhausted, status.Code(err))
}

func TestBadFlags(t *testing.T) {
	for args, want := range map[string][]string{
		"--fleetcast is required":    {"--allocator", "a=b:1"},
		"want CLUSTER=HOST:PORT":     {"--allocator", "nohost"},
		"--cert, --key and --ca":     {"--fleetcast", "http://x", "--allocator", "a=b:1"},
		"-l: ":                       {"--fleetcast", "http://x", "--allocator", "a=b:1", "-l", "in (x"},
		"--candidates 0: want 1 to ": {"--fleetcast", "http://x", "--allocator", "a=b:1", "--candidates", "0"},
		"--policy: \"eu\": want":     {"--fleetcast", "http://x", "--allocator", "a=b:1", "--policy", "eu"},
	} {
		_, err := parseFlags(want, &bytes.Buffer{})
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), args)
	}
}
