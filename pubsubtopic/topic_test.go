package pubsubtopic

import (
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetcast/fleetcast/fleet"
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
