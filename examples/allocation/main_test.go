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
	"os"
	"path/filepath"
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

	"github.com/fleetcast/fleetcast/gen/agones/allocation"
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

// fakeService stands in for an allocation service, fleetcast-allocator
// or agones-allocator: mutual TLS, the AllocationService, and the answers
// it is given in turn (an allocation when they run out).
type fakeService struct {
	allocation.UnimplementedAllocationServiceServer
	mu      sync.Mutex
	answers []error
	got     []*allocation.AllocationRequest
}

func (a *fakeService) Allocate(_ context.Context, r *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, r)
	if len(a.answers) > 0 {
		err := a.answers[0]
		a.answers = a.answers[1:]
		return nil, err
	}
	return &allocation.AllocationResponse{GameServerName: "ranked-x7k2p", Address: "203.0.113.7", NodeName: "node-1", Source: "10.0.0.7:443",
		Ports: []*allocation.AllocationResponse_GameServerStatusPort{{Name: "default", Port: 7654}}}, nil
}

func (p pki) serve(t *testing.T, a *fakeService) string {
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

func (p pki) flags(addr string) []string {
	return []string{"--allocator", addr, "--cert", filepath.Join(p.dir, "client.crt"), "--key", filepath.Join(p.dir, "client.key"), "--ca", filepath.Join(p.dir, "ca.crt")}
}

// TestSendsAgonesRequestAndPrintsWhereToConnect: the request is what a
// GameServerAllocation of the namespace and labels says, over mutual
// TLS; the answer is where the players connect. A first UNAVAILABLE is
// retried.
func TestSendsAgonesRequestAndPrintsWhereToConnect(t *testing.T) {
	p := newPKI(t)
	svc := &fakeService{answers: []error{status.Error(codes.Unavailable, "no cluster's allocator could be reached")}}
	var out, errOut bytes.Buffer
	err := run(t.Context(), append(p.flags(p.serve(t, svc)), "--namespace", "games", "--label", "mode=ranked", "--label", "version=1.42"), &out, &errOut)
	require.NoError(t, err, errOut.String())
	assert.Equal(t, "game server games/ranked-x7k2p at 203.0.113.7 ports 7654 (default), allocated by 10.0.0.7:443\n", out.String())
	assert.Equal(t, "try 1 of 3: no cluster's allocator could be reached; retrying\n", errOut.String())
	want := &allocation.AllocationRequest{Namespace: "games", GameServerSelectors: []*allocation.GameServerSelector{{
		MatchLabels: map[string]string{"mode": "ranked", "version": "1.42"}, GameServerState: allocation.GameServerSelector_READY}}}
	require.Len(t, svc.got, 2)
	assert.True(t, proto.Equal(want, svc.got[1]), "%v", svc.got[1])
}

// TestAgonesStatusesAreSaid: RESOURCE_EXHAUSTED is not retried; an
// UNAVAILABLE that lasts ends after the retries; a client without a
// certificate the service trusts is refused.
func TestAgonesStatusesAreSaid(t *testing.T) {
	p := newPKI(t)
	full := &fakeService{answers: []error{status.Error(codes.ResourceExhausted, "no cluster allocated (2 tried)")}}
	err := run(t.Context(), p.flags(p.serve(t, full)), &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Equal(t, "no game server can take the match now (RESOURCE_EXHAUSTED): no cluster allocated (2 tried)", err.Error())
	assert.Len(t, full.got, 1)

	down := &fakeService{answers: []error{status.Error(codes.Unavailable, "a"), status.Error(codes.Unavailable, "b")}}
	err = run(t.Context(), append(p.flags(p.serve(t, down)), "--retries", "1"), &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Equal(t, "Unavailable: b", err.Error())

	cfg, err := parseFlags(p.flags(p.serve(t, &fakeService{})), &bytes.Buffer{})
	require.NoError(t, err)
	cfg.tls.Certificates = nil
	conn, err := grpc.NewClient(cfg.allocator, grpc.WithTransportCredentials(credentials.NewTLS(cfg.tls)))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = allocation.NewAllocationServiceClient(conn).Allocate(ctx, cfg.request)
	require.Error(t, err, "mutual TLS: no certificate, no allocation")
}

func TestBadFlags(t *testing.T) {
	for want, args := range map[string][]string{
		"--allocator is required": {"--label", "a=b"},
		"want KEY=VALUE":          {"--allocator", "x:1", "--label", "nolabel"},
		"--cert, --key and --ca":  {"--allocator", "x:1"},
		"--retries -1: want 0":    {"--allocator", "x:1", "--retries", "-1"},
		"unexpected arguments":    {"--allocator", "x:1", "extra"},
	} {
		_, err := parseFlags(args, &bytes.Buffer{})
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), want)
	}
}
