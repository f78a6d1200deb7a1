// Package dashboard is the web dashboard the query function serves at its
// root: a page that follows GET /v1/watch and GET /v1/labels/{key} live.
// Its files are embedded, need no build step and load nothing from
// elsewhere: every response carries a Content-Security-Policy that allows
// the function's own origin only.
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"mime"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

//go:embed static
var static embed.FS

// AssetPrefix is the path the page's assets are served under.
const AssetPrefix = "/ui/"

// ContentSecurityPolicy allows the page its own origin only: no inline
// script or style, no other host, no framing.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

type asset struct {
	body        []byte
	contentType string
	etag        string
}

// loadAssets reads the embedded files once, with their content types and
// entity tags, by name under static/.
var loadAssets = sync.OnceValues(func() (map[string]asset, error) {
	assets := map[string]asset{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = http.DetectContentType(body)
		}
		sum := sha256.Sum256(body)
		assets[strings.TrimPrefix(p, "static/")] = asset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dashboard: the embedded files: %w", err)
	}
	return assets, nil
})

// Handler serves the page at "/" and its assets under AssetPrefix; any
// other path is not its own (a 404 it leaves to notFound).
type Handler struct {
	notFound http.Handler
}

// New returns the dashboard's handler; notFound answers paths that are
// neither the page nor one of its assets.
func New(notFound http.Handler) *Handler {
	return &Handler{notFound: notFound}
}

// Assets lists the names of the embedded files.
func Assets() ([]string, error) {
	assets, err := loadAssets()
	return slices.Collect(maps.Keys(assets)), err
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := ""
	switch {
	case r.URL.Path == "/":
		name = "index.html"
	case strings.HasPrefix(r.URL.Path, AssetPrefix):
		name = strings.TrimPrefix(r.URL.Path, AssetPrefix)
	}
	assets, err := loadAssets()
	if err != nil { // a build that embedded no files: nothing to serve
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	a, ok := assets[name]
	if !ok || name == "index.html" && r.URL.Path != "/" {
		h.notFound.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("method %s not allowed; use GET", r.Method), http.StatusMethodNotAllowed)
		return
	}
	hd := w.Header()
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Content-Type", a.contentType)
	// Revalidated every time (a 304 while unchanged): a new deployment's
	// page never runs with the old one's script.
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", a.etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}
