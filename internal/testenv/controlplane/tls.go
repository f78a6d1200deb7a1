package controlplane

import "crypto/tls"

// insecureTLS trusts the API server's self-signed certificate: it listens on
// loopback only, for tests.
func insecureTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback test server
}
