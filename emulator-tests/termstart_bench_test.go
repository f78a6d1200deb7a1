package emulatortests

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	firestorepb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/publisher"
)

// The ingest function's deployed sizing and its subscription's retry
// policy: the Terraform module's defaults (terraform/modules/fleetcast:
// ingest_max_instances, ingest_concurrency, retry_minimum_backoff, the
// 600 s maximum backoff, max_delivery_attempts).
const (
	deployedIngestInstances   = 20
	deployedIngestConcurrency = 8
	deployedMinBackoff        = 10 * time.Second
	deployedMaxBackoff        = 600 * time.Second
	deployedMaxAttempts       = 20
)

var (
	termFleets    = flag.Int("termstart.fleets", 10000, "BenchmarkTermStart: the cluster's fleets")
	termInstances = flag.Int("termstart.instances", deployedIngestInstances, "BenchmarkTermStart: ingest function instances (processes)")
)

// BenchmarkTermStart measures a term start: a publisher taking over a
// cluster (a failover, a rollout) republishes every one of its fleets at
// once, through the ingest function as Terraform deploys it by default:
// -termstart.instances instances (processes of their own), each taking
// 8 requests at once behind a stand-in for Cloud Run that answers 429 when
// every instance is full, and a stand-in for Pub/Sub's push (its push
// window, and the subscription's retry policy: 10 s doubling to 600 s).
// A first publisher fills the store; the benchmark times the second's
// republish, from its start to the last fleet acknowledged, and counts the
// 429s, the events asked for again (a cluster over its share of an
// instance), and each message's delivery attempts: one past
// max_delivery_attempts (20) would have been dead-lettered.
func BenchmarkTermStart(b *testing.B) {
	c := controlplane.Require(b, cp, cpErr)
	host := emulator.Host(b, emulator.FirestoreHostEnv)
	ns := benchFleets[*termFleets]
	if ns != nil {
		ns = ns.For(b)
	} else {
		ns = kubetest.NewNamespace(b, c)
		parallel(*termFleets, 8, func(i int) { ns.CreateFleet(ns.Name, fmt.Sprintf("f%05d", i), nil) })
		benchFleets[*termFleets] = ns
	}
	projectID := emulator.ProjectID(b)
	var targets []string
	for range *termInstances {
		fn, err := startFunctionTarget("IngestFleetEvents", host, "GOOGLE_CLOUD_PROJECT="+projectID, "EVENT_TIMEOUT=50s", "LOG_LEVEL=WARNING")
		require.NoError(b, err)
		b.Cleanup(fn.stop)
		targets = append(targets, fn.url)
	}
	front, refused := cloudRunInstances(b, targets, deployedIngestConcurrency)
	for range b.N {
		benchmarkTermStart(b, c, ns, front, refused, projectID)
	}
}

func benchmarkTermStart(b *testing.B, c *controlplane.ControlPlane, ns *kubetest.Namespace, front string, refused *atomic.Int64, projectID string) {
	cluster := "term-" + randomHex(b, 3)
	push := newPushModel(front, cluster, deployedMinBackoff, deployedMaxBackoff)
	fill := termStart(b, c, ns, cluster, push)
	b.Logf("the first publisher's %d fleets landed in %v", *termFleets, fill.drain.Round(time.Millisecond))
	fill.pub.Stop()

	refused0, failed0 := refused.Load(), push.failed.Load()
	b.ResetTimer()
	run := termStart(b, c, ns, cluster, push)
	b.StopTimer()
	run.pub.Stop()
	q := emulator.Firestore(b, projectID).Collection(firestoredb.FleetsCollection).
		Where("cluster", "==", cluster).Where("version.term", "==", run.term)
	res, err := q.NewAggregationQuery().WithCount("n").Get(b.Context())
	require.NoError(b, err)
	stored, ok := res["n"].(*firestorepb.Value)
	require.True(b, ok, "the count of the new term's documents")
	askedAgain := push.failed.Load() - failed0 - (refused.Load() - refused0)
	b.Logf("term start: %d fleets in %v; %d stored at the new term; 429s %d, asked again %d, most attempts of a message %d",
		*termFleets, run.drain.Round(time.Millisecond), stored.GetIntegerValue(), refused.Load()-refused0, askedAgain, run.maxAttempts.Load())
	require.EqualValues(b, *termFleets, stored.GetIntegerValue(), "every fleet stored at the new term")
	b.ReportMetric(run.drain.Seconds(), "drain-s")
	b.ReportMetric(float64(*termFleets)/run.drain.Seconds(), "fleets/s")
	b.ReportMetric(float64(refused.Load()-refused0), "429s")
	b.ReportMetric(float64(askedAgain), "asked-again")
	b.ReportMetric(float64(run.maxAttempts.Load()), "max-attempts")
	b.ReportMetric(float64(run.deadLettered.Load()), "dead-lettered")
	b.ReportMetric(deployedMaxAttempts, "max-delivery-attempts")
	b.ReportMetric(float64(*termInstances), "instances")
	b.ReportMetric(deployedIngestConcurrency, "concurrency")
	b.ReportMetric(float64(*termFleets), "fleets")
	b.ReportMetric(deployedMinBackoff.Seconds(), "min-backoff-s")
	b.ReportMetric(deployedMaxBackoff.Seconds(), "max-backoff-s")
}

// termRun is one publisher's start: its term, and how its republish went.
type termRun struct {
	pub   *kubetest.Publisher
	term  int64
	drain time.Duration
	// maxAttempts is the most delivery attempts one message took;
	// deadLettered counts those that took more than Pub/Sub allows.
	maxAttempts, deadLettered atomic.Int64
}

// termStart starts a publisher of ns's fleets (the default intervals) for
// cluster, its events pushed through push as Pub/Sub would, and returns
// once every fleet of its term was acknowledged.
func termStart(b *testing.B, c *controlplane.ControlPlane, ns *kubetest.Namespace, cluster string, push *pushModel) *termRun {
	cfg := kubetest.Config(cluster, ns.Name)
	def := publisher.DefaultConfig()
	cfg.MinInterval, cfg.SnapshotInterval, cfg.RefreshInterval = def.MinInterval, def.SnapshotInterval, def.RefreshInterval
	run := &termRun{}
	var mu sync.Mutex
	acked := map[string]bool{} // the fleets acknowledged, each once
	var termOnce sync.Once
	all := make(chan struct{})
	tr := pushTransport(func(ctx context.Context, ev fleet.Event) {
		termOnce.Do(func() { run.term = ev.Version.Term })
		_, attempts, ok := push.deliverCounted(ctx, b, ev)
		if !ok {
			return
		}
		for old := run.maxAttempts.Load(); int64(attempts) > old && !run.maxAttempts.CompareAndSwap(old, int64(attempts)); old = run.maxAttempts.Load() {
		}
		if attempts > deployedMaxAttempts {
			run.deadLettered.Add(1)
		}
		if ev.Kind != fleet.KindUpsert {
			return
		}
		// A fleet may be sent twice (its GameServerSet joins it after
		// the first send): it is done once, at its first acknowledgement.
		mu.Lock()
		defer mu.Unlock()
		if !acked[ev.Name] {
			acked[ev.Name] = true
			if len(acked) == *termFleets {
				close(all)
			}
		}
	})
	start := time.Now()
	run.pub = kubetest.StartPublisher(b, cfg, c.RESTConfig(), tr)
	select {
	case <-all:
	case <-time.After(30 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		b.Fatalf("the republish of %d fleets was not acknowledged within 30 min (%d were)", *termFleets, len(acked))
	}
	run.drain = time.Since(start)
	return run
}

// pushTransport is a publisher.Transport whose Send returns at once, as a
// publish does once Pub/Sub holds the message, and delivers each event on
// a goroutine of its own, as push delivery does (its push model bounds
// how many are outstanding). A republish sends each fleet once, so the
// order between fleets does not matter.
type pushTransport func(ctx context.Context, ev fleet.Event)

func (t pushTransport) Send(_ context.Context, ev fleet.Event) error {
	go t(context.Background(), ev)
	return nil
}

// cloudRunInstances stands in for Cloud Run in front of instances of a
// function: each instance takes at most concurrency requests at once
// (max_instance_request_concurrency), requests go to the instances in
// turn, each to the next with room, and when none has any the load balancer answers 429 at once,
// counted in refused.
func cloudRunInstances(tb testing.TB, targets []string, concurrency int) (front string, refused *atomic.Int64) {
	tb.Helper()
	type instance struct {
		proxy *httputil.ReverseProxy
		slots chan struct{}
	}
	var instances []instance
	for _, target := range targets {
		u, err := url.Parse(target)
		require.NoError(tb, err)
		proxy := httputil.NewSingleHostReverseProxy(u)
		proxy.Transport = pooled(concurrency)
		instances = append(instances, instance{proxy, make(chan struct{}, concurrency)})
	}
	refused = &atomic.Int64{}
	var next atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first := int(next.Add(1))
		for i := range instances {
			in := instances[(first+i)%len(instances)]
			select {
			case in.slots <- struct{}{}:
				defer func() { <-in.slots }()
				in.proxy.ServeHTTP(w, r)
				return
			default:
			}
		}
		refused.Add(1)
		http.Error(w, "Rejected by the load balancer: no available instance", http.StatusTooManyRequests)
	}))
	tb.Cleanup(srv.Close)
	return srv.URL + "/", refused
}
