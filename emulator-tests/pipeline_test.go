package emulatortests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

// pipeline is one test's slice of the system: its own cluster name, topic
// and push subscription into a function instance, on the shared project.
type pipeline struct {
	tb        testing.TB
	cluster   string
	ps        *pubsub.Client
	topicID   string
	nsName    string // namespace of the fleets (default "default")
	fs        *firestore.Client
	publisher *pubsub.Publisher
	fn        *function
}

func randomHex(tb testing.TB, n int) string {
	tb.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(tb, err)
	return hex.EncodeToString(b)
}

// newPipeline wires a topic with the Avro schema and an ordered push
// subscription to the shared function instance.
func newPipeline(tb testing.TB) *pipeline {
	tb.Helper()
	return newPipelineTo(tb, ingestFn)
}

func newPipelineTo(tb testing.TB, fn *function) *pipeline {
	tb.Helper()
	require.NotNil(tb, fn, "the function instance did not start (see TestMain's output)")
	return newPipelineVia(tb, fn, fn.url)
}

// newPipelineVia is newPipelineTo pushing to base (something in front of
// fn, such as cloudRun) rather than to fn itself.
func newPipelineVia(tb testing.TB, fn *function, base string) *pipeline {
	tb.Helper()
	emulator.Host(tb, emulator.FirestoreHostEnv)
	emulator.Host(tb, emulator.PubSubHostEnv)
	require.NotNil(tb, fn, "the function instance did not start (see TestMain's output)")
	ctx := tb.Context()
	suffix := randomHex(tb, 4)
	cluster := "c" + suffix
	ps := emulator.PubSub(tb, project)
	// Each cluster publishes to its own topic: the function lets a
	// delivery write only the cluster its topic is named after.
	topicID, subID := topicOf(cluster), "ingest-"+suffix
	require.NoError(tb, pubsubtopic.EnsureTopic(ctx, ps, emulator.SchemaClient(tb), topicID, "fleet-event"))
	_, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name:  "projects/" + project + "/subscriptions/" + subID,
		Topic: pubsubtopic.TopicName(project, topicID),
		// The framework takes the CloudEvent's source topic from the path.
		PushConfig:            &pubsubpb.PushConfig{PushEndpoint: base + pubsubtopic.TopicName(project, topicOf(cluster))},
		AckDeadlineSeconds:    10,
		EnableMessageOrdering: true,
	})
	require.NoError(tb, err)
	// Once the test is over nothing may keep pushing what it left behind
	// to a server that is gone: over a long chaos run that redelivery
	// slows the emulator down for every later test.
	tb.Cleanup(func() {
		_ = ps.SubscriptionAdminClient.DeleteSubscription(context.Background(), &pubsubpb.DeleteSubscriptionRequest{
			Subscription: "projects/" + project + "/subscriptions/" + subID,
		})
	})
	pub := ps.Publisher(topicID)
	pub.EnableMessageOrdering = true
	tb.Cleanup(pub.Stop)
	return &pipeline{tb: tb, cluster: cluster, ps: ps, topicID: topicID, fs: emulator.Firestore(tb, project), publisher: pub, fn: fn}
}

// topicOf is the topic of a cluster's events.
func topicOf(cluster string) string { return ingest.DefaultTopicPrefix + cluster }

// pushURL is where the push subscription of a cluster's topic delivers to
// fn: the path names the topic, as Terraform's push endpoint does.
func pushURL(fn *function, cluster string) string {
	return fn.url + pubsubtopic.TopicName(project, topicOf(cluster))
}

// mustMessage is ev as the publisher sends it.
func mustMessage(tb testing.TB, ev fleet.Event) *pubsub.Message {
	tb.Helper()
	msg, err := pubsubtopic.Message(ev)
	require.NoError(tb, err)
	return msg
}

// topicSource is a cluster's topic as a CloudEvent's source names it.
func topicSource(cluster string) string {
	return "//pubsub.googleapis.com/" + pubsubtopic.TopicName(project, topicOf(cluster))
}

// publish sends ev and returns its message ID.
func (p *pipeline) publish(ev fleet.Event) string {
	p.tb.Helper()
	msg, err := pubsubtopic.Message(ev)
	require.NoError(p.tb, err)
	return p.publishMessage(msg)
}

func (p *pipeline) publishMessage(msg *pubsub.Message) string {
	p.tb.Helper()
	id, err := p.publisher.Publish(p.tb.Context(), msg).Get(p.tb.Context())
	require.NoError(p.tb, err)
	return id
}

// publishAndWait publishes ev and waits until the function ingested it; it
// returns the outcome the function logged.
func (p *pipeline) publishAndWait(ev fleet.Event) string {
	p.tb.Helper()
	id := p.publish(ev)
	return outcomeOf(p.fn.logs.waitMessage(p.tb, id, ingested))
}

func outcomeOf(lines []map[string]any) string {
	for _, l := range lines {
		if l["message"] == "fleet event ingested" {
			o, _ := l["outcome"].(string)
			return o
		}
	}
	return ""
}

func (p *pipeline) key(name string) fleet.Key {
	ns := p.nsName
	if ns == "" {
		ns = "default"
	}
	return fleet.Key{Cluster: p.cluster, Namespace: ns, Name: name}
}

func (p *pipeline) event(kind fleet.Kind, name string, seq int64) fleet.Event {
	return fleet.Event{
		SchemaVersion: fleet.SchemaVersion,
		Kind:          kind,
		Cluster:       p.cluster,
		Version:       fleet.Version{Term: 1764484800000, Seq: seq},
		ObservedAt:    fleet.MicrosOf(time.Now()),
		Publisher:     fleet.Publisher{ID: "publisher-0", Version: "test"},
		Namespace:     "default",
		Name:          name,
	}
}

// upsert is a fleet with readyReplicas = ready, labelled as real fleets are.
func (p *pipeline) upsert(name string, seq, ready int64) fleet.Event {
	ev := p.event(fleet.KindUpsert, name, seq)
	ev.Fleet = fleet.State{
		UID:    "uid-" + name,
		Labels: map[string]string{"app.kubernetes.io/version": "1.42.0", "platform": "pc"},
		Spec:   fleet.Spec{Replicas: 10, Scheduling: "Packed", StrategyType: "RollingUpdate"},
		Status: fleet.Status{
			Replicas: 10, ReadyReplicas: ready, AllocatedReplicas: 10 - ready,
			Counters: map[string]fleet.Aggregate{"rooms": {Count: 3, Capacity: 40}},
		},
	}
	return ev
}

func (p *pipeline) delete(name string, seq int64) fleet.Event {
	return p.event(fleet.KindDelete, name, seq)
}

// snapshot lists the given fleets (with the versions given) as the whole
// cluster, in one part.
func (p *pipeline) snapshot(seq int64, live map[string]int64) fleet.Event {
	ev := p.event(fleet.KindSnapshot, "", seq)
	ev.Namespace = ""
	var entries []fleet.SnapshotEntry
	for name, v := range live {
		entries = append(entries, fleet.SnapshotEntry{Namespace: "default", Name: name, Version: fleet.Version{Term: ev.Version.Term, Seq: v}})
	}
	ev.Snapshot = fleet.SplitSnapshot(entries, fleet.DefaultSnapshotPartBytes)[0]
	ev.Snapshot.FleetCount = int64(len(entries))
	ev.Snapshot.ClusterLabels = map[string]string{"platform": "pc", "region": "europe-west1"}
	ev.Snapshot.Totals = fleet.Status{Replicas: 10 * int64(len(entries)), ReadyReplicas: 4 * int64(len(entries))}
	return ev
}

// doc reads a fleet document; nil when there is none.
func (p *pipeline) doc(name string) (*fleet.Document, *firestore.DocumentSnapshot) {
	p.tb.Helper()
	return getDoc[fleet.Document](p, firestoredb.FleetsCollection, p.key(name).DocID())
}

// getDoc reads and decodes one document; nil when there is none.
func getDoc[T any](p *pipeline, collection, id string) (*T, *firestore.DocumentSnapshot) {
	p.tb.Helper()
	snap, err := p.fs.Collection(collection).Doc(id).Get(p.tb.Context())
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	require.NoError(p.tb, err)
	var d T
	require.NoError(p.tb, snap.DataTo(&d))
	return &d, snap
}

// clusterDoc reads the pipeline's cluster document; nil when there is none.
func (p *pipeline) clusterDoc() (*fleet.ClusterDocument, *firestore.DocumentSnapshot) {
	p.tb.Helper()
	return getDoc[fleet.ClusterDocument](p, firestoredb.ClustersCollection, p.cluster)
}
