package emulatortests

import (
	"io"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetfeed"
	"github.com/fleetcast/fleetcast/fleetview"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/logging"
)

// feedView is a query view following the change feed on topic, with a
// staleness bound of an hour: while it follows, no round reads the
// fleets, so whatever it learns of them came through the feed.
func feedView(t *testing.T, p *pipeline, topic string) (*fleetview.Engine, *firestoredb.Store) {
	t.Helper()
	store := firestoredb.New(p.fs, time.Hour, time.Now)
	log := logging.New(io.Discard, logging.LevelWarning)
	eng := fleetview.New(fleetfeed.NewFollower(store, emulator.PubSub(t, project), topic, log),
		fleetview.Options{Log: log, MaxStaleness: time.Hour, StaleAfter: time.Hour, ClusterRefresh: 100 * time.Millisecond,
			CheckInterval: 300 * time.Millisecond})
	require.NoError(t, eng.Sync(t.Context()))
	return eng, store
}

// viewSubscriptions are the change feed subscriptions of topic's
// followers that exist.
func viewSubscriptions(t *testing.T, topic string) []string {
	t.Helper()
	ps := emulator.PubSub(t, project)
	var names []string
	it := ps.SubscriptionAdminClient.ListSubscriptions(t.Context(), &pubsubpb.ListSubscriptionsRequest{Project: "projects/" + project})
	for {
		s, err := it.Next()
		if err == iterator.Done {
			break
		}
		require.NoError(t, err)
		if strings.Contains(s.GetName(), "/subscriptions/"+fleetfeed.SubscriptionPrefix(topic)) {
			names = append(names, s.GetName())
		}
	}
	return names
}

// waitView waits until the view holds what ok accepts of the fleet name
// (nil: no such fleet).
func waitView(t *testing.T, eng *fleetview.Engine, p *pipeline, name, what string, ok func(*fleet.Document) bool) {
	t.Helper()
	id := p.key(name).DocID()
	require.Eventually(t, func() bool {
		d, held := eng.Current().Fleet(id)
		if !held {
			d = nil
		}
		return ok(d)
	}, 30*time.Second, 10*time.Millisecond, what)
}

func atSeq(seq, ready int64) func(*fleet.Document) bool {
	return func(d *fleet.Document) bool {
		return d != nil && d.Version.Seq == seq && d.Status.ReadyReplicas == ready
	}
}

func absent(d *fleet.Document) bool { return d == nil }

// TestChangeFeedCarriesEveryWrite: the ingest function announces what it
// writes on the change feed, and a view that follows the feed holds every
// change with no Firestore listener: upserts, a delete, a snapshot's
// tombstone. Duplicates and older states, from the fleet's topic or on
// the feed itself, change nothing. While Pub/Sub is out of the function's
// reach its writes still land, but are not acknowledged: once Pub/Sub is
// back, their redeliveries, duplicates, are announced, and the view holds
// them. Its subscription goes with its last watch, and a view that
// follows again catches up.
func TestChangeFeedCarriesEveryWrite(t *testing.T) {
	ps := emulator.PubSub(t, project)
	topic := "changes-" + randomHex(t, 4)
	require.NoError(t, fleetfeed.EnsureTopic(t.Context(), ps, topic))
	proxy := newFaultProxy(t, emulator.Host(t, emulator.PubSubHostEnv))
	fn, err := startFunctionTarget("IngestFleetEvents", emulator.Host(t, emulator.FirestoreHostEnv),
		"CHANGE_TOPIC="+topic, emulator.PubSubHostEnv+"="+proxy.addr())
	require.NoError(t, err)
	t.Cleanup(fn.stop)
	p := newPipelineTo(t, fn)

	eng, store := feedView(t, p, topic)
	stop, err := eng.Watching()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(viewSubscriptions(t, topic)) == 1 }, 30*time.Second, 50*time.Millisecond,
		"the view subscribes to the feed")

	p.publishAndWait(p.upsert("a", 1, 3))
	waitView(t, eng, p, "a", "a created", atSeq(1, 3))
	p.publishAndWait(p.upsert("a", 2, 5))
	waitView(t, eng, p, "a", "a updated", atSeq(2, 5))

	// A duplicate and an older state, through the cluster's topic and on
	// the feed itself; then a change, which the view must reach with
	// nothing in between.
	assert.Equal(t, string(fleet.OutcomeDuplicate), p.publishAndWait(p.upsert("a", 2, 5)))
	assert.Equal(t, string(fleet.OutcomeStale), p.publishAndWait(p.upsert("a", 1, 3)))
	old, err := fleetfeed.Message(&fleet.Document{Cluster: p.cluster, Namespace: p.key("a").Namespace, Name: "a",
		Version: fleet.Version{Term: 1, Seq: 1}, Status: &fleet.DocStatus{ReadyReplicas: 3}, WrittenAt: time.Now()})
	require.NoError(t, err)
	_, err = ps.Publisher(topic).Publish(t.Context(), old).Get(t.Context())
	require.NoError(t, err)
	p.publishAndWait(p.upsert("b", 3, 1))
	waitView(t, eng, p, "b", "b created", atSeq(3, 1))
	d, _ := eng.Current().Fleet(p.key("a").DocID())
	assert.Equal(t, int64(2), d.Version.Seq, "neither the duplicate nor the older states took the view back")

	// Pub/Sub out of the function's reach: the write lands, its push is
	// asked for again, and the view has not heard of it.
	proxy.setDown(true)
	id := p.publish(p.upsert("a", 4, 7))
	fn.logs.waitMessage(t, id, func(lines []map[string]any) bool {
		for _, l := range lines {
			if strings.Contains(l["message"].(string), "not announced") {
				return true
			}
		}
		return false
	})
	stored, _ := p.doc("a")
	assert.Equal(t, int64(4), stored.Version.Seq, "the write landed")
	d, _ = eng.Current().Fleet(p.key("a").DocID())
	assert.Equal(t, int64(2), d.Version.Seq, "the view heard nothing of it")
	proxy.setDown(false)
	waitView(t, eng, p, "a", "the redelivery, a duplicate, is announced", atSeq(4, 7))

	// A delete, and a snapshot that no longer lists b: its tombstone.
	p.publishAndWait(p.delete("a", 5))
	waitView(t, eng, p, "a", "a deleted", absent)
	p.publishAndWait(p.snapshot(6, map[string]int64{}))
	waitView(t, eng, p, "b", "b tombstoned by the snapshot", absent)

	assert.Zero(t, store.Billing().Reads[firestoredb.CauseListen], "no Firestore listener")

	// The last watch ends: the subscription goes with it. What is written
	// meanwhile, the view reads when it follows again.
	stop()
	require.Eventually(t, func() bool { return len(viewSubscriptions(t, topic)) == 0 }, 30*time.Second, 50*time.Millisecond,
		"the view deletes its subscription")
	p.publishAndWait(p.upsert("c", 7, 2))
	stop, err = eng.Watching()
	require.NoError(t, err)
	defer stop()
	waitView(t, eng, p, "c", "c, written while nobody followed", atSeq(7, 2))
	p.publishAndWait(p.upsert("c", 8, 4))
	waitView(t, eng, p, "c", "c, through the new subscription", atSeq(8, 4))
	assert.Len(t, viewSubscriptions(t, topic), 1)

	// A fleet gone from Firestore with no tombstone, which no feed
	// announces: the view's checks find its cluster disagreeing, and read
	// it again.
	_, err = store.FleetRef(p.key("c")).Delete(t.Context())
	require.NoError(t, err)
	waitView(t, eng, p, "c", "c, gone unannounced, found by the checks", absent)
}
