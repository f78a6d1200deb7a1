package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fleetcast/fleetcast/internal/testenv/otlptest"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/telemetry"
)

// restoreGlobals leaves OpenTelemetry's globals a no-op provider and
// propagator when the test ends, as they are before any Start (setting
// back the original global delegate itself would only log that it is).
func restoreGlobals(t *testing.T) {
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
}

func TestParseRatio(t *testing.T) {
	for in, want := range map[string]float64{"0": 0, "1": 1, " 0.01 ": 0.01, "0.5": 0.5} {
		got, err := telemetry.ParseRatio(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-0.1", "1.01", "NaN", "ten", "1e9"} {
		_, err := telemetry.ParseRatio(in)
		assert.Error(t, err, in)
	}
	assert.Error(t, telemetry.Config{SampleRatio: 2}.Validate())
}

func TestCarrierRoundTrip(t *testing.T) {
	exp := otlptest.Capture(t, telemetry.Config{Service: "test", SampleRatio: 1})

	ctx, span := otel.Tracer("t").Start(context.Background(), "publish")
	attrs := map[string]string{"cluster": "pc"}
	otel.GetTextMapPropagator().Inject(ctx, telemetry.AttributeCarrier(attrs))
	span.End()

	// The key the Pub/Sub client's own instrumentation reads and writes.
	require.Contains(t, attrs, "googclient_traceparent")
	assert.Equal(t, "pc", attrs["cluster"], "other attributes are left alone")
	assert.ElementsMatch(t, []string{"traceparent"}, telemetry.AttributeCarrier(attrs).Keys())

	got := trace.SpanContextFromContext(otel.GetTextMapPropagator().Extract(context.Background(), telemetry.AttributeCarrier(attrs)))
	assert.Equal(t, span.SpanContext().TraceID(), got.TraceID())
	assert.Equal(t, span.SpanContext().SpanID(), got.SpanID())
	assert.True(t, got.IsSampled())
	assert.Len(t, exp.GetSpans(), 1)
}

func TestRatioZeroMakesIDsButExportsNothing(t *testing.T) {
	restoreGlobals(t)
	tr, err := telemetry.Start(context.Background(), telemetry.Config{Service: "test"},
		telemetry.WithGetenv(func(string) string { return "" }))
	require.NoError(t, err, "ratio 0 needs no project and no exporter")
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	assert.False(t, tr.Exporting)

	_, span := otel.Tracer("t").Start(context.Background(), "x")
	defer span.End()
	sc := span.SpanContext()
	assert.True(t, sc.IsValid(), "unsampled spans still have IDs, which logs carry")
	assert.False(t, sc.IsSampled())
}

func TestCloudTraceNeedsAProject(t *testing.T) {
	restoreGlobals(t)
	_, err := telemetry.Start(context.Background(), telemetry.Config{Service: "test", SampleRatio: 0.5},
		telemetry.WithGetenv(func(string) string { return "" }))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "project")
}

func TestHandlerSpanNamesAndLinks(t *testing.T) {
	exp := otlptest.Capture(t, telemetry.Config{Service: "test", SampleRatio: 1})

	mux := http.NewServeMux()
	var inner trace.SpanContext
	mux.HandleFunc("GET /v1/fleets/{cluster}", func(w http.ResponseWriter, r *http.Request) {
		inner = trace.SpanContextFromContext(r.Context())
	})
	mux.HandleFunc("/svc.v1.S/", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(telemetry.Handler(mux, mux, "/svc.v1.S/Get"))
	defer srv.Close()

	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest("GET", srv.URL+"/v1/fleets/pc-eu", nil)
	req.Header.Set("traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	resp, err := testhttp.Client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	for _, path := range []string{"/nowhere", "/svc.v1.S/Get", "/svc.v1.S/Made-Up"} {
		resp, err = testhttp.Client.Post(srv.URL+path, "application/json", nil)
		require.NoError(t, err)
		resp.Body.Close()
	}

	spans := exp.GetSpans()
	require.Len(t, spans, 4)
	assert.Equal(t, "GET /v1/fleets/{cluster}", spans[0].Name, "the route, not the names the request carries")
	assert.Equal(t, "POST (no route)", spans[1].Name)
	assert.Equal(t, "POST /svc.v1.S/Get", spans[2].Name, "a known procedure by its path")
	assert.Equal(t, "POST /svc.v1.S/", spans[3].Name, "an unknown one by its route only")
	assert.NotEqual(t, callerTrace, spans[0].SpanContext.TraceID().String(), "a caller's trace is not continued")
	require.Len(t, spans[0].Links, 1, "but linked")
	assert.Equal(t, callerTrace, spans[0].Links[0].SpanContext.TraceID().String())
	assert.Equal(t, spans[0].SpanContext.SpanID(), inner.SpanID(), "the handler runs in the span")
}
