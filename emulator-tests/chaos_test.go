package emulatortests

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/controlplane"
	"github.com/fleetcast/fleetcast/internal/emulator"
	"github.com/fleetcast/fleetcast/internal/kubetest"
	"github.com/fleetcast/fleetcast/publisher"
)

var (
	chaosSeeds     = flag.Int("chaos.seeds", 20, "how many seeded random histories TestChaos runs")
	chaosFirstSeed = flag.Uint64("chaos.first", 1, "the first seed")
)

// chaosLog is one seed's trace: every operation and fault, in order.
type chaosLog struct {
	mu    sync.Mutex
	start time.Time
	lines []string
}

func (l *chaosLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("%6dms ", time.Since(l.start).Milliseconds())+fmt.Sprintf(format, args...))
}

// about returns the trace lines that mention one of names, and every
// publisher- or infrastructure-wide fault: the minimal trace of a divergence.
func (l *chaosLog) about(names []string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		global := strings.Contains(line, "publisher ") || strings.Contains(line, "firestore ")
		if global || slices.ContainsFunc(names, func(n string) bool { return strings.Contains(line, " "+n+" ") || strings.HasSuffix(line, " "+n) }) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// chaosTransport sits between a publisher and Pub/Sub: it drops, doubles,
// delays (reorders) and fails publishes at random while on.
type chaosTransport struct {
	inner publisher.Transport
	on    atomic.Bool
	mu    sync.Mutex
	rng   *rand.Rand
	log   *chaosLog
	wg    sync.WaitGroup
}

func (c *chaosTransport) roll() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.Float64()
}

func (c *chaosTransport) Send(ctx context.Context, ev fleet.Event) error {
	if !c.on.Load() {
		return c.inner.Send(ctx, ev)
	}
	what := fmt.Sprintf("%s %s %v", ev.Kind, ev.Name, ev.Version)
	switch r := c.roll(); {
	case r < 0.03:
		c.log.add("bus drops (after accepting) %s", what)
		return nil
	case r < 0.08:
		c.log.add("bus fails %s", what)
		return fmt.Errorf("chaos: publish failed")
	case r < 0.18:
		c.log.add("bus duplicates %s", what)
		c.later(ev, 150*time.Millisecond)
	case r < 0.33:
		c.log.add("bus delays (reorders) %s", what)
		c.later(ev, time.Duration(50+int(r*1000)%400)*time.Millisecond)
		return nil
	}
	return c.inner.Send(ctx, ev)
}

func (c *chaosTransport) later(ev fleet.Event, d time.Duration) {
	c.wg.Go(func() {
		<-time.After(d)
		_ = c.inner.Send(context.Background(), ev)
	})
}

// chaosPush sits between the push subscription and the ingest function:
// it fails deliveries before or after the function ran, and delays some.
type chaosPush struct {
	proxy *httputil.ReverseProxy
	on    atomic.Bool
	mu    sync.Mutex
	rng   *rand.Rand
	log   *chaosLog
}

func (c *chaosPush) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !c.on.Load() {
		c.proxy.ServeHTTP(w, r)
		return
	}
	c.mu.Lock()
	roll := c.rng.Float64()
	c.mu.Unlock()
	switch {
	case roll < 0.08:
		c.log.add("function fails before running (redelivery)")
		http.Error(w, "chaos", http.StatusInternalServerError)
	case roll < 0.13:
		c.log.add("function times out after running (redelivery of an applied event)")
		c.proxy.ServeHTTP(discard{}, r)
		http.Error(w, "chaos", http.StatusGatewayTimeout)
	case roll < 0.18:
		<-time.After(200 * time.Millisecond)
		c.proxy.ServeHTTP(w, r)
	default:
		c.proxy.ServeHTTP(w, r)
	}
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// TestChaos runs seeded random fleet histories through the real pipeline
// while injecting faults, then checks that Firestore ends exactly equal to
// the fleets the API server holds. make test runs 20 seeds; make chaos
// SEEDS=N runs more.
func TestChaos(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	fsProxy := newFaultProxy(t, emulator.Host(t, emulator.FirestoreHostEnv))
	fn, err := startFunction(fsProxy.addr())
	require.NoError(t, err)
	t.Cleanup(fn.stop)
	target, err := url.Parse(fn.url)
	require.NoError(t, err)
	start := time.Now()
	failed := 0
	for seed := *chaosFirstSeed; seed < *chaosFirstSeed+uint64(*chaosSeeds); seed++ {
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { chaosSeed(t, c, fn, target, fsProxy, seed) }) {
			failed++
		}
	}
	t.Logf("chaos: %d seeds, %d divergences, %v", *chaosSeeds, failed, time.Since(start).Round(time.Second))
}

func chaosSeed(t *testing.T, c *controlplane.ControlPlane, fn *function, target *url.URL, fsProxy *faultProxy, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xf1ee7))
	log := &chaosLog{start: time.Now()}
	push := &chaosPush{proxy: httputil.NewSingleHostReverseProxy(target), rng: rand.New(rand.NewPCG(seed, 1)), log: log}
	pushSrv := newHTTPServer(t, push)
	p := newPipelineTo(t, &function{url: pushSrv + "/", logs: fn.logs})
	ns := kubetest.NewNamespace(t, c)
	p.nsName = ns.Name
	bus := &chaosTransport{inner: p.transport(""), rng: rand.New(rand.NewPCG(seed, 2)), log: log}
	t.Cleanup(bus.wg.Wait)

	cfg := p.publisherConfig(ns.Name)
	cfg.MinInterval = 50 * time.Millisecond
	cfg.SnapshotInterval = 500 * time.Millisecond
	cfg.RefreshInterval = 2 * time.Second
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 2*time.Second, 1500*time.Millisecond, 200*time.Millisecond
	var pubs []*kubetest.Publisher
	instance := 0
	startPublisher := func() {
		instance++
		cfg := cfg
		cfg.ID = fmt.Sprintf("pub-%d", instance)
		pubs = append(pubs, kubetest.StartPublisher(t, cfg, c.RESTConfig(), bus))
		log.add("publisher %s starts", cfg.ID)
	}
	startPublisher()
	startPublisher()
	bus.on.Store(true)
	push.on.Store(true)

	// A random history over a few names, faults included.
	names := []string{"f0", "f1", "f2", "f3", "f4"}
	live := map[string]bool{}
	for op := range 40 {
		<-time.After(time.Duration(rng.IntN(60)) * time.Millisecond)
		name := names[rng.IntN(len(names))]
		switch r := rng.IntN(100); {
		case !live[name] && r < 70:
			ns.CreateFleet(ns.Name, name, map[string]string{"mode": "casual"})
			live[name] = true
			log.add("create %s", name)
		case !live[name]:
		case r < 50:
			ready := int64(rng.IntN(10))
			ns.SetStatus(ns.Name, name, map[string]any{"readyReplicas": ready, "allocations": int64(op)})
			log.add("status %s ready=%d allocations=%d", name, ready, op)
		case r < 65:
			mode := []string{"casual", "ranked", "event"}[rng.IntN(3)]
			ns.Patch(ns.Name, name, map[string]any{"metadata": map[string]any{"labels": map[string]any{"mode": mode}}})
			log.add("label %s mode=%s", name, mode)
		case r < 85:
			ns.DeleteFleet(ns.Name, name)
			live[name] = false
			log.add("delete %s", name)
		case r < 92 && len(pubs) > 0:
			i := rng.IntN(len(pubs))
			pubs[i].Stop()
			pubs = slices.Delete(pubs, i, i+1)
			log.add("publisher stopped (failover)")
			startPublisher()
		default:
			fsProxy.setDown(true)
			log.add("firestore outage begins")
			<-time.After(300 * time.Millisecond)
			fsProxy.setDown(false)
			log.add("firestore outage ends")
		}
	}
	bus.on.Store(false)
	push.on.Store(false)
	log.add("faults off")

	// The truth: what the API server holds, projected.
	list, err := ns.Fleets(ns.Name).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	want := map[string]fleet.State{}
	for _, item := range list.Items {
		_, s, err := cfg.Projection.Project(p.cluster, &item)
		require.NoError(t, err)
		want[item.GetName()] = s
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		diff := chaosDiff(t, p, want)
		if len(diff) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("seed %d: Firestore diverges from the API server after the history: %v\ntrace (go test -run 'TestChaos' ./emulator-tests -args -chaos.first=%d -chaos.seeds=1):\n%s",
				seed, diff, seed, log.about(slices.Collect(maps.Keys(diff))))
			return
		}
		<-time.After(200 * time.Millisecond)
	}
}

// chaosDiff compares the cluster's Firestore documents with the truth,
// by fleet name.
func chaosDiff(tb testing.TB, p *pipeline, want map[string]fleet.State) map[string]string {
	tb.Helper()
	docs, err := p.fs.Collection(fleet.FleetsCollection).Where("cluster", "==", p.cluster).Documents(tb.Context()).GetAll()
	require.NoError(tb, err)
	got := map[string]*fleet.Document{}
	for _, s := range docs {
		var d fleet.Document
		require.NoError(tb, s.DataTo(&d))
		if !d.Deleted {
			got[d.Name] = &d
		}
	}
	diff := map[string]string{}
	for name, s := range want {
		d, ok := got[name]
		switch {
		case !ok:
			diff[name] = "missing"
		case d.UID != s.UID || !maps.Equal(d.Labels, s.Labels):
			diff[name] = fmt.Sprintf("stale metadata: labels %v, want %v", d.Labels, s.Labels)
		case d.Status.ReadyReplicas != s.Status.ReadyReplicas || d.Status.Allocations != s.Status.Allocations:
			diff[name] = fmt.Sprintf("stale status: ready %d allocations %d, want %d %d", d.Status.ReadyReplicas, d.Status.Allocations, s.Status.ReadyReplicas, s.Status.Allocations)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			diff[name] = "extra: deleted fleet still live"
		}
	}
	return diff
}

func newHTTPServer(tb testing.TB, h http.Handler) string {
	tb.Helper()
	port, err := freePort()
	require.NoError(tb, err)
	srv := &http.Server{Addr: "127.0.0.1:" + port, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ListenAndServe() }()
	tb.Cleanup(func() { _ = srv.Close() })
	eventually(tb, "the proxy listening", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + port + "/probe")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err == nil
	})
	return "http://127.0.0.1:" + port
}

// TestChaosCheckerCatchesDivergences guards the guard: a missing fleet, a
// stale one and a deleted one still live are all reported.
func TestChaosCheckerCatchesDivergences(t *testing.T) {
	p := newPipeline(t)
	require.Equal(t, "created", p.publishAndWait(p.upsert("stale", 1, 4)))
	require.Equal(t, "created", p.publishAndWait(p.upsert("ghost", 2, 1)))
	truth := p.upsert("stale", 3, 7).Fleet
	diff := chaosDiff(t, p, map[string]fleet.State{"stale": truth, "missing": truth})
	require.Len(t, diff, 3, "%v", diff)
	require.Equal(t, "missing", diff["missing"])
	require.Contains(t, diff["stale"], "stale status")
	require.Contains(t, diff["ghost"], "extra")
}
