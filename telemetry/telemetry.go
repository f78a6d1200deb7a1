// Package telemetry sets up OpenTelemetry tracing for every fleetcast
// program: W3C trace context propagated through HTTP headers and Pub/Sub
// message attributes, spans sampled by a ratio, and sampled spans exported
// over OTLP to Cloud Trace's Telemetry API (telemetry.googleapis.com).
//
// Google's own Cloud Trace exporter for Go
// (opentelemetry-operations-go/exporter/trace) is deprecated in favour of
// exactly this: the standard OTLP exporter pointed at the Telemetry API,
// with Application Default Credentials and the gcp.project_id resource
// attribute. With OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, the exporter is configured by the
// OpenTelemetry environment instead (a collector of the studio's own).
//
// Spans are made whether or not they are sampled: an unsampled span still
// has IDs, which the logs carry (logging.Handler), so that every line of
// one event's path joins up in Cloud Logging.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/oauth"
)

// GoogleEndpoint is the Telemetry API's OTLP gRPC endpoint.
const GoogleEndpoint = "telemetry.googleapis.com:443"

// Config says what a program's spans are and which of them are exported.
type Config struct {
	// Service is the service.name resource attribute: fleetcast-publisher,
	// fleetcast-ingest, fleetcast-query.
	Service string
	// Version is service.version.
	Version string
	// Project is the Google Cloud project the spans belong to
	// (gcp.project_id); the Telemetry API requires it.
	Project string
	// SampleRatio is the share of new traces sampled, 0 to 1. A span
	// whose parent came with a sampling decision follows it. 0 exports
	// nothing, and no exporter is made.
	SampleRatio float64
}

// Validate says what is wrong with c.
func (c Config) Validate() error {
	if c.SampleRatio < 0 || c.SampleRatio > 1 || c.SampleRatio != c.SampleRatio {
		return fmt.Errorf("trace sample ratio %v: want a number from 0 to 1", c.SampleRatio)
	}
	return nil
}

// ParseRatio reads a sample ratio: a number from 0 to 1.
func ParseRatio(s string) (float64, error) {
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(r >= 0 && r <= 1) { // NaN too
		return 0, fmt.Errorf("want a number from 0 to 1, such as 0.01")
	}
	return r, nil
}

// Option changes how Start sets tracing up.
type Option func(*options)

type options struct {
	exporter sdktrace.SpanExporter
	sync     bool
	getenv   func(string) string
}

// WithExporter exports sampled spans to e, as each ends, instead of over
// OTLP: tests use an in-memory exporter.
func WithExporter(e sdktrace.SpanExporter) Option {
	return func(o *options) { o.exporter, o.sync = e, true }
}

// WithGetenv reads the OpenTelemetry environment through getenv
// (os.Getenv by default).
func WithGetenv(getenv func(string) string) Option {
	return func(o *options) { o.getenv = getenv }
}

// Tracing is the process's tracer provider, installed as OpenTelemetry's
// global one (which the Pub/Sub and Firestore clients use).
type Tracing struct {
	Provider *sdktrace.TracerProvider
	// Exporting says whether sampled spans leave the process.
	Exporting bool
}

// Shutdown exports what is buffered and stops.
func (t *Tracing) Shutdown(ctx context.Context) error { return t.Provider.Shutdown(ctx) }

// Start installs a tracer provider and the W3C trace context propagator
// as OpenTelemetry's globals.
func Start(ctx context.Context, cfg Config, opts ...Option) (*Tracing, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{getenv: os.Getenv}
	for _, f := range opts {
		f(&o)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.Service)}
	if cfg.Version != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.Version))
	}
	if cfg.Project != "" {
		attrs = append(attrs, attribute.String("gcp.project_id", cfg.Project))
	}
	popts := []sdktrace.TracerProviderOption{
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	}
	t := &Tracing{}
	switch {
	case o.exporter != nil && o.sync:
		popts = append(popts, sdktrace.WithSyncer(o.exporter))
		t.Exporting = true
	case cfg.SampleRatio > 0:
		exp, err := otlpExporter(ctx, cfg, o.getenv)
		if err != nil {
			return nil, err
		}
		popts = append(popts, sdktrace.WithBatcher(exp))
		t.Exporting = true
	}
	t.Provider = sdktrace.NewTracerProvider(popts...)
	otel.SetTracerProvider(t.Provider)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return t, nil
}

// otlpExporter is the OTLP gRPC exporter: to the Telemetry API with
// Application Default Credentials, or as the OpenTelemetry environment
// configures it when it names an endpoint.
func otlpExporter(ctx context.Context, cfg Config, getenv func(string) string) (sdktrace.SpanExporter, error) {
	if getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("trace exporter: %w", err)
		}
		return exp, nil
	}
	if cfg.Project == "" {
		return nil, errors.New("trace exporter: exporting to Cloud Trace needs the project (GOOGLE_CLOUD_PROJECT or --project); or set the sample ratio to 0")
	}
	creds, err := oauth.NewApplicationDefault(ctx, "https://www.googleapis.com/auth/cloud-platform")
	if err != nil {
		return nil, fmt.Errorf("trace exporter: Google credentials for %s: %w", GoogleEndpoint, err)
	}
	exp, err := otlptracegrpc.New(ctx,
		otlptracegrpc.WithEndpoint(GoogleEndpoint),
		otlptracegrpc.WithDialOption(grpc.WithPerRPCCredentials(creds)),
		// The spans' quota and bill are the project's, not the
		// credentials' own project's.
		otlptracegrpc.WithHeaders(map[string]string{"x-goog-user-project": cfg.Project}),
	)
	if err != nil {
		return nil, fmt.Errorf("trace exporter: %w", err)
	}
	return exp, nil
}

// AttributeCarrier carries trace context in Pub/Sub message attributes
// as the Pub/Sub client's own OpenTelemetry support does: each key with
// the "googclient_" prefix (googclient_traceparent), so that either side
// may be the client's instrumentation or this.
type AttributeCarrier map[string]string

// AttributePrefix is what the Pub/Sub client puts before each key.
const AttributePrefix = "googclient_"

var _ propagation.TextMapCarrier = AttributeCarrier(nil)

// Get returns the value of key.
func (c AttributeCarrier) Get(key string) string { return c[AttributePrefix+key] }

// Set sets key.
func (c AttributeCarrier) Set(key, value string) { c[AttributePrefix+key] = value }

// Keys lists the carried keys.
func (c AttributeCarrier) Keys() []string {
	var keys []string
	for k := range c {
		if after, ok := strings.CutPrefix(k, AttributePrefix); ok {
			keys = append(keys, after)
		}
	}
	return keys
}

// Handler serves next in a span per request — per stream, for as long as
// it lasts — named by the method and the route of the request in mux
// (GET /v1/fleets/{cluster}/{namespace}/{name}), never by the names a
// request carries, so that span names stay few. A caller's trace context
// is linked, not continued: what is sampled, and so billed, is this
// deployment's setting, not what a reader asks for. A request for one of
// procedures (RPC paths under a prefix route, such as
// /fleetcast.v1.InformationService/Inform) is named by its path.
func Handler(next http.Handler, mux *http.ServeMux, procedures ...string) http.Handler {
	known := make(map[string]bool, len(procedures))
	for _, p := range procedures {
		known[p] = true
	}
	return otelhttp.NewHandler(next, "http",
		otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if known[r.URL.Path] {
				return r.Method + " " + r.URL.Path
			}
			_, pattern := mux.Handler(r)
			if pattern == "" {
				return r.Method + " (no route)"
			}
			// A pattern may name its method ("GET /v1/fleets", which
			// HEAD matches too): the span names the request's.
			if _, path, ok := strings.Cut(pattern, " "); ok {
				pattern = path
			}
			return r.Method + " " + pattern
		}))
}
