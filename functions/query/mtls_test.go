package query_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
)

// TestBehindTheLoadBalancerOnlyVerifiedCertificatesAreAnswered: with
// MTLS_VERIFIED_HEADER (Terraform's query_mtls), a request is answered
// only when the load balancer's header says the client's certificate
// verified; one that came around the load balancer (no header, a false
// one, a forged pair) is refused with 403 PERMISSION_DENIED, on every
// path; the metrics sidecar on the instance needs none. Without the
// variable nothing is checked.
func TestBehindTheLoadBalancerOnlyVerifiedCertificatesAreAnswered(t *testing.T) {
	const header = "X-Client-Cert-Chain-Verified"
	srv, _, _ := serverOf(t, func(*fleetapi.Options) {}, query.WithVerifiedClientCert(header))
	h := srv.Config.Handler
	do := func(path, remote string, values ...string) int {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = remote
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		for _, v := range values {
			req.Header.Add(header, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	lb := "169.254.1.1:40000"
	for _, path := range []string{"/v1/clusters", "/v1/fleets", "/", "/fleetcast.v1.InformationService/ListClusters"} {
		assert.Equal(t, http.StatusForbidden, do(path, lb), "%s without the load balancer's verdict", path)
		assert.Equal(t, http.StatusForbidden, do(path, lb, "false"), "%s, a certificate that did not verify", path)
		assert.Equal(t, http.StatusForbidden, do(path, lb, "true", "false"), "%s, two verdicts", path)
	}
	assert.Equal(t, http.StatusOK, do("/v1/clusters", lb, "true"))
	assert.Equal(t, http.StatusOK, do("/v1/clusters", lb, "True"))

	// The sidecar scrapes on the instance, with no load balancer.
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.RemoteAddr = "127.0.0.1:40000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	assert.Equal(t, http.StatusOK, w.Code, "the metrics sidecar")

	plain, _, _ := serverOf(t, func(*fleetapi.Options) {})
	req = httptest.NewRequest(http.MethodGet, "/v1/clusters", nil)
	req.RemoteAddr = lb
	w = httptest.NewRecorder()
	plain.Config.Handler.ServeHTTP(w, req)
	assert.Equal(t, http.StatusOK, w.Code, "no MTLS_VERIFIED_HEADER: no check")

	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "MTLS_VERIFIED_HEADER" {
				return v
			}
			return ""
		}
	}
	c, err := query.ConfigFromEnv(env(header))
	require.NoError(t, err)
	assert.Equal(t, header, c.VerifiedClientCertHeader)
	_, err = query.ConfigFromEnv(env("X Client: cert"))
	require.ErrorContains(t, err, "MTLS_VERIFIED_HEADER")
}
