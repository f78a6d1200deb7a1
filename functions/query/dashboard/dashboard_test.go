package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/functions/query/dashboard"
)

func serve(t *testing.T, h http.Handler, method, path string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func notFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "api 404", http.StatusNotFound) })
}

// TestThePageAndItsAssets: the page at the root and each asset, with the
// security headers, a content type and a validator; anything else is the
// API's 404.
func TestThePageAndItsAssets(t *testing.T) {
	h := dashboard.New(notFound())
	for path, ctype := range map[string]string{
		"/": "text/html", "/ui/app.js": "text/javascript", "/ui/app.css": "text/css", "/ui/icon.svg": "image/svg+xml",
	} {
		w := serve(t, h, http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, w.Code, path)
		assert.Contains(t, w.Header().Get("Content-Type"), ctype, path)
		assert.Equal(t, dashboard.ContentSecurityPolicy, w.Header().Get("Content-Security-Policy"), path)
		assert.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"), path)
		assert.Equal(t, "no-cache", w.Header().Get("Cache-Control"), path)
		etag := w.Header().Get("ETag")
		require.NotEmpty(t, etag, path)

		again := serve(t, h, http.MethodGet, path, map[string]string{"If-None-Match": etag})
		assert.Equal(t, http.StatusNotModified, again.Code, path)
		head := serve(t, h, http.MethodHead, path, nil)
		assert.Equal(t, http.StatusOK, head.Code, path)
		assert.Empty(t, head.Body.String(), path)
	}
	for _, path := range []string{"/index.html", "/ui/index.html", "/ui/nosuch.js", "/ui/", "/nosuch", "/ui/../app.js"} {
		w := serve(t, h, http.MethodGet, path, nil)
		assert.Equal(t, http.StatusNotFound, w.Code, path)
		assert.Equal(t, "api 404\n", w.Body.String(), path)
	}
	w := serve(t, h, http.MethodPost, "/", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)
	assert.Equal(t, "GET, HEAD", w.Header().Get("Allow"))
}

// TestThePageLoadsNothingFromElsewhere: the policy allows the function's
// own origin only (default-src 'self', no inline script or style), so the
// page must name no other host, inline no script or style, and every asset
// it names must be served.
func TestThePageLoadsNothingFromElsewhere(t *testing.T) {
	assert.Contains(t, dashboard.ContentSecurityPolicy, "default-src 'self'")
	assert.NotContains(t, dashboard.ContentSecurityPolicy, "unsafe-inline")
	assert.NotContains(t, dashboard.ContentSecurityPolicy, "unsafe-eval")

	h := dashboard.New(notFound())
	names, err := dashboard.Assets()
	require.NoError(t, err)
	assets := map[string]bool{}
	for _, name := range names {
		assets[name] = true
	}
	// The SVG namespace is a name, not a place the browser loads from.
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	for name := range assets {
		body := serve(t, h, http.MethodGet, "/ui/"+name, nil).Body.String()
		if name == "index.html" {
			body = serve(t, h, http.MethodGet, "/", nil).Body.String()
		}
		for _, m := range external.FindAllString(body, -1) {
			assert.Equal(t, "http://www.w3.org", m, "%s names another host", name)
		}
		assert.NotContains(t, body, "@import", name)
		assert.NotContains(t, body, "eval(", name)
	}

	page := serve(t, h, http.MethodGet, "/", nil).Body.String()
	assert.NotRegexp(t, `<script(\s[^>]*)?>[^<]+</script>`, page, "an inline script")
	assert.NotContains(t, page, "<style", "an inline style sheet")
	assert.NotRegexp(t, `\sstyle=`, page, "a style attribute")
	assert.NotRegexp(t, `\son[a-z]+=`, page, "an inline event handler")
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(page, -1)
	require.NotEmpty(t, refs)
	for _, ref := range refs {
		name, ok := strings.CutPrefix(ref[1], "ui/")
		require.True(t, ok, "%s: relative and under ui/, so that the page works under any path", ref[1])
		assert.True(t, assets[name], "%s is not an asset", ref[1])
	}
}
