package query

import (
	"fmt"
	"net"
	"net/http"

	"github.com/fleetcast/fleetcast/fleetapi"
)

// MetricsAccess says who GET /metrics answers (METRICS_ACCESS). Its figures
// are every fleet's of every cluster, for the scraper of the instance:
// the API answers what a reader asks of them, /metrics all of them at once.
type MetricsAccess string

// Who /metrics answers.
const (
	// MetricsLocal, the default, answers only callers on the instance
	// itself: a connection from a loopback address that no proxy
	// forwarded (no Forwarded or X-Forwarded-For header), such as Managed
	// Service for Prometheus' sidecar scraping localhost:8080. Requests
	// from outside reach a Cloud Run instance through Google's front end,
	// which adds X-Forwarded-For to each, so none is answered, whatever
	// the service's ingress and however the caller authenticated.
	MetricsLocal MetricsAccess = "local"
	// MetricsAll answers every caller the service admits (its invoker
	// IAM, or its mutual TLS load balancer): for a Prometheus that
	// scrapes the service from outside the instance.
	MetricsAll MetricsAccess = "all"
	// MetricsOff answers no one.
	MetricsOff MetricsAccess = "off"
)

// ParseMetricsAccess reads METRICS_ACCESS's value.
func ParseMetricsAccess(v string) (MetricsAccess, error) {
	switch a := MetricsAccess(v); a {
	case MetricsLocal, MetricsAll, MetricsOff:
		return a, nil
	}
	return "", fmt.Errorf("%q: want local (the instance's own scraper), all (every caller the service admits) or off", v)
}

// WithMetricsAccess replaces MetricsLocal.
func WithMetricsAccess(a MetricsAccess) HandlerOption {
	return func(h *Handler) { h.metricsAccess = a }
}

// metricsRefusal is why r may not read /metrics, or nil.
func (h *Handler) metricsRefusal(r *http.Request) *fleetapi.Error {
	switch h.metricsAccess {
	case MetricsAll:
		return nil
	case MetricsOff:
		return &fleetapi.Error{Code: fleetapi.NotFound, Message: "/metrics is off on this instance (METRICS_ACCESS=off)"}
	}
	if isLocal(r) {
		return nil
	}
	return &fleetapi.Error{Code: fleetapi.PermissionDenied, Message: "/metrics answers only the instance's own scraper, on localhost " +
		"(METRICS_ACCESS=local); METRICS_ACCESS=all serves it to every caller the service admits"}
}

// isLocal reports whether r came from the instance itself: from a
// loopback address, through no proxy.
func isLocal(r *http.Request) bool {
	if r.Header.Get("X-Forwarded-For") != "" || r.Header.Get("Forwarded") != "" {
		return false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
