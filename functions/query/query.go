// Package query is the QueryFleets Cloud Function: the HTTP API over the
// fleets and clusters in Firestore, described by
// schemas/query_api.openapi.yaml, for callers in any language.
package query

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetquery"
	"github.com/fleetcast/fleetcast/functions/fnruntime"
	"github.com/fleetcast/fleetcast/logging"
)

// DefaultStaleAfter is fleetapi's: three default snapshot intervals.
const DefaultStaleAfter = fleetapi.DefaultStaleAfter

// Handler serves the query API.
type Handler struct {
	svc *fleetapi.Service
	log *slog.Logger
	mux *http.ServeMux
}

// NewHandler returns the API over store.
func NewHandler(store fleetapi.Reader, log *slog.Logger, now func() time.Time, staleAfter time.Duration) *Handler {
	h := &Handler{svc: fleetapi.NewService(store, now, staleAfter), log: log, mux: http.NewServeMux()}
	h.mux.HandleFunc("/v1/fleets", h.get(h.listFleets))
	h.mux.HandleFunc("/v1/fleets/{cluster}/{namespace}/{name}", h.get(h.getFleet))
	h.mux.HandleFunc("/v1/clusters", h.get(h.listClusters))
	h.mux.HandleFunc("/v1/clusters/{cluster}", h.get(h.getCluster))
	h.mux.HandleFunc("/v1/labels/{key...}", h.get(h.labelValues))
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "NOT_FOUND", "", fmt.Sprintf("no such resource: %s", r.URL.Path))
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// apiError is an answer other than 200.
type apiError struct {
	status int
	code   string
	param  string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badParam(err error) *apiError {
	var pe *fleetquery.ParamError
	if errors.As(err, &pe) {
		return &apiError{status: http.StatusBadRequest, code: "INVALID_ARGUMENT", param: pe.Param, msg: pe.Error()}
	}
	return &apiError{status: http.StatusBadRequest, code: "INVALID_ARGUMENT", msg: err.Error()}
}

func notFound(format string, args ...any) *apiError {
	return &apiError{status: http.StatusNotFound, code: "NOT_FOUND", msg: fmt.Sprintf(format, args...)}
}

// get wraps a read-only endpoint: GET and HEAD only, errors as JSON.
func (h *Handler) get(f func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			h.fail(w, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "", fmt.Sprintf("method %s not allowed; use GET", r.Method))
			return
		}
		v, err := f(r)
		var ae *apiError
		switch {
		case errors.As(err, &ae):
			h.fail(w, r, ae.status, ae.code, ae.param, ae.msg)
		case err != nil && unavailable(err):
			// The store cannot answer now: worth a retry.
			h.log.WarnContext(r.Context(), "query failed: the store is unavailable", "path", r.URL.Path, logging.KeyError, err.Error())
			h.fail(w, r, http.StatusServiceUnavailable, "UNAVAILABLE", "", "the fleet store is unavailable; retry")
		case err != nil:
			// Anything else is a fault a retry will not fix: its cause
			// goes to the log, not to the caller.
			h.log.ErrorContext(r.Context(), "query failed", "path", r.URL.Path, logging.KeyError, err.Error())
			h.fail(w, r, http.StatusInternalServerError, "INTERNAL", "", "the query failed; see the function's logs")
		default:
			h.reply(w, r, v)
		}
	}
}

func (h *Handler) listFleets(r *http.Request) (any, error) {
	q, err := fleetquery.ParseQuery(r.URL.Query())
	if err != nil {
		return nil, badParam(err)
	}
	list, err := h.svc.ListFleets(r.Context(), q)
	var pe *fleetquery.ParamError
	if errors.As(err, &pe) {
		return nil, badParam(err)
	}
	return list, err
}

func (h *Handler) getFleet(r *http.Request) (any, error) {
	k := fleet.Key{Cluster: r.PathValue("cluster"), Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	if err := fleet.ValidateClusterName(k.Cluster); err != nil {
		return nil, badParam(&fleetquery.ParamError{Param: "cluster", Message: err.Error()})
	}
	if err := k.Ref().Validate(); err != nil {
		return nil, badParam(&fleetquery.ParamError{Param: "namespace/name", Message: err.Error()})
	}
	return notFoundAs(h.svc.GetFleet(r.Context(), k))
}

func (h *Handler) listClusters(r *http.Request) (any, error) {
	for name := range r.URL.Query() {
		return nil, badParam(&fleetquery.ParamError{Param: name, Message: "unknown parameter"})
	}
	return h.svc.ListClusters(r.Context())
}

func (h *Handler) getCluster(r *http.Request) (any, error) {
	name := r.PathValue("cluster")
	if err := fleet.ValidateClusterName(name); err != nil {
		return nil, badParam(&fleetquery.ParamError{Param: "cluster", Message: err.Error()})
	}
	return notFoundAs(h.svc.GetCluster(r.Context(), name))
}

func (h *Handler) labelValues(r *http.Request) (any, error) {
	key := r.PathValue("key")
	if err := fleet.ValidateLabels("key", map[string]string{key: ""}); err != nil {
		return nil, badParam(&fleetquery.ParamError{Param: "key", Message: fmt.Sprintf("%q is not a label key", key)})
	}
	includeStale := false
	for name, vals := range r.URL.Query() {
		if name != "includeStale" || len(vals) != 1 || (vals[0] != "true" && vals[0] != "false") {
			return nil, badParam(&fleetquery.ParamError{Param: name, Message: "the only parameter is includeStale=true|false"})
		}
		includeStale = vals[0] == "true"
	}
	return h.svc.LabelValues(r.Context(), key, includeStale)
}

// notFoundAs turns fleetapi.ErrNotFound into a 404.
func notFoundAs[T any](v T, err error) (any, error) {
	if errors.Is(err, fleetapi.ErrNotFound) {
		return nil, notFound("%v", err)
	}
	return v, err
}

// reply writes v as JSON with a strong ETag, answering 304 when the
// client has it already, and gzip when the client accepts it.
func (h *Handler) reply(w http.ResponseWriter, r *http.Request, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "INTERNAL", "", "cannot encode the answer")
		return
	}
	sum := sha256.Sum256(body)
	etag := hex.EncodeToString(sum[:16])
	gz := acceptsGzip(r) && len(body) > 512
	if gz {
		etag += "-gzip" // a strong ETag names one representation
		w.Header().Set("Content-Encoding", "gzip")
	}
	etag = `"` + etag + `"`
	hd := w.Header()
	hd.Set("ETag", etag)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Vary", "Accept-Encoding")
	if matchesETag(r.Header.Get("If-None-Match"), etag) {
		hd.Del("Content-Encoding")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hd.Set("Content-Type", "application/json")
	if gz {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body = buf.Bytes()
	}
	hd.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// unavailable reports whether a store error means Firestore cannot answer
// now but may later — or that the caller went away (nobody reads that
// answer, and it is no fault to log as one).
func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Canceled:
		return true
	}
	return false
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, code, param, msg string) {
	e := map[string]any{"code": status, "status": code, "message": msg}
	if param != "" {
		e["param"] = param
	}
	body, _ := json.Marshal(map[string]any{"error": e})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(coding), "gzip") && strings.ReplaceAll(params, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// matchesETag applies If-None-Match's weak comparison.
func matchesETag(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// Config is the function's configuration, from the environment; the
// Firestore database is fnruntime.Firestore's.
type Config struct {
	StaleAfter time.Duration
	LogLevel   slog.Level
}

// ConfigFromEnv reads STALE_AFTER and LOG_LEVEL.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	var err error
	if c.StaleAfter, err = fnruntime.Duration(getenv, "STALE_AFTER", DefaultStaleAfter); err != nil {
		return Config{}, err
	}
	if c.LogLevel, err = logging.ParseLevel(getenv("LOG_LEVEL")); err != nil {
		return Config{}, fmt.Errorf("LOG_LEVEL: %w", err)
	}
	return c, nil
}

// defaultHandler serves the registered function: one Firestore client per
// instance, created on the first request.
var defaultHandler = fnruntime.Lazy[*Handler]{New: func(ctx context.Context) (*Handler, error) {
	cfg, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("configure QueryFleets: %w", err)
	}
	client, err := fnruntime.Firestore(ctx, os.Getenv)
	if err != nil {
		return nil, err
	}
	return NewHandler(firestoredb.New(client, fleet.DefaultTombstoneRetention, time.Now),
		logging.New(os.Stdout, cfg.LogLevel), time.Now, cfg.StaleAfter), nil
}}

// QueryFleets is the Cloud Function's entry point.
func QueryFleets(w http.ResponseWriter, r *http.Request) {
	h, err := defaultHandler.Get(r.Context())
	if err != nil {
		logging.New(os.Stdout, slog.LevelInfo).ErrorContext(r.Context(), "QueryFleets cannot start", logging.KeyError, err.Error())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":503,"status":"UNAVAILABLE","message":"the function is not configured; see its logs"}}`))
		return
	}
	h.ServeHTTP(w, r)
}
