package emulatortests

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/publisher"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

var latencySamples = flag.Int("latency.samples", 250, "BenchmarkEndToEndLatency: isolated changes measured")

// latencyFleets is how many fleets the changes rotate over, so that each
// change is a fleet's first in longer than the publisher's minimum interval
// (isolated: published at once, not coalesced).
const latencyFleets = 40

// hops are the floors measured next to each end-to-end sample.
var hops = []string{"watch", "publish", "push", "commit", "listener"}

// BenchmarkEndToEndLatency measures, for isolated changes, the time from a
// status patch on the API server to the fleetwatch callback of a listener
// on Firestore, through the whole pipeline: the publisher (in-process,
// default intervals), the Pub/Sub emulator with the Avro topic and an
// ordered push subscription, the ingest function (its own process) and the
// Firestore emulator.
//
// After each sample it measures, one at a time, the floor of each hop with
// nothing of fleetcast in it: watch (patch a fleet → a raw watch sees it),
// publish (Publish → the server's ack, one message, no batching delay),
// push (ack → a push subscription's request reaches a bare HTTP handler),
// commit (a transaction reading and writing one document) and listener
// (commit returned → a document listener fires; 0 when it fired first).
// A sample's floor is the sum of its hops; the end-to-end distribution is
// compared with the floor's, percentile by percentile.
func BenchmarkEndToEndLatency(b *testing.B) {
	c := controlplane.Require(b, cp, cpErr)
	for range b.N {
		benchmarkLatency(b, c)
	}
}

type seen struct {
	name  string
	ready int64
	at    time.Time
}

func benchmarkLatency(b *testing.B, c *controlplane.ControlPlane) {
	ctx := b.Context()
	p := newPipeline(b)
	ns := kubetest.NewNamespace(b, c)
	p.nsName = ns.Name
	cfg := p.publisherConfig(ns.Name)
	cfg.MinInterval = publisher.DefaultConfig().MinInterval
	cfg.SnapshotInterval = publisher.DefaultConfig().SnapshotInterval
	cfg.RefreshInterval = publisher.DefaultConfig().RefreshInterval
	kubetest.StartPublisher(b, cfg, c.RESTConfig(), p.transport(""))
	names := make([]string, latencyFleets)
	for i := range names {
		names[i] = fmt.Sprintf("f%02d", i)
		ns.CreateFleet(ns.Name, names[i], nil)
	}
	p.waitFleets("created", names, live)

	changes := make(chan seen, 64)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	_, err := fleetwatch.Watch(watchCtx, p.fs, fleetwatch.Options{Clusters: []string{p.cluster}, OnChange: func(ch fleetwatch.Change) {
		changes <- seen{ch.Fleet.Name, ch.Fleet.ReadyReplicas, time.Now()}
	}})
	require.NoError(b, err)

	f := newFloorProbe(b, c, p)
	e2e := make([]time.Duration, 0, *latencySamples)
	floors := map[string][]time.Duration{}
	last := map[string]time.Time{}
	b.ResetTimer()
	for i := range *latencySamples {
		name := names[i%len(names)]
		letTimePass(cfg.MinInterval + 100*time.Millisecond - time.Since(last[name]))
		ready := int64(1000 + i)
		start := time.Now()
		ns.SetStatus(ns.Name, name, map[string]any{"readyReplicas": ready})
		last[name] = start
		timeout := time.After(30 * time.Second)
	wait:
		for {
			select {
			case s := <-changes:
				if s.name == name && s.ready == ready {
					e2e = append(e2e, s.at.Sub(start))
					break wait
				}
			case <-timeout:
				b.Fatalf("change %d (%s ready=%d) did not reach the listener within 30 s", i, name, ready)
			}
		}
		for hop, d := range f.measure(int64(i)) {
			floors[hop] = append(floors[hop], d)
		}
	}
	b.StopTimer()

	reportDist(b, "e2e", "ms", millis(e2e))
	var floorOfMedians float64
	sums := make([]float64, len(e2e))
	for _, hop := range hops {
		v := millis(floors[hop])
		for i, d := range v {
			sums[i] += d
		}
		reportDist(b, hop, "ms", v) // sorts v
		floorOfMedians += quantile(v, 0.5)
	}
	reportDist(b, "floor", "ms", sums)
	b.ReportMetric(floorOfMedians, "floor-of-medians-ms")
	b.ReportMetric(quantile(millis(e2e), 0.5)/quantile(sums, 0.5), "p50/floor-p50")
	b.ReportMetric(quantile(millis(e2e), 0.99)/quantile(sums, 0.99), "p99/floor-p99")
	b.ReportMetric(float64(len(e2e)), "samples")
}

// floorProbe measures each hop alone, on resources of its own.
type floorProbe struct {
	b       *testing.B
	ns      *kubetest.Namespace
	watched chan seen
	pub     *pubsub.Publisher
	pushed  chan string
	fs      *firestore.Client
	doc     *firestore.DocumentRef
	written chan seen
}

func newFloorProbe(b *testing.B, c *controlplane.ControlPlane, p *pipeline) *floorProbe {
	ctx := b.Context()
	f := &floorProbe{b: b, ns: kubetest.NewNamespace(b, c), watched: make(chan seen, 16), pushed: make(chan string, 16), written: make(chan seen, 16)}

	// watch: a raw watch of a fleet of its own.
	f.ns.CreateFleet(f.ns.Name, "probe", nil)
	w, err := f.ns.Fleets(f.ns.Name).Watch(ctx, metav1.ListOptions{})
	require.NoError(b, err)
	b.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Modified {
				continue
			}
			ready, _, _ := unstructured.NestedInt64(ev.Object.(*unstructured.Unstructured).Object, "status", "readyReplicas")
			f.watched <- seen{ready: ready, at: time.Now()}
		}
	}()

	// publish and push: a plain topic with a push subscription to a bare
	// handler.
	topicID := "floor-" + randomHex(b, 4)
	_, err = p.ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: pubsubtopic.TopicName(project, topicID)})
	require.NoError(b, err)
	push := newHTTPServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Message struct {
				MessageID string `json:"messageId"`
			} `json:"message"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		f.pushed <- body.Message.MessageID
	}))
	_, err = p.ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: "projects/" + project + "/subscriptions/" + topicID, Topic: pubsubtopic.TopicName(project, topicID),
		PushConfig: &pubsubpb.PushConfig{PushEndpoint: push + "/"}, AckDeadlineSeconds: 10,
	})
	require.NoError(b, err)
	pub := p.ps.Publisher(topicID)
	pub.PublishSettings.CountThreshold = 1 // send at once: no batching delay
	b.Cleanup(pub.Stop)
	f.pub = pub

	// commit and listener: a document of its own.
	f.fs, f.doc = p.fs, p.fs.Collection("floor").Doc(topicID)
	_, err = f.doc.Set(ctx, map[string]any{"n": int64(-1)})
	require.NoError(b, err)
	it := f.doc.Snapshots(ctx)
	b.Cleanup(it.Stop)
	go func() {
		for {
			s, err := it.Next()
			if err != nil {
				return
			}
			n, _ := s.DataAt("n")
			v, _ := n.(int64)
			f.written <- seen{ready: v, at: time.Now()}
		}
	}()
	return f
}

// measure takes one sample of every hop, one after the other.
func (f *floorProbe) measure(i int64) map[string]time.Duration {
	b, ctx := f.b, f.b.Context()
	out := map[string]time.Duration{}

	start := time.Now()
	f.ns.SetStatus(f.ns.Name, "probe", map[string]any{"readyReplicas": i})
	out["watch"] = waitSeen(b, f.watched, i).Sub(start)

	data, err := fleet.EncodeEvent(fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "floor",
		Namespace: "default", Name: "probe", Version: fleet.Version{Term: 1, Seq: i + 1}, ObservedAt: fleet.MicrosOf(start),
		Publisher: fleet.Publisher{ID: "floor"}, Fleet: fleet.State{UID: "u", Status: fleet.Status{ReadyReplicas: i}}})
	require.NoError(b, err)
	start = time.Now()
	_, err = f.pub.Publish(ctx, &pubsub.Message{Data: data}).Get(ctx)
	require.NoError(b, err)
	acked := time.Now()
	out["publish"] = acked.Sub(start)
	select {
	case <-f.pushed:
		out["push"] = max(0, time.Since(acked))
	case <-time.After(30 * time.Second):
		b.Fatal("floor: no push within 30 s")
	}

	start = time.Now()
	err = f.fs.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		if _, err := tx.Get(f.doc); err != nil {
			return err
		}
		return tx.Set(f.doc, map[string]any{"n": i})
	})
	require.NoError(b, err)
	committed := time.Now()
	out["commit"] = committed.Sub(start)
	out["listener"] = max(0, waitSeen(b, f.written, i).Sub(committed))
	return out
}

// waitSeen waits for the sample with value v and returns when it was seen.
func waitSeen(b *testing.B, ch <-chan seen, v int64) time.Time {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case s := <-ch:
			if s.ready == v {
				return s.at
			}
		case <-timeout:
			b.Fatalf("floor: value %d not seen within 30 s", v)
		}
	}
}
