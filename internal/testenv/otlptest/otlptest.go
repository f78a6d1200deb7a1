// Package otlptest collects spans in tests: Receiver is an OTLP trace
// receiver, a real gRPC server implementing OpenTelemetry's collector
// TraceService, which a process under test exports its spans to as it
// would to Cloud Trace's Telemetry API (OTEL_EXPORTER_OTLP_ENDPOINT
// pointing here); Capture keeps this process's own spans in memory.
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/fleetcast/fleetcast/internal/testenv"
	"github.com/fleetcast/fleetcast/telemetry"
)

// Span is one span received, with its resource's attributes.
type Span struct {
	// Service is the resource's service.name.
	Service string
	// TraceID, SpanID and ParentSpanID in lower-case hex, as W3C
	// traceparent and Cloud Logging write them; ParentSpanID is empty for
	// a root.
	TraceID, SpanID, ParentSpanID string
	Name                          string
	Kind                          tracepb.Span_SpanKind
	// Attributes are the span's string and integer attributes, as text.
	Attributes map[string]string
	// Links are the trace IDs of the spans linked.
	Links []string
}

// Receiver collects the spans exported to it.
type Receiver struct {
	collectorpb.UnimplementedTraceServiceServer
	// Endpoint is where to export: set OTEL_EXPORTER_OTLP_ENDPOINT to
	// "http://"+Endpoint (plaintext).
	Endpoint string

	mu    sync.Mutex
	spans []Span
}

// Start serves a Receiver on a free port of 127.0.0.1 until the test ends.
func Start(tb testenv.TB) *Receiver {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &Receiver{Endpoint: ln.Addr().String()}
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(srv.Stop)
	return r
}

// Export receives spans.
func (r *Receiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Service: service, Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Attributes: map[string]string{},
				}
				for _, kv := range s.GetAttributes() {
					sp.Attributes[kv.GetKey()] = text(kv.GetValue())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetTraceId()))
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// Spans returns every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// text is an attribute's value as text: a string as it is, a number or
// a boolean formatted.
func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return v.String()
}

// Capture installs, as OpenTelemetry's globals until the test ends, the
// tracer provider telemetry.Start makes for cfg, exporting every span it
// samples synchronously to the returned in-memory exporter. At the end
// the globals are a no-op provider and propagator again, as before any
// Start.
func Capture(tb testenv.TB, cfg telemetry.Config) *tracetest.InMemoryExporter {
	tb.Helper()
	mem := tracetest.NewInMemoryExporter()
	tracing, err := telemetry.Start(context.Background(), cfg, telemetry.WithExporter(mem))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = tracing.Shutdown(context.Background())
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
	return mem
}
