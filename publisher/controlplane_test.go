package publisher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/controlplane"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/publisher"
)

var (
	cp       *controlplane.ControlPlane
	cpErr    error
	waitTime = 20 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// client-go logs through klog; keep test output readable.
	klog.SetSlogLogger(logging.New(testWriter{nil, "klog"}, slog.LevelInfo))
	if ok, _ := controlplane.Available(); ok {
		cp, cpErr = controlplane.Start("")
		if cpErr == nil {
			defer cp.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			cpErr = cp.InstallFleetCRD(ctx)
			cancel()
		}
	}
	return m.Run()
}

// recorder is a Transport keeping every event it accepts, in order.
type recorder struct {
	mu     sync.Mutex
	events []fleet.Event
	down   bool
	signal chan struct{}
}

func newRecorder() *recorder { return &recorder{signal: make(chan struct{})} }

func (r *recorder) Send(_ context.Context, ev fleet.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return fmt.Errorf("bus unavailable")
	}
	r.events = append(r.events, ev)
	close(r.signal)
	r.signal = make(chan struct{})
	return nil
}

func (r *recorder) all() []fleet.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fleet.Event(nil), r.events...)
}

// waitFor waits until pred holds for the events so far and returns them.
func (r *recorder) waitFor(tb testing.TB, what string, pred func([]fleet.Event) bool) []fleet.Event {
	tb.Helper()
	deadline := time.After(waitTime)
	for {
		r.mu.Lock()
		evs := append([]fleet.Event(nil), r.events...)
		ch := r.signal
		r.mu.Unlock()
		if pred(evs) {
			return evs
		}
		select {
		case <-ch:
		case <-deadline:
			tb.Fatalf("waiting for %s: not within %v; %d events: %s", what, waitTime, len(evs), describe(evs))
			return nil
		}
	}
}

func describe(evs []fleet.Event) string {
	s := ""
	for _, e := range evs {
		s += fmt.Sprintf("\n  %s %s/%s %v by %s", e.Kind, e.Namespace, e.Name, e.Version, e.Publisher.ID)
	}
	return s
}

// env is one test's namespace and clients.
type env struct {
	tb  testing.TB
	ns  string
	dyn dynamic.Interface
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	c := controlplane.Require(tb, cp, cpErr)
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	ns := fmt.Sprintf("t%d", time.Now().UnixNano()%1_000_000_000)
	_, err := kube.CoreV1().Namespaces().Create(tb.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(tb, err)
	return &env{tb: tb, ns: ns, dyn: dynamic.NewForConfigOrDie(c.RESTConfig())}
}

func (e *env) fleets(ns string) dynamic.ResourceInterface {
	return e.dyn.Resource(publisher.FleetGVR).Namespace(ns)
}

func (e *env) createFleet(ns, name string, labels map[string]string) {
	e.tb.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1",
		"kind":       "Fleet",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"replicas": int64(3), "scheduling": "Packed",
			"template": map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"containerPort": int64(7654)}}}},
		},
	}}
	obj.SetLabels(labels)
	_, err := e.fleets(ns).Create(e.tb.Context(), obj, metav1.CreateOptions{})
	require.NoError(e.tb, err)
}

func (e *env) patch(ns, name string, patch map[string]any, subresource ...string) {
	e.tb.Helper()
	b, err := json.Marshal(patch)
	require.NoError(e.tb, err)
	_, err = e.fleets(ns).Patch(e.tb.Context(), name, types.MergePatchType, b, metav1.PatchOptions{}, subresource...)
	require.NoError(e.tb, err)
}

func (e *env) setReady(ns, name string, ready int64) {
	e.tb.Helper()
	e.patch(ns, name, map[string]any{"status": map[string]any{"replicas": int64(3), "readyReplicas": ready}}, "status")
}

func (e *env) deleteFleet(ns, name string) {
	e.tb.Helper()
	require.NoError(e.tb, e.fleets(ns).Delete(e.tb.Context(), name, metav1.DeleteOptions{}))
}

// config is a publisher configuration for tests: leader election off
// unless a test turns it on, the Lease in the test's namespace.
func (e *env) config(cluster string) publisher.Config {
	return publisher.Config{
		Cluster:           cluster,
		Namespaces:        []string{e.ns},
		Project:           "unused",
		Topic:             "unused",
		Projection:        publisher.Projection{ExcludeLabels: []string{"noise.example.com/*"}},
		MinInterval:       20 * time.Millisecond,
		SnapshotInterval:  time.Hour,
		LeaseName:         "fleetcast-publisher",
		LeaseNamespace:    e.ns,
		LeaseDuration:     2 * time.Second,
		RenewDeadline:     1500 * time.Millisecond,
		RetryPeriod:       250 * time.Millisecond,
		ID:                "pub-" + cluster,
		ShutdownGrace:     5 * time.Second,
		SnapshotPartBytes: fleet.DefaultSnapshotPartBytes,
		PublisherVersion:  "test",
	}
}

// instance is a running publisher.
type instance struct {
	cancel context.CancelFunc
	done   chan error
	agent  *publisher.Agent
	sender *publisher.Sender
}

func (e *env) start(cfg publisher.Config, kube *rest.Config, t publisher.Transport) *instance {
	e.tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	inst := &instance{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		inst.done <- publisher.Run(ctx, cfg, publisher.Deps{
			Kube:      kube,
			Transport: t,
			Log:       logging.New(testWriter{e.tb, cfg.ID}, slog.LevelInfo),
			Ready: func(a *publisher.Agent, s *publisher.Sender) {
				inst.agent, inst.sender = a, s
				close(ready)
			},
		})
	}()
	select {
	case <-ready:
	case err := <-inst.done:
		e.tb.Fatalf("publisher exited: %v", err)
	case <-time.After(waitTime):
		e.tb.Fatal("publisher did not sync")
	}
	e.tb.Cleanup(inst.stop)
	return inst
}

func (i *instance) stop() {
	i.cancel()
	select {
	case <-i.done:
	case <-time.After(30 * time.Second):
	}
}

// testWriter sends logs to the test log, once the test has not ended.
type testWriter struct {
	tb testing.TB
	id string
}

func (w testWriter) Write(p []byte) (int, error) {
	if os.Getenv("FLEETCAST_TEST_LOGS") == "1" {
		fmt.Fprintf(os.Stderr, "[%s] %s", w.id, p)
	}
	return len(p), nil
}

var _ io.Writer = testWriter{}

func only(evs []fleet.Event, kind fleet.Kind) []fleet.Event {
	var out []fleet.Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func fleetEvents(evs []fleet.Event) []fleet.Event {
	var out []fleet.Event
	for _, e := range evs {
		if e.Kind != fleet.KindSnapshot {
			out = append(out, e)
		}
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var errPartitioned = fmt.Errorf("partitioned from the API server")

// letTimePass waits out d. Tests use it only where the assertion is about
// what does not happen (no publish from a follower, none of an old term)
// or where real time must pass (a quiet period before a leading edge):
// there is no condition to poll for.
func letTimePass(d time.Duration) { <-time.After(d) }
