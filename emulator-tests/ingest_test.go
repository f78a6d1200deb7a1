package emulatortests

import (
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

func TestNewFleetLands(t *testing.T) {
	p := newPipeline(t)
	assert.Equal(t, "created", p.publishAndWait(p.upsert("sgs", 1, 4)))

	d, _ := p.doc("sgs")
	require.NotNil(t, d)
	assert.False(t, d.Deleted)
	assert.Equal(t, "uid-sgs", d.UID)
	assert.Equal(t, int64(4), d.Status.ReadyReplicas)
	assert.Equal(t, int64(37), d.Status.Counters["rooms"].Available, "derived available capacity")
	assert.Equal(t, "1.42.0", d.Labels["app.kubernetes.io/version"])
	assert.Equal(t, "publisher-0", d.Publisher.ID)
	assert.False(t, d.ObservedAt.IsZero())
	assert.False(t, d.IngestedAt.Before(d.ObservedAt), "ingested after observed on one clock")
	assert.Equal(t, d.IngestedAt.Sub(d.ObservedAt).Milliseconds(), d.LagMillis)
	assert.Nil(t, d.ExpireAt)
}

func TestDuplicateChangesNothing(t *testing.T) {
	p := newPipeline(t)
	ev := p.upsert("sgs", 1, 4)
	require.Equal(t, "created", p.publishAndWait(ev))
	_, before := p.doc("sgs")

	// The same event again: a publisher retry or a Pub/Sub redelivery.
	assert.Equal(t, "duplicate", p.publishAndWait(ev))
	_, after := p.doc("sgs")
	assert.Equal(t, before.UpdateTime, after.UpdateTime, "no write: the document's update time is unchanged")
}

func TestReverseOrderLeavesTheNewestState(t *testing.T) {
	p := newPipeline(t)
	// Distinct ordering keys would not help: the function never sees them.
	var outcomes []string
	for seq := int64(3); seq >= 1; seq-- {
		outcomes = append(outcomes, p.publishAndWait(p.upsert("sgs", seq, seq)))
	}
	assert.Equal(t, []string{"created", "stale", "stale"}, outcomes)
	d, _ := p.doc("sgs")
	assert.Equal(t, fleet.Version{Term: 1764484800000, Seq: 3}, d.Version)
	assert.Equal(t, int64(3), d.Status.ReadyReplicas)
}

func TestDeleteFencesLateUpsertsAndNewerUpsertRevives(t *testing.T) {
	p := newPipeline(t)
	require.Equal(t, "created", p.publishAndWait(p.upsert("sgs", 1, 4)))
	require.Equal(t, "deleted", p.publishAndWait(p.delete("sgs", 3)))

	t.Run("a late older upsert stays deleted", func(t *testing.T) {
		assert.Equal(t, "stale", p.publishAndWait(p.upsert("sgs", 2, 9)))
		d, _ := p.doc("sgs")
		assert.True(t, d.Deleted)
		assert.Nil(t, d.Status, "a tombstone offers no capacity")
		require.NotNil(t, d.ExpireAt, "tombstones expire through the TTL policy")
		assert.WithinDuration(t, d.IngestedAt.Add(fleet.DefaultTombstoneRetention), *d.ExpireAt, 0)
	})
	t.Run("a newer upsert revives", func(t *testing.T) {
		assert.Equal(t, "revived", p.publishAndWait(p.upsert("sgs", 4, 6)))
		d, _ := p.doc("sgs")
		assert.False(t, d.Deleted)
		assert.Nil(t, d.ExpireAt, "a revived fleet no longer expires")
		assert.Equal(t, int64(6), d.Status.ReadyReplicas)
	})
}

func TestSnapshotTombstonesMissingFleetsAndUpdatesCluster(t *testing.T) {
	p := newPipeline(t)
	require.Equal(t, "created", p.publishAndWait(p.upsert("kept", 1, 4)))
	require.Equal(t, "created", p.publishAndWait(p.upsert("gone", 2, 4)))
	// "gone" was deleted while no publisher ran: the next snapshot does not
	// list it.
	p.publishAndWait(p.snapshot(3, map[string]int64{"kept": 1}))

	kept, _ := p.doc("kept")
	assert.False(t, kept.Deleted)
	gone, _ := p.doc("gone")
	assert.True(t, gone.Deleted)
	assert.Equal(t, int64(3), gone.Version.Seq, "the tombstone carries the snapshot's version")

	snap, err := p.fs.Collection(firestoredb.ClustersCollection).Doc(p.cluster).Get(t.Context())
	require.NoError(t, err)
	var c fleet.ClusterDocument
	require.NoError(t, snap.DataTo(&c))
	assert.Equal(t, int64(1), c.FleetCount)
	assert.Equal(t, "publisher-0", c.Publisher.ID)
	assert.Equal(t, "europe-west1", c.Labels["region"])
	assert.Equal(t, int64(4), c.Totals.ReadyReplicas)
	assert.False(t, c.HeartbeatAt.IsZero())
	assert.Equal(t, int64(3), c.SnapshotVersion.Seq)
}

func TestPoisonMessageIsAckedAndTheNextOneProcessed(t *testing.T) {
	p := newPipeline(t)
	// Valid for the Avro schema, so Pub/Sub accepts it, but from a future,
	// incompatible contract. Same ordering key as the next message: had the
	// function not acknowledged it, the next one would never be delivered.
	poison := p.upsert("sgs", 1, 4)
	poison.SchemaVersion = 99
	data, err := encodeUnchecked(poison)
	require.NoError(t, err)
	poisonID := p.publishMessage(&pubsub.Message{Data: data, OrderingKey: p.key("sgs").DocID()})

	assert.Equal(t, "created", p.publishAndWait(p.upsert("sgs", 2, 5)))
	lines := p.fn.logs.matching("messageId", poisonID)
	require.Len(t, lines, 1, "one log line for the poison message, no redelivery")
	assert.Equal(t, "ERROR", lines[0]["severity"])
	assert.Contains(t, lines[0]["reason"], "schemaVersion 99")
	d, _ := p.doc("sgs")
	assert.Equal(t, int64(5), d.Status.ReadyReplicas)
}

func TestTopicSchemaRejectsMalformedMessagesAtPublish(t *testing.T) {
	p := newPipeline(t)
	_, err := p.publisher.Publish(t.Context(), &pubsub.Message{Data: []byte(`{"kind":"FLEET_UPSERT"}`), OrderingKey: "x"}).Get(t.Context())
	require.Error(t, err, "the topic's Avro schema must reject a message missing required fields")
	p.publisher.ResumePublish("x")
}

func TestLabelKeysWithDotsAndSlashesCanBeQueried(t *testing.T) {
	p := newPipeline(t)
	old := p.upsert("old", 1, 1)
	old.Fleet.Labels = map[string]string{"app.kubernetes.io/version": "1.41.0"}
	p.publishAndWait(old)
	p.publishAndWait(p.upsert("new", 2, 1))

	docs, err := p.fs.Collection(firestoredb.FleetsCollection).
		Where("cluster", "==", p.cluster).
		WherePath(firestore.FieldPath{"labels", "app.kubernetes.io/version"}, "==", "1.42.0").
		Documents(t.Context()).GetAll()
	require.NoError(t, err)
	require.Len(t, docs, 1)
	assert.Equal(t, p.key("new").DocID(), docs[0].Ref.ID)

	// And on derived capacity: fleets with rooms free.
	docs, err = p.fs.Collection(firestoredb.FleetsCollection).
		Where("cluster", "==", p.cluster).
		WherePath(firestore.FieldPath{"status", "counters", "rooms", "available"}, ">=", 30).
		Documents(t.Context()).GetAll()
	require.NoError(t, err)
	assert.Len(t, docs, 2)
}

// encodeUnchecked encodes an event without validating it, as a buggy or
// newer publisher might.
func encodeUnchecked(ev fleet.Event) ([]byte, error) {
	v := ev.SchemaVersion
	ev.SchemaVersion = fleet.SchemaVersion
	msg, err := pubsubtopic.Message(ev)
	if err != nil {
		return nil, err
	}
	return []byte(strings.Replace(string(msg.Data), fmt.Sprintf(`"schemaVersion":%d`, fleet.SchemaVersion), fmt.Sprintf(`"schemaVersion":%d`, v), 1)), nil
}
