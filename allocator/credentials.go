package allocator

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc/credentials"
)

// The files of a policy's Secret, as Agones' guide to multi-cluster
// allocation creates it (kubectl create secret generic --from-file=...)
// and Kubernetes mounts it: one file per key.
const (
	SecretCert = "tls.crt"
	SecretKey  = "tls.key"
	SecretCA   = "ca.crt"
)

// LoadTLS reads the client credentials of a policy from dir/SECRET, the
// policy's Secret mounted as a directory: the client certificate and its
// key (tls.crt, tls.key), and the CA of the allocator's server
// certificate, the policy's serverCa or else the Secret's ca.crt.
func LoadTLS(dir string, p *Policy) (*tls.Config, error) {
	base := filepath.Join(dir, p.SecretName)
	pair, err := tls.LoadX509KeyPair(filepath.Join(base, SecretCert), filepath.Join(base, SecretKey))
	if err != nil {
		return nil, fmt.Errorf("policy %q: the client certificate of Secret %q: %w", p.Name, p.SecretName, err)
	}
	ca, from := p.ServerCA, "the policy's serverCa"
	if len(ca) == 0 {
		from = filepath.Join(base, SecretCA)
		if ca, err = os.ReadFile(from); err != nil {
			return nil, fmt.Errorf("policy %q: no serverCa, and the Secret's %s: %w", p.Name, SecretCA, err)
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("policy %q: %s holds no PEM certificate", p.Name, from)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// watchedTLS is TLS transport credentials that remember the last error of
// a connection's handshake or of its first reads — where a server that
// refuses the client's certificate says so under TLS 1.3 — so that a
// skipped cluster can be logged with why.
type watchedTLS struct {
	credentials.TransportCredentials
	mu   sync.Mutex
	last error
}

func newWatchedTLS(c *tls.Config) *watchedTLS {
	return &watchedTLS{TransportCredentials: credentials.NewTLS(c)}
}

func (w *watchedTLS) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := w.TransportCredentials.ClientHandshake(ctx, authority, &watchedConn{Conn: raw, w: w})
	if err != nil {
		w.record(err)
		return nil, nil, err
	}
	return &watchedConn{Conn: conn, w: w}, info, nil
}

func (w *watchedTLS) Clone() credentials.TransportCredentials {
	return &watchedTLS{TransportCredentials: w.TransportCredentials.Clone()}
}

func (w *watchedTLS) record(err error) {
	if err == nil || errors.Is(err, net.ErrClosed) {
		return
	}
	w.mu.Lock()
	w.last = err
	w.mu.Unlock()
}

// lastError is the last error a connection met, nil if none.
func (w *watchedTLS) lastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// watchedConn records its read errors with its credentials.
type watchedConn struct {
	net.Conn
	w *watchedTLS
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.w.record(err)
	}
	return n, err
}

// refusedCertificate reports whether err says the server refused the
// client's certificate (an alert it sent: crypto/tls reports one as a
// net.OpError of Op "remote error") or the client the server's, as
// opposed to a network failure.
func refusedCertificate(err error) bool {
	var op *net.OpError
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	return errors.As(err, &op) && op.Op == "remote error" ||
		errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname)
}
