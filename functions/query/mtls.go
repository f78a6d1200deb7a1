package query

import (
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/fleetcast/fleetcast/fleetapi"
)

// WithVerifiedClientCert makes the API answer only requests whose header
// says "true": the header in which a mutual TLS load balancer tells its
// backend that the client's certificate chain verified
// (MTLS_VERIFIED_HEADER; Terraform's query_mtls sets it to
// X-Client-Cert-Chain-Verified, from the load balancer's
// {client_cert_chain_verified}). Ingress settings alone leave paths
// around the load balancer (Cloud Run's "internal" ingress admits the
// project's VPC networks); a request that took one carries no verdict,
// and is refused with 403 PERMISSION_DENIED. A caller on the instance
// itself (loopback, no proxy: the metrics sidecar) needs none. Empty:
// no check.
func WithVerifiedClientCert(header string) HandlerOption {
	return func(h *Handler) { h.verifiedHeader = header }
}

// ValidateHeaderName checks MTLS_VERIFIED_HEADER's value.
func ValidateHeaderName(name string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("%q: want an HTTP header name, such as X-Client-Cert-Chain-Verified", name)
	}
	return nil
}

// certRefusal is why r, which came around the load balancer, may not be
// answered, or nil.
func (h *Handler) certRefusal(r *http.Request) *fleetapi.Error {
	if h.verifiedHeader == "" || isLocal(r) {
		return nil
	}
	if v := r.Header.Values(h.verifiedHeader); len(v) == 1 && strings.EqualFold(strings.TrimSpace(v[0]), "true") {
		return nil
	}
	return &fleetapi.Error{Code: fleetapi.PermissionDenied, Message: fmt.Sprintf(
		"this service answers only through its mutual TLS load balancer, for a client certificate it verified (%s: true); "+
			"call the load balancer's URL with your certificate", h.verifiedHeader)}
}
