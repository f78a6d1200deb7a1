package query_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// TestMetricsAnswersOnlyTheInstancesOwnScraper: by default (METRICS_ACCESS
// local) /metrics answers a caller on the instance (loopback, no proxy),
// as Managed Service for Prometheus' sidecar is, and refuses with 403
// PERMISSION_DENIED, naming METRICS_ACCESS, what came through a proxy
// (Cloud Run's front end adds X-Forwarded-For to every request it
// forwards) or from another address; the API beside it answers them all.
// METRICS_ACCESS=all answers every caller; off none (404).
func TestMetricsAnswersOnlyTheInstancesOwnScraper(t *testing.T) {
	get := func(h http.Handler, remote string, header http.Header) (int, string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.RemoteAddr = remote
		for k, v := range header {
			req.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var e struct {
			Error struct {
				Status, Message string
			} `json:"error"`
		}
		if w.Code != http.StatusOK {
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e), w.Body.String())
		}
		return w.Code, e.Error.Status + ": " + e.Error.Message
	}
	forwarded := http.Header{"X-Forwarded-For": {"203.0.113.9"}}
	srv, _, _ := serverOf(t, func(*fleetapi.Options) {})
	h := srv.Config.Handler

	resp, err := testhttp.Client.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the instance's own scraper, on localhost")
	code, _ := get(h, "[::1]:40000", nil)
	assert.Equal(t, http.StatusOK, code, "IPv6 loopback")
	for name, c := range map[string]struct {
		remote string
		header http.Header
	}{
		"through Cloud Run's front end": {"127.0.0.1:40000", forwarded},
		"through another proxy":         {"127.0.0.1:40000", http.Header{"Forwarded": {"for=203.0.113.9"}}},
		"from another address":          {"10.8.0.7:40000", nil},
		"from the link-local proxy":     {"169.254.1.1:40000", nil},
	} {
		code, msg := get(h, c.remote, c.header)
		assert.Equal(t, http.StatusForbidden, code, name)
		assert.Contains(t, msg, "PERMISSION_DENIED", name)
		assert.Contains(t, msg, "METRICS_ACCESS", name)
		// The API answers them.
		req := httptest.NewRequest(http.MethodGet, "/v1/clusters", nil)
		req.RemoteAddr = c.remote
		for k, v := range c.header {
			req.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		assert.Equal(t, http.StatusOK, w.Code, "%s: /v1/clusters", name)
	}

	all, _, _ := serverOf(t, func(*fleetapi.Options) {}, query.WithMetricsAccess(query.MetricsAll))
	code, _ = get(all.Config.Handler, "10.8.0.7:40000", forwarded)
	assert.Equal(t, http.StatusOK, code, "METRICS_ACCESS=all: every caller the service admits")

	off, _, _ := serverOf(t, func(*fleetapi.Options) {}, query.WithMetricsAccess(query.MetricsOff))
	code, msg := get(off.Config.Handler, "127.0.0.1:40000", nil)
	assert.Equal(t, http.StatusNotFound, code, "METRICS_ACCESS=off")
	assert.Contains(t, msg, "METRICS_ACCESS=off")

	for v, want := range map[string]query.MetricsAccess{"": query.MetricsLocal, "local": query.MetricsLocal, "all": query.MetricsAll, "off": query.MetricsOff} {
		c, err := query.ConfigFromEnv(func(k string) string {
			if k == "METRICS_ACCESS" {
				return v
			}
			return ""
		})
		require.NoError(t, err, v)
		assert.Equal(t, want, c.MetricsAccess, v)
	}
	_, err = query.ConfigFromEnv(func(k string) string {
		if k == "METRICS_ACCESS" {
			return "public"
		}
		return ""
	})
	require.ErrorContains(t, err, "METRICS_ACCESS")
	require.ErrorContains(t, err, "want local")
}
