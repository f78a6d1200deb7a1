package emulatortests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/publisher"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

// publisherConfig is a publisher of the pipeline's cluster watching ns.
func (p *pipeline) publisherConfig(ns string) publisher.Config {
	cfg := kubetest.Config(p.cluster, ns)
	cfg.Project, cfg.Topic = project, p.topicID
	cfg.LeaderElect = true
	cfg.ClusterLabels = map[string]string{"platform": "pc"}
	return cfg
}

// transport publishes to the pipeline's topic through a client of its own
// (through addr when set: a fault proxy in front of the emulator).
func (p *pipeline) transport(addr string) *pubsubtopic.Transport {
	p.tb.Helper()
	client := p.ps
	if addr != "" {
		var err error
		client, err = pubsub.NewClient(context.Background(), project, append(emulator.EmulatorOptions(addr), pubsubtopic.ClientOptions()...)...)
		require.NoError(p.tb, err)
		p.tb.Cleanup(func() { _ = client.Close() })
	}
	t := pubsubtopic.NewTransport(client, p.topicID)
	p.tb.Cleanup(t.Stop)
	return t
}

// waitFleets polls Firestore until every named fleet's document satisfies
// want (nil document: none).
func (p *pipeline) waitFleets(what string, names []string, want func(name string, d *fleet.Document) bool) {
	p.tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var bad []string
		for _, n := range names {
			d, _ := p.doc(n)
			if !want(n, d) {
				bad = append(bad, n)
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			p.tb.Fatalf("%s: fleets %v not as expected within 60 s", what, bad)
		}
		select {
		case <-p.tb.Context().Done():
			p.tb.Fatal(p.tb.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func live(_ string, d *fleet.Document) bool { return d != nil && !d.Deleted }

// TestPublisherRestartHealsDeletesMissedWhileDown: stop the publisher,
// delete a fleet and create another, start it: no delete event was ever
// seen, but the first snapshot lets the ingest function tombstone it.
func TestPublisherRestartHealsDeletesMissedWhileDown(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	p := newPipeline(t)
	ns := kubetest.NewNamespace(t, c)
	cfg := p.publisherConfig(ns.Name)
	transport := p.transport("")

	first := kubetest.StartPublisher(t, cfg, c.RESTConfig(), transport)
	ns.CreateFleet(ns.Name, "keep", map[string]string{"platform": "pc"})
	ns.CreateFleet(ns.Name, "gone", nil)
	p.nsName = ns.Name
	p.waitFleets("both fleets land", []string{"keep", "gone"}, live)
	firstTerm := first.Agent.Term()
	first.Stop()

	ns.DeleteFleet(ns.Name, "gone")
	ns.CreateFleet(ns.Name, "new", nil)

	kubetest.StartPublisher(t, cfg, c.RESTConfig(), transport)
	p.waitFleets("the restart heals", []string{"keep", "gone", "new"}, func(name string, d *fleet.Document) bool {
		if name == "gone" {
			return d != nil && d.Deleted
		}
		return live(name, d) && d.Version.Term > firstTerm
	})
	gone, _ := p.doc("gone")
	assert.Greater(t, gone.Version.Term, firstTerm, "tombstoned by the new term's snapshot")

	snap, err := p.fs.Collection(firestoredb.ClustersCollection).Doc(p.cluster).Get(t.Context())
	require.NoError(t, err)
	var cluster fleet.ClusterDocument
	require.NoError(t, snap.DataTo(&cluster))
	assert.Equal(t, int64(2), cluster.FleetCount)
	assert.Equal(t, "pc", cluster.Labels["platform"])
}

// TestPubSubOutageDuringChurn cuts the publisher off from Pub/Sub for 10 s
// while fleets keep changing: its memory stays bounded (pending at most one
// per fleet) and Firestore ends equal to the final states.
func TestPubSubOutageDuringChurn(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	p := newPipeline(t)
	ns := kubetest.NewNamespace(t, c)
	p.nsName = ns.Name
	proxy := newFaultProxy(t, emulator.Host(t, emulator.PubSubHostEnv))
	cfg := p.publisherConfig(ns.Name)
	cfg.MinInterval = 100 * time.Millisecond
	pub := kubetest.StartPublisher(t, cfg, c.RESTConfig(), p.transport(proxy.addr()))

	const fleets = 20
	names := make([]string, fleets)
	for i := range names {
		names[i] = fmt.Sprintf("f%02d", i)
		ns.CreateFleet(ns.Name, names[i], nil)
	}
	p.waitFleets("the fleets land", names, live)

	// Churn: one status change every 20 ms, round robin; the last value of
	// allocations written to each fleet is its final state.
	var mu sync.Mutex
	final := map[string]int64{}
	stop := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			name := names[i%fleets]
			ns.SetStatus(ns.Name, name, map[string]any{"allocations": i, "readyReplicas": i % 4})
			mu.Lock()
			final[name] = i
			mu.Unlock()
		}
	}()

	letTimePass(2 * time.Second)
	proxy.setDown(true)
	maxPending := 0
	outage := time.Now()
	for time.Since(outage) < 10*time.Second {
		keys := map[string]struct{}{}
		pub.Agent.PendingKeys(keys)
		pub.Sender.PendingKeys(keys)
		maxPending = max(maxPending, len(keys))
		letTimePass(100 * time.Millisecond)
	}
	queued, _ := pub.Sender.Queued()
	proxy.setDown(false)
	letTimePass(2 * time.Second)
	close(stop)
	<-churned

	t.Logf("outage 10 s: at most %d fleets pending, %d events queued at its end", maxPending, queued)
	assert.LessOrEqual(t, maxPending, fleets, "pending is bounded by the fleets, not the changes")
	assert.Greater(t, maxPending, 0, "the outage must have held something back")
	mu.Lock()
	want := final
	mu.Unlock()
	p.waitFleets("Firestore converges on the final states", names, func(name string, d *fleet.Document) bool {
		return d != nil && !d.Deleted && d.Status.Allocations == want[name] && d.Status.ReadyReplicas == want[name]%4
	})
}

// letTimePass waits out d where real time must pass (churn, an outage):
// there is no condition to poll.
func letTimePass(d time.Duration) { <-time.After(d) }
