package inform

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fleetcast/fleetcast/logging"
)

// Certs serves a server certificate and, with a client CA, requires and
// verifies every client's certificate (mutual TLS). It reloads the files
// when they change — as cert-manager and Kubernetes Secret volumes rotate
// them, by replacing the files or the symbolic link to them — without a
// restart: a handshake looks at the files' size and modification time at
// most once per reloadCheck, and a change is loaded for the handshakes
// after it. A change that does not load (a rotation caught half-written)
// keeps the certificates that work and is logged; the next look tries
// again.
type Certs struct {
	certFile, keyFile, caFile string
	log                       *slog.Logger
	now                       func() time.Time

	mu      sync.Mutex
	config  *tls.Config
	stamps  [3]stamp
	checked time.Time
	failing string // the change that did not load, logged once
}

// reloadCheck is how often a handshake looks at the files.
const reloadCheck = time.Second

// stamp is what tells a file changed.
type stamp struct {
	size    int64
	modTime time.Time
}

func stampOf(path string) (stamp, error) {
	if path == "" {
		return stamp{}, nil
	}
	fi, err := os.Stat(path) // through the link a Secret volume swaps
	if err != nil {
		return stamp{}, err
	}
	return stamp{size: fi.Size(), modTime: fi.ModTime()}, nil
}

// NewCerts loads the server's certificate and key, and the client CA
// when caFile is set; it fails when they do not load, so that a bad
// Secret stops the start, not the first client. now is its clock, for
// when to look at the files again.
func NewCerts(certFile, keyFile, caFile string, now func() time.Time, log *slog.Logger) (*Certs, error) {
	c := &Certs{certFile: certFile, keyFile: keyFile, caFile: caFile, log: log, now: now}
	stamps, config, err := c.load()
	if err != nil {
		return nil, err
	}
	c.stamps, c.config, c.checked = stamps, config, c.now()
	return c, nil
}

// load reads the files into a server configuration.
func (c *Certs) load() ([3]stamp, *tls.Config, error) {
	var stamps [3]stamp
	for i, f := range []string{c.certFile, c.keyFile, c.caFile} {
		s, err := stampOf(f)
		if err != nil {
			return stamps, nil, err
		}
		stamps[i] = s
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return stamps, nil, fmt.Errorf("load the server certificate (--tls-cert-file, --tls-private-key-file): %w", err)
	}
	config := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return stamps, nil, fmt.Errorf("read the client CA (--client-ca-file): %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return stamps, nil, errors.New("the client CA (--client-ca-file) holds no PEM certificate")
		}
		config.ClientCAs, config.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return stamps, config, nil
}

// Mutual reports whether clients must present a certificate of the CA.
func (c *Certs) Mutual() bool { return c.caFile != "" }

// ServerConfig is the TLS configuration to serve with: each handshake
// gets the newest certificates.
func (c *Certs) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.current(), nil
		},
	}
}

// current reloads the files if they changed and it is time to look.
func (c *Certs) current() *tls.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if now.Sub(c.checked) < reloadCheck {
		return c.config
	}
	c.checked = now
	changed := false
	for i, f := range []string{c.certFile, c.keyFile, c.caFile} {
		s, err := stampOf(f)
		changed = changed || err != nil || s != c.stamps[i]
	}
	if !changed {
		return c.config
	}
	stamps, config, err := c.load()
	if err != nil {
		if msg := err.Error(); msg != c.failing {
			c.failing = msg
			c.log.Warn("the TLS files changed but do not load; serving the certificates that work until they do", logging.KeyError, msg)
		}
		return c.config
	}
	c.stamps, c.config, c.failing = stamps, config, ""
	c.log.Info("TLS certificates reloaded", "certFile", c.certFile, "clientCAFile", c.caFile)
	return c.config
}
