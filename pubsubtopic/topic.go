// Package pubsubtopic maps fleet events onto Pub/Sub messages and creates
// the fleet events topic with its Avro schema where Terraform does not (the
// emulators, `make demo`).
package pubsubtopic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"cloud.google.com/go/pubsub/v2"
	schema "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.opentelemetry.io/otel"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/schemas"
	"github.com/fleetcast/fleetcast/telemetry"
)

// Attributes every fleet event message carries, so that subscriptions can
// filter without decoding the payload. The payload stays authoritative.
const (
	AttrCluster       = "cluster"
	AttrKind          = "kind"
	AttrSchemaVersion = "schemaVersion"
)

// TracedMessage is Message with the trace context of ctx in its
// attributes (googclient_traceparent, as the Pub/Sub client's
// OpenTelemetry support carries it): what Send publishes. With the
// W3C propagator installed (telemetry.Start) every message carries it,
// sampled or not — 77 bytes of attribute.
func TracedMessage(ctx context.Context, ev fleet.Event) (*pubsub.Message, error) {
	msg, err := Message(ev)
	if err != nil {
		return nil, err
	}
	otel.GetTextMapPropagator().Inject(ctx, telemetry.AttributeCarrier(msg.Attributes))
	return msg, nil
}

// Message returns the Pub/Sub message of ev: its JSON encoding (validated
// by the topic's Avro schema at publish), the attributes, and an ordering
// key per fleet (none for snapshots), so that Pub/Sub delivers one fleet's
// events in publish order where it can. Correctness never depends on that
// order: the versions decide.
func Message(ev fleet.Event) (*pubsub.Message, error) {
	data, err := fleet.EncodeEvent(ev)
	if err != nil {
		return nil, err
	}
	// Snapshots go without an ordering key: a part that keeps failing
	// would otherwise hold up every later heartbeat of its cluster.
	// Their versions order them.
	key := ""
	if ev.Kind != fleet.KindSnapshot {
		key = ev.Key().DocID()
	}
	return &pubsub.Message{
		Data:        data,
		OrderingKey: key,
		Attributes: map[string]string{
			AttrCluster:       ev.Cluster,
			AttrKind:          string(ev.Kind),
			AttrSchemaVersion: strconv.Itoa(ev.SchemaVersion),
		},
	}, nil
}

// EnsureTopic creates, unless they exist, the Avro schema schemaID with
// every revision of the fleet event schema, oldest first, and the topic
// topicID that validates messages against it with JSON encoding, in the
// client's project. The topic names no revision range, so an event of any
// revision passes, as on a deployment upgraded release by release.
func EnsureTopic(ctx context.Context, client *pubsub.Client, schemaClient *schema.SchemaClient, topicID, schemaID string) error {
	project := client.Project()
	schemaName := fmt.Sprintf("projects/%s/schemas/%s", project, schemaID)
	if err := ensureRevisions(ctx, schemaClient, project, schemaID); err != nil {
		return err
	}
	_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{
		Name:           TopicName(project, topicID),
		SchemaSettings: &pubsubpb.SchemaSettings{Schema: schemaName, Encoding: pubsubpb.Encoding_JSON},
	})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create topic %s: %w", topicID, err)
	}
	return nil
}

// ensureRevisions creates the schema with the first revision and commits
// each later one it does not hold yet.
func ensureRevisions(ctx context.Context, schemaClient *schema.SchemaClient, project, schemaID string) error {
	schemaName := fmt.Sprintf("projects/%s/schemas/%s", project, schemaID)
	revs, err := schemas.FleetEventRevisions()
	if err != nil {
		return err
	}
	_, err = schemaClient.CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{
		Parent:   "projects/" + project,
		SchemaId: schemaID,
		Schema:   &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: string(revs[0])},
	})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create schema %s: %w", schemaName, err)
	}
	held := map[string]bool{}
	it := schemaClient.ListSchemaRevisions(ctx, &pubsubpb.ListSchemaRevisionsRequest{Name: schemaName, View: pubsubpb.SchemaView_FULL})
	for {
		s, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return fmt.Errorf("list revisions of schema %s: %w", schemaName, err)
		}
		held[canonicalJSON(s.GetDefinition())] = true
	}
	for i, def := range revs {
		if held[canonicalJSON(string(def))] {
			continue
		}
		_, err := schemaClient.CommitSchema(ctx, &pubsubpb.CommitSchemaRequest{
			Name:   schemaName,
			Schema: &pubsubpb.Schema{Name: schemaName, Type: pubsubpb.Schema_AVRO, Definition: string(def)},
		})
		if err != nil {
			return fmt.Errorf("commit revision %d of schema %s: %w", i+1, schemaName, err)
		}
		held[canonicalJSON(string(def))] = true
	}
	return nil
}

// canonicalJSON re-encodes a schema definition, so that revisions compare
// whatever the server did to their whitespace.
func canonicalJSON(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return s
	}
	return string(b)
}

// TopicName returns the full resource name of a topic.
func TopicName(project, topicID string) string {
	return fmt.Sprintf("projects/%s/topics/%s", project, topicID)
}

// ClientOptions are the options the publisher's Pub/Sub client needs beyond
// the defaults: after an outage, gRPC must try to reconnect within seconds
// (its default backoff grows to two minutes), so that what waited is
// delivered as soon as Pub/Sub is back.
func ClientOptions() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		})),
	}
}

// PublishTimeout bounds one publish, retries within the client included.
// Past it the Sender retries with the fleet's latest state.
const PublishTimeout = 15 * time.Second

// Transport publishes fleet events to one topic with the long-lived Pub/Sub
// publisher client: asynchronous, ordered per fleet, each message sent at
// once.
type Transport struct {
	pub *pubsub.Publisher
}

// NewTransport returns a Transport publishing to topicID. Stop it to flush.
func NewTransport(client *pubsub.Client, topicID string) *Transport {
	pub := client.Publisher(topicID)
	pub.EnableMessageOrdering = true
	pub.PublishSettings.Timeout = PublishTimeout
	// The client bundles per ordering key, and the Sender has at most one
	// event of a fleet in flight: a fleet's bundle never holds more than
	// one message, so waiting for more (the default 10 ms DelayThreshold)
	// only adds latency. Send each at once.
	pub.PublishSettings.CountThreshold = 1
	return &Transport{pub: pub}
}

// Send publishes ev and waits for Pub/Sub's acknowledgement. An event that
// cannot be encoded, or that Pub/Sub refuses as invalid, is an error
// wrapping fleet.ErrInvalid: resending it cannot help.
func (t *Transport) Send(ctx context.Context, ev fleet.Event) error {
	// The trace of ctx (the Sender's publish span) goes with the message;
	// with the client's OpenTelemetry support on, the client puts its own
	// span's in its place, of the same trace.
	msg, err := TracedMessage(ctx, ev)
	if err != nil {
		return fmt.Errorf("encode %s %v: %w", ev.Kind, ev.Version, err)
	}
	if _, err := t.pub.Publish(ctx, msg).Get(ctx); err != nil {
		// A failed publish pauses its ordering key until resumed; the
		// caller retries with the latest state of the fleet.
		if msg.OrderingKey != "" {
			t.pub.ResumePublish(msg.OrderingKey)
		}
		if status.Code(err) == codes.InvalidArgument {
			// Pub/Sub refused the message itself (the topic's schema,
			// its size): sending it again cannot help.
			return fmt.Errorf("publish %s %v: %w: %w", ev.Kind, ev.Version, fleet.ErrInvalid, err)
		}
		return fmt.Errorf("publish %s %v: %w", ev.Kind, ev.Version, err)
	}
	return nil
}

// Stop sends what is buffered and releases the publisher.
func (t *Transport) Stop() { t.pub.Stop() }
