package emulatortests

import (
	"os"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/internal/build/bill"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/internal/testenv/otlptest"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/publisher"
	"github.com/fleetcast/fleetcast/pubsubtopic"
	"github.com/fleetcast/fleetcast/telemetry"
)

// TestOneTraceFromStatusPatchToFirestoreWrite patches a Fleet's status on
// the API server and follows the event: the in-process publisher's span
// (kept by an in-memory exporter), the Pub/Sub client's span that put the
// trace context in the message, and, in the function's own process
// (exporting over OTLP to a receiver here, as it would to Cloud Trace), the
// ingest span and the Firestore commit under it — one trace; and the
// function's log line of that event names the trace and the span, as Cloud
// Logging joins them.
func TestOneTraceFromStatusPatchToFirestoreWrite(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	recv := otlptest.Start(t)
	fn, err := startFunctionTarget("IngestFleetEvents", os.Getenv(emulator.FirestoreHostEnv),
		"TRACE_SAMPLE_RATIO=1",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+recv.Endpoint, "OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_BSP_SCHEDULE_DELAY=100")
	require.NoError(t, err)
	t.Cleanup(fn.stop)
	p := newPipelineTo(t, fn)

	mem := otlptest.Capture(t, telemetry.Config{Service: "fleetcast-publisher", Version: "test", Project: project, SampleRatio: 1})
	client, err := pubsub.NewClientWithConfig(t.Context(), project, &pubsub.ClientConfig{EnableOpenTelemetryTracing: true},
		append(emulator.EmulatorOptions(emulator.Host(t, emulator.PubSubHostEnv)), pubsubtopic.ClientOptions()...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	transport := pubsubtopic.NewTransport(client, p.topicID)
	t.Cleanup(transport.Stop)

	ns := kubetest.NewNamespace(t, c)
	p.nsName = ns.Name
	kubetest.StartPublisher(t, p.publisherConfig(ns.Name), c.RESTConfig(), transport)
	ns.CreateFleet(ns.Name, "traced", map[string]string{"platform": "pc"})
	p.waitFleets("the fleet lands", []string{"traced"}, live)
	ns.SetStatus(ns.Name, "traced", map[string]any{"replicas": int64(3), "readyReplicas": int64(3)})
	p.waitFleets("the patch lands", []string{"traced"}, func(_ string, d *fleet.Document) bool {
		return live("", d) && d.Status != nil && d.Status.ReadyReplicas == 3
	})
	doc, _ := p.doc("traced")
	version, docID := doc.Version.String(), p.key("traced").DocID()

	// The publisher began the event's trace.
	var publish sdktrace.ReadOnlySpan
	eventually(t, "the publish span of the patched state", func() bool {
		for _, s := range mem.GetSpans().Snapshots() {
			if s.Name() == publisher.PublishSpanName && attr(s, "fleetcast.version") == version && attr(s, "fleetcast.fleet") == docID {
				publish = s
				return true
			}
		}
		return false
	})
	traceID := publish.SpanContext().TraceID().String()
	assert.Equal(t, trace.SpanKindProducer, publish.SpanKind())
	ours := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range mem.GetSpans().Snapshots() {
		if s.SpanContext().TraceID().String() == traceID {
			ours[s.SpanContext().SpanID().String()] = s
		}
	}
	var clientSpans []string
	for _, s := range ours {
		if s.Parent().SpanID() == publish.SpanContext().SpanID() {
			clientSpans = append(clientSpans, s.Name())
		}
	}
	assert.Contains(t, clientSpans, p.topicID+" create", "the Pub/Sub client's span is the publish span's child")

	// The function continued it, in another process.
	var applied otlptest.Span
	eventually(t, "the ingest span of the patched state", func() bool {
		for _, s := range recv.Spans() {
			if s.Name == ingest.SpanName && s.Attributes["fleetcast.version"] == version {
				applied = s
				return true
			}
		}
		return false
	})
	assert.Equal(t, "fleetcast-ingest", applied.Service)
	assert.Equal(t, traceID, applied.TraceID, "one trace from the publisher to the function")
	require.Contains(t, ours, applied.ParentSpanID, "the ingest span's parent is a span of the publisher's process")
	assert.Equal(t, docID, applied.Attributes["fleetcast.fleet"])
	assert.Equal(t, string(fleet.OutcomeUpdated), applied.Attributes["fleetcast.outcome"])

	// The Firestore write is the ingest span's descendant: the client's
	// span of its commit RPC (cloud.google.com/go/firestore.Client.commit).
	eventually(t, "the Firestore commit under the ingest span", func() bool {
		spans := recv.Spans()
		byID := map[string]otlptest.Span{}
		for _, s := range spans {
			byID[s.SpanID] = s
		}
		for _, s := range spans {
			if s.TraceID == traceID && strings.HasSuffix(s.Name, "firestore.Client.commit") && descends(byID, s, applied.SpanID) {
				return true
			}
		}
		return false
	})

	// What one traced upsert costs in Cloud Trace (the bill's
	// bill.SpansPerTracedUpsert): the spans of its trace on both sides,
	// and the publish RPC's, in a trace of its own that links it. The
	// function wrote the fleet's creation, so its version cache knows the
	// document: the update is written with no read, as in the steady state.
	var spans []string
	for _, s := range ours {
		spans = append(spans, "publisher: "+s.Name())
	}
	for _, s := range mem.GetSpans().Snapshots() {
		for _, l := range s.Links() {
			if l.SpanContext.TraceID().String() == traceID {
				spans = append(spans, "publisher, linked: "+s.Name())
			}
		}
	}
	for _, s := range recv.Spans() {
		if s.TraceID == traceID {
			spans = append(spans, "function: "+s.Name)
		}
	}
	assert.Len(t, spans, bill.SpansPerTracedUpsert, "%q", spans)

	// Its log line is joined to the span (the line comes through the
	// function's stdout, the span through OTLP: either may come first).
	lines := fn.logs.wait(t, logging.FieldSpanID, applied.SpanID, func([]map[string]any) bool { return true })
	assert.Equal(t, "projects/"+project+"/traces/"+traceID, lines[0][logging.FieldTrace])
	assert.Equal(t, true, lines[0][logging.FieldTraceSampled])
	assert.Equal(t, "fleet event ingested", lines[0]["message"])
}

// descends says whether s is a descendant of the span ancestor.
func descends(byID map[string]otlptest.Span, s otlptest.Span, ancestor string) bool {
	for i := 0; i < 64 && s.ParentSpanID != ""; i++ {
		if s.ParentSpanID == ancestor {
			return true
		}
		var ok bool
		if s, ok = byID[s.ParentSpanID]; !ok {
			return false
		}
	}
	return false
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}
