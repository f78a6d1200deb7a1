// Package tlstest makes certificate authorities and the certificates they
// sign, as PEM files, for tests of servers that speak TLS and mutual TLS:
// a server's certificate for the loopback, a client's, and a CA the
// server does not trust.
package tlstest

import (
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
	"time"

	"github.com/fleetcast/fleetcast/internal/testenv"
)

// A CA signs certificates.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate.
	PEM []byte
}

// NewCA returns a new self-signed CA named name, valid for a day.
func NewCA(tb testenv.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("create CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("parse CA %s: %v", name, err)
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// A Pair is a certificate and its private key, in PEM.
type Pair struct{ Cert, Key []byte }

// Server issues a server certificate for localhost and the loopback
// addresses.
func (ca *CA) Server(tb testenv.TB, name string) Pair {
	tb.Helper()
	return ca.issue(tb, &x509.Certificate{Subject: pkix.Name{CommonName: name}, DNSNames: []string{"localhost", name},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
}

// Client issues a client certificate for name.
func (ca *CA) Client(tb testenv.TB, name string) Pair {
	tb.Helper()
	return ca.issue(tb, &x509.Certificate{Subject: pkix.Name{CommonName: name}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (ca *CA) issue(tb testenv.TB, tmpl *x509.Certificate) Pair {
	tb.Helper()
	key := newKey(tb)
	tmpl.SerialNumber = serial(tb)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatalf("issue %s: %v", tmpl.Subject.CommonName, err)
	}
	k, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatalf("marshal key: %v", err)
	}
	return Pair{Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: k})}
}

// Pool is a pool trusting the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// TLS is the pair as a certificate a tls.Config presents.
func (p Pair) TLS(tb testenv.TB) tls.Certificate {
	tb.Helper()
	c, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		tb.Fatalf("key pair: %v", err)
	}
	return c
}

// Dir is a directory for a test's files, removed when it ends.
func Dir(tb testenv.TB) string {
	tb.Helper()
	d, err := os.MkdirTemp("", "fleetcast-tls-")
	if err != nil {
		tb.Fatalf("temp dir: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// Write writes data to dir/name and returns its path.
func Write(tb testenv.TB, dir, name string, data []byte) string {
	tb.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		tb.Fatalf("write %s: %v", path, err)
	}
	return path
}

func newKey(tb testenv.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("key: %v", err)
	}
	return k
}

func serial(tb testenv.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		tb.Fatalf("serial: %v", err)
	}
	return n
}
