package publisher_test

import (
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/publisher"
)

// TestEachChangeProducesExactlyTheExpectedEvent walks one fleet through
// its life on the real API server. Between steps it waits for the event
// expected, so that every change gets its own publish; changes that are not
// state (excluded labels, annotations not included) must publish nothing,
// which the next step's event proves.
func TestEachChangeProducesExactlyTheExpectedEvent(t *testing.T) {
	e := newNamespace(t)
	rec := newRecorder()
	kubetest.StartPublisher(t, kubetest.Config("pc", e.Name), cp.RESTConfig(), rec)
	rec.waitFor(t, "the initial snapshot", func(evs []fleet.Event) bool { return len(only(evs, fleet.KindSnapshot)) == 1 })

	step := func(name string, n int, check func(fleet.Event)) {
		t.Helper()
		evs := rec.waitFor(t, name, func(evs []fleet.Event) bool { return len(fleetEvents(evs)) >= n })
		got := fleetEvents(evs)
		require.Len(t, got, n, "%s: exactly one more event: %s", name, describe(got))
		check(got[n-1])
		if n > 1 {
			assert.Equal(t, 1, got[n-1].Version.Compare(got[n-2].Version), "versions grow")
		}
	}

	e.CreateFleet(e.Name, "sgs", map[string]string{"platform": "pc"})
	step("create", 1, func(ev fleet.Event) {
		assert.Equal(t, fleet.KindUpsert, ev.Kind)
		assert.Equal(t, e.Name, ev.Namespace)
		assert.Equal(t, int64(3), ev.Fleet.Spec.Replicas)
		assert.Equal(t, "Packed", ev.Fleet.Spec.Scheduling)
		assert.NotEmpty(t, ev.Fleet.UID)
	})

	setReady(e, e.Name, "sgs", 2)
	step("status patch", 2, func(ev fleet.Event) { assert.Equal(t, int64(2), ev.Fleet.Status.ReadyReplicas) })

	// Not state: an excluded label and an annotation nobody asked for.
	e.Patch(e.Name, "sgs", map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{"noise.example.com/tick": "1"},
		"annotations": map[string]any{"example.com/note": "x"},
	}})
	e.Patch(e.Name, "sgs", map[string]any{"metadata": map[string]any{"labels": map[string]any{"version": "1.2"}}})
	step("label change", 3, func(ev fleet.Event) {
		assert.Equal(t, map[string]string{"platform": "pc", "version": "1.2"}, ev.Fleet.Labels)
	})

	e.DeleteFleet(e.Name, "sgs")
	step("delete", 4, func(ev fleet.Event) { assert.Equal(t, fleet.KindDelete, ev.Kind) })
}

func TestNamespaceAndLabelSelectorFilter(t *testing.T) {
	e := newNamespace(t)
	other := newNamespace(t)
	rec := newRecorder()
	cfg := kubetest.Config("pc", e.Name)
	cfg.Namespaces = []string{e.Name}
	cfg.LabelSelector = "platform=pc"
	kubetest.StartPublisher(t, cfg, cp.RESTConfig(), rec)

	e.CreateFleet(other.Name, "elsewhere", map[string]string{"platform": "pc"})
	e.CreateFleet(e.Name, "console", map[string]string{"platform": "ps5"})
	e.CreateFleet(e.Name, "pc", map[string]string{"platform": "pc"})
	evs := rec.waitFor(t, "the matching fleet", func(evs []fleet.Event) bool { return len(fleetEvents(evs)) >= 1 })
	got := fleetEvents(evs)
	require.Len(t, got, 1)
	assert.Equal(t, "pc", got[0].Name)

	// Relabelled out of the selector: gone, as far as fleetcast knows.
	e.Patch(e.Name, "pc", map[string]any{"metadata": map[string]any{"labels": map[string]any{"platform": "xbox"}}})
	evs = rec.waitFor(t, "the delete", func(evs []fleet.Event) bool { return len(fleetEvents(evs)) >= 2 })
	got = fleetEvents(evs)
	require.Len(t, got, 2)
	assert.Equal(t, fleet.KindDelete, got[1].Kind)
	assert.Equal(t, "pc", got[1].Name)
}

// TestStatusChurnIsCoalesced: 200 status patches to one fleet within about
// 2 s publish at most ceil(elapsed / min-interval) + 1 upserts, the last
// with the final status.
func TestStatusChurnIsCoalesced(t *testing.T) {
	e := newNamespace(t)
	rec := newRecorder()
	cfg := kubetest.Config("pc", e.Name)
	cfg.MinInterval = time.Second
	kubetest.StartPublisher(t, cfg, cp.RESTConfig(), rec)
	e.CreateFleet(e.Name, "busy", nil)
	rec.waitFor(t, "the create", func(evs []fleet.Event) bool { return len(fleetEvents(evs)) == 1 })
	letTimePass(cfg.MinInterval) // a quiet period, so the first patch is a leading edge
	before := len(rec.all())

	start := time.Now()
	const patches = 200
	tick := time.NewTicker(10 * time.Millisecond)
	for i := range int64(patches) {
		e.Patch(e.Name, "busy", map[string]any{"status": map[string]any{"readyReplicas": i % 3, "allocations": i + 1}}, "status")
		<-tick.C
	}
	tick.Stop()
	elapsed := time.Since(start)
	final := int64(patches)
	evs := rec.waitFor(t, "the final status", func(evs []fleet.Event) bool {
		n := len(evs)
		return n > before && evs[n-1].Kind == fleet.KindUpsert && evs[n-1].Fleet.Status.Allocations == final
	})
	upserts := only(evs[before:], fleet.KindUpsert)
	bound := int(math.Ceil(float64(elapsed)/float64(cfg.MinInterval))) + 1
	t.Logf("%d status patches in %v: %d publishes (bound %d)", patches, elapsed.Round(time.Millisecond), len(upserts), bound)
	assert.LessOrEqual(t, len(upserts), bound)
	for i := 1; i < len(upserts); i++ {
		gap := upserts[i].ObservedAt.Time().Sub(upserts[i-1].ObservedAt.Time())
		assert.GreaterOrEqual(t, gap, cfg.MinInterval-time.Millisecond, "one publish per interval")
	}
}

// TestLeaderElection: of two instances only the leader publishes. Cut the
// leader off from the API server (it can still reach the bus, as in a
// partition): it must stop publishing on its own before the other takes
// over with a higher term, so no event of the old term follows the new
// term's first.
func TestLeaderElection(t *testing.T) {
	e := newNamespace(t)
	rec := newRecorder()
	kubeA, cutA := partitionable(cp.RESTConfig())
	cfgA, cfgB := electedConfig(e.Name, "pub-a"), electedConfig(e.Name, "pub-b")
	e.CreateFleet(e.Name, "f1", nil)
	a := kubetest.StartPublisher(t, cfgA, kubeA, rec)
	rec.waitFor(t, "pub-a to lead", func(evs []fleet.Event) bool { return len(evs) > 0 })
	kubetest.StartPublisher(t, cfgB, cp.RESTConfig(), rec)

	// Churn, and let pub-b campaign for a while: it must stay silent.
	defer churn(e, "f1")()
	letTimePass(3 * cfgA.LeaseDuration)
	for _, ev := range rec.all() {
		require.Equal(t, "pub-a", ev.Publisher.ID, "only the leader publishes")
	}
	termA := a.Agent.Term()
	require.NotZero(t, termA)

	cutA.Store(true)
	cut := time.Now()
	evs := rec.waitFor(t, "pub-b to take over", func(evs []fleet.Event) bool {
		return len(evs) > 0 && evs[len(evs)-1].Publisher.ID == "pub-b"
	})
	takeover := time.Since(cut)
	t.Logf("takeover %v after the partition (lease %v, retry %v)", takeover.Round(time.Millisecond), cfgA.LeaseDuration, cfgA.RetryPeriod)
	assert.Less(t, takeover, cfgA.LeaseDuration+2*cfgA.RetryPeriod+3*time.Second)

	first := slices.IndexFunc(evs, func(ev fleet.Event) bool { return ev.Publisher.ID == "pub-b" })
	require.Greater(t, ev(evs, first).Version.Term, termA, "the new writer's term is higher")
	// Keep watching a little: nothing of the old term after the new one began.
	letTimePass(cfgA.LeaseDuration)
	all := rec.all()
	for _, ev := range all[first:] {
		assert.Equal(t, "pub-b", ev.Publisher.ID, "an event of the old term after the new term's first: %v", ev.Version)
	}
	republished := slices.ContainsFunc(all[first:], func(ev fleet.Event) bool {
		return ev.Kind == fleet.KindUpsert && ev.Name == "f1" && ev.Version.Term > termA
	})
	assert.True(t, republished, "the new writer republishes every fleet under its term")
	assert.Zero(t, a.Agent.Term(), "the partitioned leader stopped publishing")
}

// partitionable returns a copy of kube whose requests fail once cut is set:
// a publisher cut off from its API server.
func partitionable(kube *rest.Config) (*rest.Config, *atomic.Bool) {
	var cut atomic.Bool
	kube.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if cut.Load() {
				return nil, errPartitioned
			}
			return rt.RoundTrip(r)
		})
	}
	return kube, &cut
}

// electedConfig is an instance id of a publisher of cluster pc electing a
// leader with short timings: a leader stops at the latest retry + renew
// deadline (1.75 s) after its last renewal; a candidate takes over no
// sooner than the lease duration (3 s) after it: 1.25 s of margin, as
// production's 15 s, 10 s and 2 s leave 3 s.
func electedConfig(ns, id string) publisher.Config {
	cfg := kubetest.Config("pc", ns)
	cfg.LeaderElect, cfg.ID, cfg.SnapshotInterval = true, id, 200*time.Millisecond
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 3*time.Second, 1500*time.Millisecond, 250*time.Millisecond
	return cfg
}

// churn changes a fleet's status every 50 ms until the function it returns
// is called: before the test ends, while its context still lets it patch.
func churn(e *kubetest.Namespace, name string) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(0); ; i++ {
			select {
			case <-quit:
				return
			case <-time.After(50 * time.Millisecond):
			}
			setReady(e, e.Name, name, i%3)
		}
	}()
	return func() { close(quit); <-done }
}

func ev(evs []fleet.Event, i int) fleet.Event { return evs[i] }

// heldBack returns a copy of kube whose fleet watches deliver nothing
// while its gate is shut: a standby whose informer lags its API server.
func heldBack(kube *rest.Config) (*rest.Config, *gate) {
	g := &gate{}
	g.release()
	kube = rest.CopyConfig(kube)
	kube.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && r.URL.Query().Get("watch") == "true" && strings.HasSuffix(r.URL.Path, "/fleets") {
				resp.Body = &heldBody{ReadCloser: resp.Body, gate: g}
			}
			return resp, err
		})
	}
	return kube, g
}

// gate holds readers back while shut.
type gate struct {
	mu   sync.Mutex
	open chan struct{}
}

func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		g.open = make(chan struct{})
	}
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gate) passed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// heldBody reads nothing while its gate is shut.
type heldBody struct {
	io.ReadCloser
	gate *gate
}

func (b *heldBody) Read(p []byte) (int, error) {
	<-b.gate.passed()
	return b.ReadCloser.Read(p)
}

// TestALaggingStandbyCatchesUpBeforeItsFirstSnapshot: a standby whose
// fleet watch is held back misses a fleet created and another deleted;
// when it takes over, it publishes nothing — no snapshot that would
// tombstone the new fleet, no republish that would revive the deleted one
// — until its informer holds what a consistent list does; then its first
// snapshot lists the new fleet and not the deleted one.
func TestALaggingStandbyCatchesUpBeforeItsFirstSnapshot(t *testing.T) {
	e := newNamespace(t)
	rec := newRecorder()
	cfgA, cfgB := electedConfig(e.Name, "pub-a"), electedConfig(e.Name, "pub-b")
	e.CreateFleet(e.Name, "doomed", nil)
	a := kubetest.StartPublisher(t, cfgA, cp.RESTConfig(), rec)
	rec.waitFor(t, "pub-a to lead", func(evs []fleet.Event) bool { return len(evs) > 0 })
	kubeB, hold := heldBack(cp.RESTConfig())
	b := kubetest.StartPublisher(t, cfgB, kubeB, rec)
	hold.shut()

	e.CreateFleet(e.Name, "newborn", nil)
	require.NoError(t, e.Fleets(e.Name).Delete(t.Context(), "doomed", metav1.DeleteOptions{}))
	rec.waitFor(t, "pub-a to publish both", func(evs []fleet.Event) bool {
		return slices.ContainsFunc(evs, func(ev fleet.Event) bool { return ev.Kind == fleet.KindDelete && ev.Name == "doomed" }) &&
			slices.ContainsFunc(evs, func(ev fleet.Event) bool { return ev.Kind == fleet.KindUpsert && ev.Name == "newborn" })
	})
	a.Stop() // releases the Lease: pub-b takes over at once

	// pub-b leads, and holds its term back while its watch is.
	require.Eventually(t, func() bool {
		l, err := kubernetes.NewForConfigOrDie(cp.RESTConfig()).CoordinationV1().Leases(e.Name).Get(t.Context(), cfgB.LeaseName, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "pub-b"
	}, 10*time.Second, 10*time.Millisecond)
	letTimePass(3 * time.Second)
	for _, ev := range rec.all() {
		require.Equal(t, "pub-a", ev.Publisher.ID, "nothing from the lagging standby: %s %s", ev.Kind, ev.Name)
	}
	assert.Zero(t, b.Agent.Term())

	hold.release()
	evs := rec.waitFor(t, "pub-b's first snapshot", func(evs []fleet.Event) bool {
		return slices.ContainsFunc(evs, func(ev fleet.Event) bool { return ev.Publisher.ID == "pub-b" && ev.Kind == fleet.KindSnapshot })
	})
	for _, ev := range evs {
		if ev.Publisher.ID != "pub-b" {
			continue
		}
		assert.False(t, ev.Kind == fleet.KindUpsert && ev.Name == "doomed", "the deleted fleet is not revived")
		if ev.Kind == fleet.KindSnapshot {
			var names []string
			for _, f := range ev.Snapshot.Fleets {
				names = append(names, f.Name)
			}
			assert.Equal(t, []string{"newborn"}, names, "the first snapshot lists the new fleet, not the deleted one")
			break
		}
	}
}
