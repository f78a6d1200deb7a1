// Package query is the QueryFleets Cloud Function: the HTTP API over the
// fleets and clusters in Firestore, described by
// schemas/query_api.openapi.yaml, for callers in any language, and the web
// dashboard over it (package dashboard) at its root.
package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetmetrics"
	"github.com/fleetcast/fleetcast/fleetapi/fleetrpc"
	"github.com/fleetcast/fleetcast/fleetclient"
	"github.com/fleetcast/fleetcast/fleetfeed"
	"github.com/fleetcast/fleetcast/functions/fnruntime"
	"github.com/fleetcast/fleetcast/functions/query/dashboard"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/telemetry"
)

// Handler serves the query API.
type Handler struct {
	// svc is the view the handler answers from; nil when it answers
	// over partitions (NewPartitionsHandler).
	svc *fleetapi.Service
	// api answers: svc, or the partitions.
	api     fleetrpc.Backend
	log     *slog.Logger
	mux     *http.ServeMux
	streams *fleetrpc.Streams
	// traced serves mux in a span per request or stream.
	traced http.Handler
	// writeTimeout bounds each write of a stream.
	writeTimeout time.Duration
	metricsOpts  fleetmetrics.Options
	// metricsAccess says who /metrics answers.
	metricsAccess MetricsAccess
	// verifiedHeader: see WithVerifiedClientCert.
	verifiedHeader string
	// metrics computes /metrics' fleet figures once per version of the
	// view, whatever the number of scrapers.
	metricsCache *fleetmetrics.Cache
}

// DefaultStreamWriteTimeout bounds how long one message of a stream may
// take to write: a client that reads nothing for that long is dropped (it
// resumes with its last resume token), and holds nothing meanwhile.
const DefaultStreamWriteTimeout = fleetrpc.DefaultStreamWriteTimeout

// HandlerOption configures a Handler.
type HandlerOption func(*Handler)

// WithStreamWriteTimeout replaces DefaultStreamWriteTimeout.
func WithStreamWriteTimeout(d time.Duration) HandlerOption {
	return func(h *Handler) {
		if d > 0 {
			h.writeTimeout = d
		}
	}
}

// WithMetrics configures /metrics (package fleetmetrics); its zero value
// serves each fleet up to fleetmetrics.DefaultMaxSeries series.
func WithMetrics(o fleetmetrics.Options) HandlerOption {
	return func(h *Handler) { h.metricsOpts = o }
}

// NewHandler returns the API answering from svc.
func NewHandler(svc *fleetapi.Service, log *slog.Logger, opts ...HandlerOption) *Handler {
	return newHandler(svc, svc, log, opts...)
}

// NewPartitionsHandler returns the API answering over every partition of
// a deployment as one view (fleetapi.Partitions; PARTITIONS): its lists,
// placements, label values, clusters and streams, by REST, Connect, gRPC,
// server-sent events, the dashboard and the CLI. Its answers carry no
// ETag (each is merged afresh), and it serves no /metrics (each partition
// serves its clusters').
func NewPartitionsHandler(p *fleetapi.Partitions, log *slog.Logger, opts ...HandlerOption) *Handler {
	return newHandler(nil, p, log, opts...)
}

func newHandler(svc *fleetapi.Service, api fleetrpc.Backend, log *slog.Logger, opts ...HandlerOption) *Handler {
	h := &Handler{svc: svc, api: api, log: log, mux: http.NewServeMux(), writeTimeout: DefaultStreamWriteTimeout, metricsAccess: MetricsLocal}
	for _, o := range opts {
		o(h)
	}
	h.streams = fleetrpc.NewStreams(log, h.writeTimeout)
	h.metricsCache = fleetmetrics.NewCache(h.metricsOpts)
	// Lists, placements, label values and the metrics are heavy: they
	// take turns at Service.Admit's slots, so that no number of them
	// delays a fleet or a cluster read by name.
	h.mux.HandleFunc("/v1/fleets", h.get(listFleets, heavy))
	h.mux.HandleFunc("/v1/fleets/{cluster}/{namespace}/{name}", h.get(getFleet, light))
	h.mux.HandleFunc("/v1/clusters", h.get(listClusters, light))
	h.mux.HandleFunc("/v1/clusters/{cluster}", h.get(getCluster, light))
	h.mux.HandleFunc("/v1/labels/{key...}", h.get(labelValues, heavy))
	h.mux.HandleFunc("/v1/placements", h.place)
	h.mux.HandleFunc("/v1/watch", h.watch)
	h.mux.HandleFunc("/metrics", h.metrics)
	h.mux.HandleFunc("/v1/version", h.version)
	// fleetcast.v1.InformationService: Connect, gRPC-Web and gRPC; its
	// streams and the server-sent events share one edge.
	h.mux.Handle(fleetrpc.NewHandler(api, log, fleetrpc.WithStreams(h.streams)))
	// The dashboard: the page at the root, its assets under /ui/; any
	// other path is the API's 404.
	h.mux.Handle("/", dashboard.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, &fleetapi.Error{Code: fleetapi.NotFound, Message: fmt.Sprintf("no such resource: %s", r.URL.Path)})
	})))
	// A span per request and per stream (telemetry.Handler).
	h.traced = telemetry.Handler(http.HandlerFunc(h.serve), h.mux, fleetrpc.Procedures()...)
	return h
}

// MaxRequestBytes bounds what a reader may send: a request's body as it
// arrives, and an InformationService request message once decompressed.
// Past it, Connect and gRPC answer resource_exhausted and plain HTTP 413,
// before anything larger is held.
const MaxRequestBytes = fleetrpc.MaxRequestBytes

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.certRefusal(r); err != nil {
		h.fail(w, r, err)
		return
	}
	h.traced.ServeHTTP(w, r)
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
	}
	// A stream's writes each have the write timeout (Streams.Arm).
	h.mux.ServeHTTP(h.streams.Bind(w, r))
}

// An endpoint validates its request and returns the ETag key of its answer
// and how to make the answer: from a reading of the view
// (fleetapi.Read.API), or over the partitions.
type endpoint func(r *http.Request) (key string, answer answer, err error)

type answer func(context.Context, fleetapi.API) (any, error)

// get serves a read-only endpoint: GET and HEAD only. It syncs the view,
// answers 304 from the ETag alone when the client has the answer, and
// writes errors as the API's error document.
func (h *Handler) get(e endpoint, weight cost) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.readOnly(w, r) {
			return
		}
		release := func() {}
		if weight == heavy {
			// A request past the bounds is refused at once; the parse
			// of one within them is part of its heavy work, done in the
			// slot (fleetapi.CheckBounds).
			err := fleetapi.CheckBounds(r.URL.Query())
			if err == nil {
				release, err = h.api.Admit(r.Context())
			}
			if err != nil {
				h.fail(w, r, err)
				return
			}
		}
		defer func() { release() }()
		key, answer, err := e(r)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		gz := acceptsGzip(r)
		if h.svc == nil {
			// Merged afresh from the partitions: no ETag to name it.
			v, err := answer(r.Context(), h.api)
			if err != nil {
				h.fail(w, r, err)
				return
			}
			h.reply(w, r, v, "", gz, release)
			release = func() {}
			return
		}
		var etag string
		var v any
		notModified := false
		err = h.svc.Read(r.Context(), func(read *fleetapi.Read) (err error) {
			etag = read.ETag(key)
			if gz {
				etag += "-gzip" // a strong ETag names one representation
			}
			etag = `"` + etag + `"`
			if notModified = matchesETag(r.Header.Get("If-None-Match"), etag); notModified {
				return nil
			}
			v, err = answer(r.Context(), read.API())
			return err
		})
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if notModified {
			hd := w.Header()
			hd.Set("ETag", etag)
			hd.Set("Cache-Control", "no-cache")
			hd.Set("Vary", "Accept-Encoding")
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.reply(w, r, v, etag, gz, release)
		release = func() {}
	}
}

// cost says whether an endpoint's answer is heavy: its cost grows with
// the view or with what is asked (Service.Admit).
type cost bool

const (
	light cost = false
	heavy cost = true
)

// place answers GET /v1/placements. Its answer is drawn at random for each
// request, so that matchmakers spread their matches: it has no ETag, and
// no cache may keep it.
func (h *Handler) place(w http.ResponseWriter, r *http.Request) {
	if !h.readOnly(w, r) {
		return
	}
	v := r.URL.Query()
	if err := fleetapi.CheckBounds(v); err != nil {
		h.fail(w, r, err)
		return
	}
	release, err := h.api.Admit(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// Parsed in the slot: the largest legal policy is 30 selectors.
	req, err := fleetapi.ParsePlace(v)
	var p fleetapi.Placements
	if err == nil {
		p, err = h.api.Place(r.Context(), req)
	}
	if err != nil {
		release()
		h.fail(w, r, err)
		return
	}
	h.reply(w, r, p, "", acceptsGzip(r), release)
}

// readOnly answers 405 to any method but GET and HEAD, and says whether
// the request may go on.
func (h *Handler) readOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	h.failStatus(w, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "", fmt.Sprintf("method %s not allowed; use GET", r.Method))
	return false
}

func listFleets(r *http.Request) (string, answer, error) {
	q, err := fleetapi.ParseQuery(r.URL.Query())
	if err != nil {
		return "", nil, err
	}
	return fleetapi.FleetsKey(q), func(ctx context.Context, api fleetapi.API) (any, error) { return api.ListFleets(ctx, q) }, nil
}

func getFleet(r *http.Request) (string, answer, error) {
	k := fleet.Key{Cluster: r.PathValue("cluster"), Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	if err := fleetapi.ValidateKey(k); err != nil {
		return "", nil, err
	}
	return "fleet/" + k.DocID(), func(ctx context.Context, api fleetapi.API) (any, error) { return api.GetFleet(ctx, k) }, nil
}

func listClusters(r *http.Request) (string, answer, error) {
	if err := noParams(r); err != nil {
		return "", nil, err
	}
	return "clusters", func(ctx context.Context, api fleetapi.API) (any, error) { return api.ListClusters(ctx) }, nil
}

func getCluster(r *http.Request) (string, answer, error) {
	name := r.PathValue("cluster")
	if err := noParams(r); err != nil {
		return "", nil, err
	}
	if err := fleetapi.ValidateClusterName(name); err != nil {
		return "", nil, err
	}
	return "cluster/" + name, func(ctx context.Context, api fleetapi.API) (any, error) { return api.GetCluster(ctx, name) }, nil
}

func labelValues(r *http.Request) (string, answer, error) {
	key := r.PathValue("key")
	if err := fleetapi.ValidateLabelKey(key); err != nil {
		return "", nil, err
	}
	includeStale := false
	for name, vals := range r.URL.Query() {
		if name != "includeStale" || len(vals) != 1 || (vals[0] != "true" && vals[0] != "false") {
			return "", nil, &fleetapi.Error{Code: fleetapi.InvalidArgument, Param: name, Message: "the only parameter is includeStale=true|false"}
		}
		includeStale = vals[0] == "true"
	}
	return fmt.Sprintf("labels/%s?%t", key, includeStale), func(ctx context.Context, api fleetapi.API) (any, error) {
		return api.LabelValues(ctx, key, includeStale)
	}, nil
}

func noParams(r *http.Request) error {
	for name := range r.URL.Query() {
		return &fleetapi.Error{Code: fleetapi.InvalidArgument, Param: name, Message: "unknown parameter"}
	}
	return nil
}

// reply writes v as JSON with its ETag, gzipped when the client accepts it;
// an answer without an ETag is not to be stored. It calls encoded once the
// answer is encoded, before writing it (a heavy read's slot is not held
// while a client reads).
func (h *Handler) reply(w http.ResponseWriter, r *http.Request, v any, etag string, gz bool, encoded func()) {
	encoding := answerBuffers.get()
	defer answerBuffers.put(encoding)
	err := json.NewEncoder(encoding).Encode(v)
	if err == nil {
		encoding.Truncate(encoding.Len() - 1) // the newline Encode ends with
	}
	body := encoding.Bytes()
	gz = gz && len(body) >= minGzipBytes
	if err == nil && gz {
		compressed := answerBuffers.get()
		defer answerBuffers.put(compressed)
		err = gzipTo(compressed, func(w io.Writer) error {
			_, err := w.Write(body)
			return err
		})
		body = compressed.Bytes()
	}
	encoded()
	if err != nil {
		h.fail(w, r, &fleetapi.Error{Code: fleetapi.Internal, Message: "cannot encode the answer", Err: err})
		return
	}
	hd := w.Header()
	if etag != "" {
		hd.Set("ETag", etag)
		hd.Set("Cache-Control", "no-cache")
	} else {
		hd.Set("Cache-Control", "no-store")
	}
	hd.Set("Vary", "Accept-Encoding")
	hd.Set("Content-Type", "application/json")
	if gz {
		hd.Set("Content-Encoding", "gzip")
	}
	hd.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// httpStatus maps the read model's error codes to HTTP.
var httpStatus = map[fleetapi.Code]int{
	fleetapi.InvalidArgument:   http.StatusBadRequest,
	fleetapi.NotFound:          http.StatusNotFound,
	fleetapi.Unavailable:       http.StatusServiceUnavailable,
	fleetapi.ResourceExhausted: http.StatusServiceUnavailable,
	fleetapi.PermissionDenied:  http.StatusForbidden,
	fleetapi.Internal:          http.StatusInternalServerError,
}

// fail answers an error. A fault's cause goes to the log, not to the
// caller; a caller that went away is no fault.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := fleetrpc.LogFault(r.Context(), h.log, r.URL.Path, err)
	msg := e.Message
	if e.Param != "" {
		msg = e.Error()
	}
	if e.Code == fleetapi.Internal {
		msg = "the query failed; see the server's logs"
	}
	if e.Code == fleetapi.ResourceExhausted || e.Code == fleetapi.Unavailable {
		w.Header().Set("Retry-After", "1")
	}
	h.failStatus(w, r, httpStatus[e.Code], string(e.Code), e.Param, msg)
}

func (h *Handler) failStatus(w http.ResponseWriter, r *http.Request, status int, code, param, msg string) {
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
	View     fleetapi.Options
	LogLevel slog.Level
	// TraceSampleRatio is the share of requests and streams whose spans
	// are exported to Cloud Trace; 0 exports none.
	TraceSampleRatio float64
	// StreamWriteTimeout: see DefaultStreamWriteTimeout.
	StreamWriteTimeout time.Duration
	// FeedShards are the shards of the fleets' change feed the view
	// follows (FEED_SHARDS; firestoredb.Store.WithFeedShards), the
	// ingest's.
	FeedShards int
	Metrics    fleetmetrics.Options
	// MetricsAccess: who /metrics answers (METRICS_ACCESS).
	MetricsAccess MetricsAccess
	// VerifiedClientCertHeader: see WithVerifiedClientCert
	// (MTLS_VERIFIED_HEADER).
	VerifiedClientCertHeader string
	// ChangeTopic is the change feed's topic (CHANGE_TOPIC, fleetfeed):
	// the view follows the fleets on it while streams run, rather than
	// with a Firestore listener, through ChangeClient (OpenChanges opens
	// it). Empty: the listener.
	ChangeTopic  string
	ChangeClient *pubsub.Client
	// Partitions, when set (PARTITIONS), are the partitions this service
	// answers over as one view (fleetapi.Partitions): each one's query
	// service URL and clusters. It then holds no view of its own.
	Partitions []PartitionConfig
	// PartitionTimeout bounds each partition's answer
	// (PARTITION_TIMEOUT; fleetapi.DefaultPartitionTimeout).
	PartitionTimeout time.Duration
}

// PartitionConfig is one partition of PARTITIONS: its query service and
// the clusters its view holds (its VIEW_CLUSTERS).
type PartitionConfig struct {
	URL      string
	Clusters []string
}

// ParsePartitions reads PARTITIONS: each partition as its clusters,
// comma-separated, "=" its query service's URL; partitions separated by
// semicolons or white space, e.g.
// "pc-eu,pc-us=https://q-a.run.app; xbox-eu=https://q-b.run.app". No
// cluster may be in two partitions.
func ParsePartitions(v string) ([]PartitionConfig, error) {
	var out []PartitionConfig
	seen := map[string]bool{}
	for entry := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == ';' || unicode.IsSpace(r) }) {
		names, u, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want CLUSTER[,CLUSTER...]=URL", entry)
		}
		if _, err := fleetclient.ParseBaseURL(u); err != nil {
			return nil, fmt.Errorf("%q: %w", entry, err)
		}
		p := PartitionConfig{URL: u}
		for n := range strings.SplitSeq(names, ",") {
			if err := fleet.ValidateClusterName(n); err != nil {
				return nil, fmt.Errorf("%q: %w", entry, err)
			}
			if seen[n] {
				return nil, fmt.Errorf("cluster %s is in two partitions", n)
			}
			seen[n] = true
			p.Clusters = append(p.Clusters, n)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errors.New("no partition: want CLUSTER[,CLUSTER...]=URL, separated by semicolons")
	}
	return out, nil
}

// OpenChanges opens cfg's ChangeClient when it names a ChangeTopic: a
// Pub/Sub client in GOOGLE_CLOUD_PROJECT's project.
func OpenChanges(ctx context.Context, getenv func(string) string, cfg *Config) error {
	if cfg.ChangeTopic == "" || cfg.ChangeClient != nil {
		return nil
	}
	c, err := fnruntime.PubSub(ctx, getenv)
	if err != nil {
		return fmt.Errorf("CHANGE_TOPIC: %w", err)
	}
	cfg.ChangeClient = c
	return nil
}

// ConfigFromEnv reads STALE_AFTER, MAX_STALENESS (0: every answer waits
// for a sync), CLUSTER_REFRESH, COMMIT_LAG, WATCH_POLL, HEARTBEAT,
// STREAM_WRITE_TIMEOUT, MAX_STREAMS, VIEW_MAX_BYTES, FEED_MAX_BYTES,
// VIEW_CLUSTERS (the clusters of this instance's partition,
// comma-separated, at most 30; unset: every cluster), FEED_SHARDS (the
// ingest's),
// METRICS_LABELS (fleet label keys, comma-separated), METRICS_MAX_SERIES,
// METRICS_AGGREGATE, METRICS_ACCESS (local, all or off),
// MTLS_VERIFIED_HEADER (the header of a mutual TLS load balancer's
// verdict, which every request must carry as true), PLACEMENT_POLICY (the placement policy of a
// request that gives none: rules SELECTOR:PRIORITY[:WEIGHT], separated
// by semicolons), PARTITIONS (ParsePartitions), PARTITION_TIMEOUT and
// LOG_LEVEL.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	e := fnruntime.NewEnv(getenv)
	e.Duration(&c.View.StaleAfter, "STALE_AFTER", fleetapi.DefaultStaleAfter)
	c.View.MaxStaleness = fleetapi.DefaultMaxStaleness
	e.Func("MAX_STALENESS", func(v string) error {
		switch d, err := time.ParseDuration(v); {
		case err != nil || d < 0:
			return fmt.Errorf("want a duration such as %v, or 0: every answer waits for a sync", fleetapi.DefaultMaxStaleness)
		case d == 0:
			c.View.MaxStaleness = -1 // the view's "never stale": every answer waits
		default:
			c.View.MaxStaleness = d
		}
		return nil
	})
	e.Duration(&c.View.ClusterRefresh, "CLUSTER_REFRESH", fleetapi.DefaultClusterRefresh)
	e.Duration(&c.View.CommitLag, "COMMIT_LAG", fleetapi.DefaultCommitLag)
	e.Duration(&c.View.WatchPoll, "WATCH_POLL", fleetapi.DefaultWatchPoll)
	e.Duration(&c.View.Heartbeat, "HEARTBEAT", fleetapi.DefaultHeartbeat)
	e.Duration(&c.StreamWriteTimeout, "STREAM_WRITE_TIMEOUT", DefaultStreamWriteTimeout)
	e.Bytes(&c.View.MaxViewBytes, "VIEW_MAX_BYTES", fleetapi.DefaultMaxViewBytes)
	e.Bytes(&c.View.FeedMaxBytes, "FEED_MAX_BYTES", fleetapi.DefaultFeedMaxBytes)
	e.Int(&c.View.MaxWatches, "MAX_STREAMS", fleetapi.DefaultMaxWatches, 1)
	e.FeedShards(&c.FeedShards)
	e.Func("CHANGE_TOPIC", func(v string) error {
		c.ChangeTopic = v
		return fleetfeed.ValidateTopicID(v)
	})
	e.Func("VIEW_CLUSTERS", func(v string) error {
		var names []string
		for n := range strings.SplitSeq(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		if err := firestoredb.ValidatePartition(names); err != nil {
			return fmt.Errorf("want the partition's cluster names, comma-separated: %w", err)
		}
		c.View.Clusters = names
		return nil
	})
	e.Func("METRICS_LABELS", func(v string) error {
		var keys []string
		for k := range strings.SplitSeq(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				keys = append(keys, k)
			}
		}
		c.Metrics.Labels = keys
		return fleetmetrics.Options{Labels: keys}.Validate()
	})
	e.Int(&c.Metrics.MaxSeries, "METRICS_MAX_SERIES", fleetmetrics.DefaultMaxSeries, 1)
	c.MetricsAccess = MetricsLocal
	e.Func("MTLS_VERIFIED_HEADER", func(v string) error {
		c.VerifiedClientCertHeader = v
		return ValidateHeaderName(v)
	})
	e.Func("METRICS_ACCESS", func(v string) (err error) {
		c.MetricsAccess, err = ParseMetricsAccess(v)
		return err
	})
	e.Func("METRICS_AGGREGATE", func(v string) (err error) {
		c.Metrics.Aggregate, err = strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false")
		}
		return nil
	})
	e.Func("PLACEMENT_POLICY", func(v string) (err error) {
		var rules []string
		for r := range strings.SplitSeq(v, ";") {
			if r = strings.TrimSpace(r); r != "" {
				rules = append(rules, r)
			}
		}
		c.View.Policy, err = fleetapi.ParsePolicy(rules)
		return err
	})
	e.Func("PARTITIONS", func(v string) (err error) {
		c.Partitions, err = ParsePartitions(v)
		return err
	})
	e.Duration(&c.PartitionTimeout, "PARTITION_TIMEOUT", fleetapi.DefaultPartitionTimeout)
	e.Level(&c.LogLevel, "LOG_LEVEL")
	e.Ratio(&c.TraceSampleRatio, "TRACE_SAMPLE_RATIO", 0)
	if err := e.Err(); err != nil {
		return c, err
	}
	if len(c.Partitions) > 0 && (len(c.View.Clusters) > 0 || c.ChangeTopic != "") {
		return c, errors.New("PARTITIONS: a service over partitions holds no view: set neither VIEW_CLUSTERS nor CHANGE_TOPIC")
	}
	return c, nil
}

// New builds the query API as a deployment runs it: configured by the
// environment (ConfigFromEnv), over Firestore (fnruntime.Firestore), with
// its logs written to logs as Cloud Logging reads them. The function
// builds one on its first request; cmd/fleetcast-query at its start.
func New(ctx context.Context, getenv func(string) string, logs io.Writer) (*Handler, error) {
	cfg, err := ConfigFromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("configure the query API: %w", err)
	}
	if _, err := fnruntime.Tracing(ctx, getenv, "fleetcast-query", cfg.TraceSampleRatio); err != nil {
		return nil, fmt.Errorf("configure the query API: %w", err)
	}
	log := logging.New(logs, cfg.LogLevel, logging.WithProject(fnruntime.Project(getenv)))
	fnruntime.Started(log, "QueryFleets")
	opts := []HandlerOption{WithStreamWriteTimeout(cfg.StreamWriteTimeout), WithMetrics(cfg.Metrics), WithMetricsAccess(cfg.MetricsAccess),
		WithVerifiedClientCert(cfg.VerifiedClientCertHeader)}
	if len(cfg.Partitions) > 0 {
		p, err := NewPartitions(ctx, cfg, fleetclient.Auth{}, log)
		if err != nil {
			return nil, fmt.Errorf("configure the query API: %w", err)
		}
		return NewPartitionsHandler(p, log, opts...), nil
	}
	client, err := fnruntime.Firestore(ctx, getenv)
	if err != nil {
		return nil, err
	}
	if err := OpenChanges(ctx, getenv, &cfg); err != nil {
		return nil, fmt.Errorf("configure the query API: %w", err)
	}
	svc, err := NewView(client, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("configure the query API: %w", err)
	}
	return NewHandler(svc, log, opts...), nil
}

// NewPartitions returns the API over cfg's partitions: a client of each
// one's query service, sending ID tokens minted with auth (the instance's
// identity when zero) to any but a loopback address.
func NewPartitions(ctx context.Context, cfg Config, auth fleetclient.Auth, log *slog.Logger) (*fleetapi.Partitions, error) {
	parts := make([]fleetapi.Partition, 0, len(cfg.Partitions))
	for _, pc := range cfg.Partitions {
		hc, err := fleetclient.NewHTTPClient(ctx, pc.URL, auth)
		if err != nil {
			return nil, fmt.Errorf("PARTITIONS: %s: %w", pc.URL, err)
		}
		c, err := fleetclient.New(hc, pc.URL)
		if err != nil {
			return nil, fmt.Errorf("PARTITIONS: %s: %w", pc.URL, err)
		}
		parts = append(parts, fleetapi.Partition{Name: pc.URL, Clusters: pc.Clusters, API: c})
	}
	p, err := fleetapi.NewPartitions(parts, fleetapi.PartitionsOptions{Timeout: cfg.PartitionTimeout, StaleAfter: cfg.View.StaleAfter,
		HeavySlots: cfg.View.HeavySlots, HeavyQueue: cfg.View.HeavyQueue, HeavyWait: cfg.View.HeavyWait, MaxWatches: cfg.View.MaxWatches, Log: log})
	if err != nil {
		return nil, fmt.Errorf("PARTITIONS: %w", err)
	}
	log.Info("the service answers over partitions", "partitions", len(parts))
	return p, nil
}

// NewView starts the view of the fleets that cfg configures over client:
// every cluster's, or the partition's of VIEW_CLUSTERS. The query API
// answers from it, and so does the allocation service
// (cmd/fleetcast-allocator). It loads now, in the background: the
// instance's first visitor does not pay for it (a function's first
// request waits for the load it would have started anyway).
func NewView(client *firestore.Client, cfg Config, log *slog.Logger) (*fleetapi.Service, error) {
	cfg.View.Log = log
	store := firestoredb.New(client, fleet.DefaultTombstoneRetention, time.Now).WithFeedShards(cfg.FeedShards)
	var src fleetapi.Source = store
	if len(cfg.View.Clusters) > 0 {
		var err error
		if src, err = store.Partition(cfg.View.Clusters); err != nil {
			return nil, fmt.Errorf("VIEW_CLUSTERS: %w", err)
		}
		log.Info("the view holds a partition", "clusters", cfg.View.Clusters)
	}
	if cfg.ChangeTopic != "" {
		if cfg.ChangeClient == nil {
			return nil, errors.New("CHANGE_TOPIC: no Pub/Sub client (OpenChanges)")
		}
		src = fleetfeed.NewFollower(src, cfg.ChangeClient, cfg.ChangeTopic, log)
		log.Info("the view follows the change feed", "topic", cfg.ChangeTopic)
	}
	svc := fleetapi.NewService(src, cfg.View)
	svc.Start()
	return svc, nil
}

// defaultHandler serves the registered function: one Firestore client and
// one view per instance, created on the first request.
var defaultHandler = fnruntime.Lazy[*Handler]{New: func(ctx context.Context) (*Handler, error) {
	return New(ctx, os.Getenv, os.Stdout)
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
