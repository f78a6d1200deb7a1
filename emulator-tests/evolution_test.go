package emulatortests

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/pubsubtopic"
	"github.com/fleetcast/fleetcast/schemas"
)

// revision1Message is a frozen event of schema revision 1, as that
// release's publisher wrote it (schemas/testdata/revision1), retargeted to
// p's cluster, the fleet name, version seq and the present time; its other
// fields are left exactly as they were.
func (p *pipeline) revision1Message(file, name string, seq int64) *pubsub.Message {
	p.tb.Helper()
	data, err := os.ReadFile("../schemas/testdata/revision1/" + file)
	require.NoError(p.tb, err)
	var raw map[string]any
	require.NoError(p.tb, json.Unmarshal(data, &raw))
	_, hasRollout := raw["fleet"].(map[string]any)["rollout"]
	require.False(p.tb, hasRollout, "a revision 1 event knows no rollout")
	raw["cluster"] = p.cluster
	raw["version"] = map[string]any{"term": 1764484800000, "seq": seq}
	raw["observedAt"] = time.Now().UnixMicro()
	if raw["kind"] != string(fleet.KindSnapshot) {
		raw["namespace"], raw["name"] = "default", name
	}
	out, err := json.Marshal(raw)
	require.NoError(p.tb, err)
	key := ""
	if raw["kind"] != string(fleet.KindSnapshot) {
		key = p.key(name).DocID()
	}
	return &pubsub.Message{Data: out, OrderingKey: key, Attributes: map[string]string{
		pubsubtopic.AttrCluster: p.cluster, pubsubtopic.AttrKind: raw["kind"].(string), pubsubtopic.AttrSchemaVersion: "1",
	}}
}

// withRolloutAndAutoscaler is an upsert of the newest revision, with the
// fields revisions 2 and 4 added.
func withRolloutAndAutoscaler(ev fleet.Event) fleet.Event {
	ev.Fleet.Rollout = fleet.RolloutOf(ev.Fleet.Spec.Replicas, []fleet.GameServerSet{
		{Name: ev.Name + "-new", Current: true, Replicas: 10, ReadyReplicas: 8, AllocatedReplicas: 2},
		{Name: ev.Name + "-old", Replicas: 0},
	})
	ev.Fleet.GameServerLabels = map[string]string{"mode": "ranked"}
	ev.Fleet.Autoscalers = []fleet.Autoscaler{{
		Name:        ev.Name + "-autoscaler",
		Policy:      fleet.AutoscalerPolicy{Type: "Buffer", BufferSize: "20%", MinReplicas: 2, MaxReplicas: 40},
		SyncSeconds: 30,
		Status:      fleet.AutoscalerStatus{CurrentReplicas: 10, DesiredReplicas: 10, AbleToScale: true, LastScaleTime: fleet.MicrosOf(time.Now().Add(-time.Minute))},
	}}
	return ev
}

// TestMixedPublisherVersionsIngest is a cluster upgrading its publisher:
// the old release's events (schema revision 1) and the new one's pass the
// topic's schema, which holds both revisions, and ingest side by side, in
// either order of takeover; the newest version's state wins, whichever
// release sent it.
func TestMixedPublisherVersionsIngest(t *testing.T) {
	p := newPipeline(t)

	// The old release publishes a fleet; the new one another.
	require.Equal(t, "created", outcomeOf(p.fn.logs.waitMessage(t, p.publishMessage(p.revision1Message("event-upsert.json", "old", 1)), ingested)))
	newer := withRolloutAndAutoscaler(p.upsert("new", 2, 8))
	p.publishAndWait(newer)

	old, _ := p.doc("old")
	require.NotNil(t, old)
	assert.Equal(t, int64(7), old.Status.ReadyReplicas, "revision 1's state, as written")
	assert.Nil(t, old.Rollout, "an old publisher's fleet has no rollout: unknown, not incomplete")
	assert.Nil(t, old.Autoscalers)
	assert.Nil(t, old.GameServerLabels, "nor its game servers' labels")
	d, _ := p.doc("new")
	require.NotNil(t, d)
	require.NotNil(t, d.Rollout)
	assert.Equal(t, newer.Fleet.Rollout, *d.Rollout)
	assert.True(t, d.Rollout.Complete)
	assert.Equal(t, newer.Fleet.Autoscalers, d.Autoscalers)
	assert.Equal(t, map[string]string{"mode": "ranked"}, d.GameServerLabels)

	// A rollback to the old release: its newer version wins, without the
	// fields it does not know; the new release's next event brings them back.
	p.publishAndWait(p.eventOf(p.revision1Message("event-upsert.json", "new", 3)))
	d, _ = p.doc("new")
	assert.Equal(t, fleet.Version{Term: 1764484800000, Seq: 3}, d.Version)
	assert.Nil(t, d.Rollout)
	assert.Nil(t, d.Autoscalers)
	assert.Nil(t, d.GameServerLabels)
	p.publishAndWait(withRolloutAndAutoscaler(p.upsert("new", 4, 8)))
	d, _ = p.doc("new")
	assert.NotNil(t, d.Rollout)
	assert.Len(t, d.Autoscalers, 1)

	// An old release's snapshot and delete reconcile the new release's fleets.
	snap := p.revision1Message("event-snapshot.json", "", 5)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(snap.Data, &raw))
	raw["snapshot"].(map[string]any)["fleets"] = []any{map[string]any{"namespace": "default", "name": "new", "version": map[string]any{"term": 1764484800000, "seq": 4}}}
	raw["snapshot"].(map[string]any)["start"] = map[string]any{"namespace": "", "name": ""}
	raw["snapshot"].(map[string]any)["end"] = map[string]any{"namespace": "", "name": ""}
	raw["snapshot"].(map[string]any)["part"], raw["snapshot"].(map[string]any)["parts"] = 0, 1
	snap.Data, _ = json.Marshal(raw)
	p.fn.logs.waitMessage(t, p.publishMessage(snap), ingested)
	old, _ = p.doc("old")
	assert.True(t, old.Deleted, "the old release's snapshot does not list it: a tombstone")
	d, _ = p.doc("new")
	assert.False(t, d.Deleted)
	assert.NotNil(t, d.Rollout, "a snapshot leaves a listed fleet's state alone")
	p.publishAndWait(p.eventOf(p.revision1Message("event-delete.json", "new", 6)))
	d, _ = p.doc("new")
	assert.True(t, d.Deleted)
}

// eventOf decodes a message built by hand, for publishAndWait.
func (p *pipeline) eventOf(msg *pubsub.Message) fleet.Event {
	p.tb.Helper()
	var ev fleet.Event
	require.NoError(p.tb, json.Unmarshal(msg.Data, &ev))
	return ev
}

// TestSchemaRevisionsAreWhatLetOldPublishersIn is Pub/Sub's rule the
// revisions exist for: Avro's JSON decoding wants every field, defaults or
// not, so a topic whose schema holds only the newest revision refuses an
// old publisher's event.
func TestSchemaRevisionsAreWhatLetOldPublishersIn(t *testing.T) {
	p := newPipeline(t)
	ctx := t.Context()
	schemaID, topicID := "fleet-event-newest-"+randomHex(t, 4), "newest-only-"+randomHex(t, 4)
	_, err := emulator.SchemaClient(t).CreateSchema(ctx, &pubsubpb.CreateSchemaRequest{
		Parent: "projects/" + project, SchemaId: schemaID,
		Schema: &pubsubpb.Schema{Type: pubsubpb.Schema_AVRO, Definition: string(schemas.FleetEventAvro)},
	})
	require.NoError(t, err)
	_, err = p.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{
		Name:           pubsubtopic.TopicName(project, topicID),
		SchemaSettings: &pubsubpb.SchemaSettings{Schema: "projects/" + project + "/schemas/" + schemaID, Encoding: pubsubpb.Encoding_JSON},
	})
	require.NoError(t, err)
	newestOnly := p.ps.Publisher(topicID)
	t.Cleanup(newestOnly.Stop)

	old := p.revision1Message("event-upsert.json", "old", 1)
	old.OrderingKey = ""
	_, err = newestOnly.Publish(ctx, old).Get(ctx)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "the newest revision alone refuses a revision 1 event: %v", err)
	msg, err := pubsubtopic.Message(withRolloutAndAutoscaler(p.upsert("new", 2, 8)))
	require.NoError(t, err)
	msg.OrderingKey = ""
	_, err = newestOnly.Publish(ctx, msg).Get(ctx)
	require.NoError(t, err)

	// The fleet-event schema EnsureTopic made holds every revision.
	revs, err := schemas.FleetEventRevisions()
	require.NoError(t, err)
	it := emulator.SchemaClient(t).ListSchemaRevisions(ctx, &pubsubpb.ListSchemaRevisionsRequest{Name: "projects/" + project + "/schemas/fleet-event"})
	held := 0
	for _, err := it.Next(); err == nil; _, err = it.Next() {
		held++
	}
	assert.GreaterOrEqual(t, held, len(revs))
	_, err = p.publisher.Publish(ctx, p.revision1Message("event-upsert.json", "old", 1)).Get(ctx)
	require.NoError(t, err, "the topic holding every revision admits revision 1")

}

// TestIngestIgnoresFieldsNewerThanItKnows: an ingest function older than
// the topic's newest revision (deployed after the publishers, or rolled
// back) ingests events with fields it does not know as if they were absent.
// The push goes straight to the function, as the topic's schema would let
// through only the revisions it holds.
func TestIngestIgnoresFieldsNewerThanItKnows(t *testing.T) {
	p := newPipeline(t)
	ev := withRolloutAndAutoscaler(p.upsert("later", 1, 8))
	msg, err := pubsubtopic.Message(ev)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(msg.Data, &raw))
	raw["revision3"] = map[string]any{"anything": []any{1, 2}}
	fl := raw["fleet"].(map[string]any)
	fl["revision3"] = "x"
	fl["rollout"].(map[string]any)["revision3"] = true
	fl["autoscalers"].([]any)[0].(map[string]any)["status"].(map[string]any)["revision3"] = 3.5
	data, err := json.Marshal(raw)
	require.NoError(t, err)
	id := "later-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	body := mustJSON(t, ingest.MessagePublishedData{
		Message:      ingest.PubsubMessage{Data: data, MessageID: id, PublishTime: time.Now().UTC()},
		Subscription: "projects/" + project + "/subscriptions/direct",
	})
	resp, err := testhttp.Client.Post(pushURL(p.fn, p.cluster), "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "created", outcomeOf(p.fn.logs.waitMessage(t, id, ingested)))
	d, _ := p.doc("later")
	require.NotNil(t, d)
	assert.Equal(t, ev.Fleet.Rollout, *d.Rollout)
	assert.Equal(t, ev.Fleet.Autoscalers, d.Autoscalers)
}
