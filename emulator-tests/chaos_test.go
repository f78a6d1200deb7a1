package emulatortests

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
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

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/logging"
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
		c.log.add("function fails before running (redelivery) %s", c.describe(r))
		http.Error(w, "chaos", http.StatusInternalServerError)
	case roll < 0.13:
		c.log.add("function times out after running (redelivery of an applied event) %s", c.describe(r))
		c.proxy.ServeHTTP(discard{}, r)
		http.Error(w, "chaos", http.StatusGatewayTimeout)
	case roll < 0.18:
		<-time.After(200 * time.Millisecond)
		c.proxy.ServeHTTP(w, r)
	default:
		c.proxy.ServeHTTP(w, r)
	}
}

// describe names the event a push delivers ("KIND name version"), for
// the trace, and leaves the request's body as it was.
func (c *chaosPush) describe(r *http.Request) string {
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return "(unreadable push: " + err.Error() + ")"
	}
	var push struct {
		Message struct {
			Data []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(body, &push); err != nil {
		return "(not a push envelope)"
	}
	ev, err := fleet.DecodeEvent(push.Message.Data)
	if err != nil {
		return "(undecodable event)"
	}
	return fmt.Sprintf("%s %s %v", ev.Kind, ev.Name, ev.Version)
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
	nb := startNeighbourhood(t)
	start := time.Now()
	failed := 0
	for seed := *chaosFirstSeed; seed < *chaosFirstSeed+uint64(*chaosSeeds); seed++ {
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { chaosSeed(t, c, fn, target, fsProxy, nb, seed) }) {
			failed++
		}
	}
	t.Logf("chaos: %d seeds, %d divergences, %v", *chaosSeeds, failed, time.Since(start).Round(time.Second))
}

func chaosSeed(t *testing.T, c *controlplane.ControlPlane, fn *function, target *url.URL, fsProxy *faultProxy, nb *neighbourhood, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xf1ee7))
	log := &chaosLog{start: time.Now()}
	push := &chaosPush{proxy: httputil.NewSingleHostReverseProxy(target), rng: rand.New(rand.NewPCG(seed, 1)), log: log}
	pushSrv := newHTTPServer(t, push)
	p := newPipelineTo(t, &function{url: pushSrv + "/", logs: fn.logs})
	// Another cluster, whose topic forges events claiming p's cluster.
	attacker := newPipelineTo(t, &function{url: pushSrv + "/", logs: fn.logs})
	ns := kubetest.NewNamespace(t, c)
	p.nsName = ns.Name
	bus := &chaosTransport{inner: p.transport(""), rng: rand.New(rand.NewPCG(seed, 2)), log: log}
	t.Cleanup(bus.wg.Wait)
	// A stored document no event can read, in the cluster's range: it
	// must hold up neither the heartbeats nor any other fleet.
	poison := p.key("zz-poison").DocID()
	_, err := p.fs.Collection(firestoredb.FleetsCollection).Doc(poison).Set(t.Context(), map[string]any{
		"cluster": p.cluster, "namespace": ns.Name, "name": "zz-poison", "deleted": false, "version": "poisoned",
	})
	require.NoError(t, err)
	log.add("firestore poisoned document %s", poison)

	cfg := p.publisherConfig(ns.Name)
	cfg.Projection.IncludeAnnotations = []string{"fleetcast.dev/*"}
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
		// Some instances run on a clock up to 2 minutes off.
		skew := time.Duration(rng.IntN(5)-2) * time.Minute
		pubs = append(pubs, kubetest.StartPublisher(t, cfg, c.RESTConfig(), bus, kubetest.WithClockSkew(skew)))
		log.add("publisher %s starts, its clock off by %v", cfg.ID, skew)
	}
	startPublisher()
	startPublisher()
	// Beside it, a cluster flooding the ingest function, a bystander
	// heartbeating, and hostile readers at a query instance.
	moves := nb.move(t, log)
	readers := rand.New(rand.NewPCG(seed, 3))
	bus.on.Store(true)
	push.on.Store(true)

	// A random history over a few names, faults included.
	names := []string{"f0", "f1", "f2", "f3", "f4"}
	live := map[string]bool{}
	for op := range 40 {
		<-time.After(time.Duration(rng.IntN(60)) * time.Millisecond)
		moves.act(readers)
		name := names[rng.IntN(len(names))]
		if rng.IntN(100) < 8 {
			forged := chaosForgery(p, rng, name)
			attacker.publish(forged)
			log.add("forged %s %s %v on another cluster's topic", forged.Kind, forged.Name, forged.Version)
			continue
		}
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
		case r < 60:
			mode := []string{"casual", "ranked", "event"}[rng.IntN(3)]
			ns.Patch(ns.Name, name, map[string]any{"metadata": map[string]any{"labels": map[string]any{"mode": mode}}})
			log.add("label %s mode=%s", name, mode)
		case r < 65:
			// An included annotation past its limit makes the fleet
			// degraded; a short one makes it whole again.
			size := []int{16, fleet.MaxAnnotationValue + 1}[rng.IntN(2)]
			ns.Patch(ns.Name, name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{"fleetcast.dev/notes": strings.Repeat("n", size)}}})
			log.add("annotate %s with %d bytes", name, size)
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
	if broken := moves.quiet(); len(broken) > 0 {
		t.Errorf("seed %d: beside the pipeline, %s\ntrace (go test -run 'TestChaos' ./emulator-tests -args -chaos.first=%d -chaos.seeds=1):\n%s",
			seed, strings.Join(broken, "; "), seed, log.about([]string{"neighbours", "reader"}))
	}

	// The truth: what the API server holds, projected.
	list, err := ns.Fleets(ns.Name).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	want := map[string]fleet.State{}
	for _, item := range list.Items {
		_, s, err := cfg.Projection.Project(p.cluster, &item)
		require.NoError(t, err)
		fitted, ok := fleet.Fit(s)
		require.True(t, ok)
		want[item.GetName()] = fitted
	}
	// The heartbeat must be a snapshot taken after the faults: one taken
	// before and delivered late says nothing of the pipeline now.
	var mark fleet.Version
	for _, pub := range pubs {
		if v := pub.Agent.Stamped(); v.Compare(mark) > 0 {
			mark = v
		}
	}
	heartbeat := func() fleet.Version {
		cl, _ := p.clusterDoc()
		if cl == nil {
			return fleet.Version{}
		}
		return cl.SnapshotVersion
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		diff := chaosDiff(t, p, want)
		// No cluster's documents change through another cluster's topic:
		// the forgeries claimed p's cluster (checked by the diff) and
		// wrote nothing of the attacker's either.
		if n := len(chaosDocs(t, attacker)); n > 0 {
			diff["(attacker)"] = fmt.Sprintf("%d documents of the forging cluster", n)
		}
		if hb := heartbeat(); hb.Compare(mark) <= 0 {
			diff["(heartbeat)"] = fmt.Sprintf("no snapshot taken after the faults ingested (the newest is %v; the faults ended at %v)", hb, mark)
		}
		if len(diff) == 0 {
			raw, err := p.fs.Collection(firestoredb.FleetsCollection).Doc(poison).Get(t.Context())
			require.NoError(t, err)
			require.Equal(t, "poisoned", raw.Data()["version"], "the unreadable document is left as it is")
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("seed %d: Firestore diverges from the API server after the history: %v\ntrace (go test -run 'TestChaos' ./emulator-tests -args -chaos.first=%d -chaos.seeds=1):\n%s\n%s",
				seed, diff, seed, log.about(slices.Collect(maps.Keys(diff))), chaosState(t, p, log.start, pubs, fn.logs))
			return
		}
		<-time.After(200 * time.Millisecond)
	}
}

// chaosState describes, for a divergence, what each side holds at the end:
// the cluster's documents, each running publisher's term and queues, and
// what the function logged for the cluster. Times are since the seed began.
func chaosState(tb testing.TB, p *pipeline, start time.Time, pubs []*kubetest.Publisher, logs *logCollector) string {
	tb.Helper()
	since := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return fmt.Sprintf("%dms", t.Sub(start).Milliseconds())
	}
	var out []string
	if cl, _ := p.clusterDoc(); cl == nil {
		out = append(out, "cluster document: none")
	} else {
		out = append(out, fmt.Sprintf("cluster document: snapshot %v by %s, %d fleets, ingested at %s",
			cl.SnapshotVersion, cl.Publisher.ID, cl.FleetCount, since(cl.IngestedAt)))
	}
	docs := chaosDocs(tb, p)
	for _, name := range slices.Sorted(maps.Keys(docs)) {
		d := docs[name]
		state := "live"
		if d.Deleted {
			state = "tombstone"
		} else if d.Status != nil {
			state = fmt.Sprintf("live ready=%d allocations=%d", d.Status.ReadyReplicas, d.Status.Allocations)
		}
		out = append(out, fmt.Sprintf("document %s: %s at %v by %s, ingested at %s", name, state, d.Version, d.Publisher.ID, since(d.IngestedAt)))
	}
	for _, pub := range pubs {
		queued, inflight := pub.Sender.Queued()
		out = append(out, fmt.Sprintf("publisher %s: term %d, %d fleets, %d events queued, %d in flight",
			pub.ID, pub.Agent.Term(), pub.Agent.Fleets(), queued, inflight))
	}
	lines := logs.matching(logging.KeyCluster, p.cluster)
	out = append(out, fmt.Sprintf("the function logged %d lines for the cluster; the last ones:", len(lines)))
	for _, l := range lines[max(0, len(lines)-40):] {
		out = append(out, fmt.Sprintf("  %v %v %v %v %v %v %v", l["time"], l["severity"], l["message"], l[logging.KeyKind], l[logging.KeyFleet], l[logging.KeyVersion], l[logging.KeyOutcome]))
	}
	// Each line is marked, so that make chaos's filter keeps it.
	return "state: " + strings.Join(out, "\nstate: ")
}

// chaosForgery is an event claiming p's cluster that another cluster's
// publisher (or anyone holding its account) might send: a snapshot that
// would tombstone everything, a delete, or an upsert — with a real-looking
// term, or the largest one and a heartbeat from year 9000.
func chaosForgery(p *pipeline, rng *rand.Rand, name string) fleet.Event {
	var ev fleet.Event
	switch rng.IntN(3) {
	case 0:
		ev = p.snapshot(1, nil)
	case 1:
		ev = p.event(fleet.KindDelete, name, 1)
		ev.Namespace = p.nsName
	default:
		ev = p.upsert(name, 1, 9)
		ev.Namespace = p.nsName
	}
	ev.Version = fleet.Version{Term: time.Now().UnixMilli(), Seq: 1 << 40}
	if rng.IntN(2) == 0 {
		ev.Version.Term = math.MaxInt64
		ev.ObservedAt = fleet.MicrosOf(time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC))
	}
	return ev
}

// chaosDocs returns the readable fleet documents of p's cluster by name
// (tombstones included).
func chaosDocs(tb testing.TB, p *pipeline) map[string]*fleet.Document {
	tb.Helper()
	docs, err := p.fs.Collection(firestoredb.FleetsCollection).Where("cluster", "==", p.cluster).Documents(tb.Context()).GetAll()
	require.NoError(tb, err)
	out := map[string]*fleet.Document{}
	for _, s := range docs {
		var d fleet.Document
		if err := s.DataTo(&d); err != nil {
			continue // the poisoned document
		}
		out[d.Name] = &d
	}
	return out
}

// chaosDiff compares the cluster's Firestore documents with the truth,
// by fleet name.
func chaosDiff(tb testing.TB, p *pipeline, want map[string]fleet.State) map[string]string {
	tb.Helper()
	got := map[string]*fleet.Document{}
	for name, d := range chaosDocs(tb, p) {
		if !d.Deleted {
			got[name] = d
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
		case (d.Degraded == "") != (s.Degraded == "") || !maps.Equal(d.Annotations, s.Annotations):
			diff[name] = fmt.Sprintf("stale annotations: degraded %q annotations %d, want degraded %q annotations %d", d.Degraded, len(d.Annotations), s.Degraded, len(s.Annotations))
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
	port, err := proc.FreePort()
	require.NoError(tb, err)
	srv := &http.Server{Addr: "127.0.0.1:" + port, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ListenAndServe() }()
	tb.Cleanup(func() { _ = srv.Close() })
	eventually(tb, "the proxy listening", func() bool {
		resp, err := testhttp.Client.Get("http://127.0.0.1:" + port + "/probe")
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

	// What a divergence reports of the end state.
	state := chaosState(t, p, time.Now(), nil, p.fn.logs)
	require.Contains(t, state, "cluster document: none")
	require.Regexp(t, `document ghost: live ready=\d+ allocations=\d+ at \S+ by \S+, ingested at -\d+ms`, state)
	require.Contains(t, state, "the function logged 2 lines for the cluster")
}
