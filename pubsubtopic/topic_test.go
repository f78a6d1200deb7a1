package pubsubtopic

import (
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/otlptest"
	"github.com/fleetcast/fleetcast/telemetry"
)

// TestTransportPublishesInOrderWithoutDelay pins the publisher settings the
// Sender relies on: ordered per key, and no bundling delay (a fleet never
// has a second message to bundle with its first).
func TestTransportPublishesInOrderWithoutDelay(t *testing.T) {
	client, err := pubsub.NewClient(t.Context(), "p", option.WithEndpoint("127.0.0.1:1"), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	require.NoError(t, err)
	defer client.Close()
	tr := NewTransport(client, "t")
	defer tr.Stop()
	assert.True(t, tr.pub.EnableMessageOrdering)
	assert.Equal(t, 1, tr.pub.PublishSettings.CountThreshold)
	assert.Equal(t, PublishTimeout, tr.pub.PublishSettings.Timeout)
}

// TestMessageOrderingKeys: one key per fleet; none for snapshots, so that a
// part that keeps failing holds up no later heartbeat.
func TestMessageOrderingKeys(t *testing.T) {
	ev := fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "eu", Namespace: "games", Name: "pc",
		Version: fleet.Version{Term: 1, Seq: 1}, ObservedAt: 1, Publisher: fleet.Publisher{ID: "p"}, Fleet: fleet.State{UID: "u"}}
	msg, err := Message(ev)
	require.NoError(t, err)
	assert.Equal(t, "eu,games,pc", msg.OrderingKey)
	assert.Equal(t, "eu", msg.Attributes[AttrCluster])

	snap := fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindSnapshot, Cluster: "eu",
		Version: fleet.Version{Term: 1, Seq: 2}, ObservedAt: 1, Publisher: fleet.Publisher{ID: "p"},
		Snapshot: fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)[0]}
	msg, err = Message(snap)
	require.NoError(t, err)
	assert.Empty(t, msg.OrderingKey)
	assert.Equal(t, "eu", msg.Attributes[AttrCluster])
}

// TestTracedMessageCarriesTheTraceSampledOrNot: a message carries its
// trace context as the Pub/Sub client does, also when the trace is not
// sampled (the ingest function's lines join it either way), at a size
// that does not depend on the trace.
func TestTracedMessageCarriesTheTraceSampledOrNot(t *testing.T) {
	otlptest.Capture(t, telemetry.Config{Service: "p", SampleRatio: 0})
	ev := fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "eu", Namespace: "games", Name: "pc",
		Version: fleet.Version{Term: 1, Seq: 1}, ObservedAt: 1, Publisher: fleet.Publisher{ID: "p"}, Fleet: fleet.State{UID: "u"}}
	ctx, span := otel.Tracer("t").Start(t.Context(), "publish")
	defer span.End()
	require.False(t, span.SpanContext().IsSampled())
	msg, err := TracedMessage(ctx, ev)
	require.NoError(t, err)
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-00"
	assert.Equal(t, want, msg.Attributes["googclient_traceparent"])
	plain, err := Message(ev)
	require.NoError(t, err)
	assert.Equal(t, 77, billed(msg)-billed(plain), "bytes of attribute the trace context adds")
}

// billed is what Pub/Sub bills of a message before its minimum: its data,
// and its attributes' keys and values.
func billed(m *pubsub.Message) int {
	n := len(m.Data)
	for k, v := range m.Attributes {
		n += len(k) + len(v)
	}
	return n
}
