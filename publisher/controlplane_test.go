package publisher_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/logging"
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
	klog.SetSlogLogger(logging.New(kubetest.LogWriter("klog"), slog.LevelInfo))
	cp, cpErr = controlplane.StartWithAgonesCRDs()
	if cp != nil {
		defer cp.Stop()
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
	return r.waitForWithin(tb, waitTime, what, pred)
}

// waitForWithin is waitFor, giving up after d.
func (r *recorder) waitForWithin(tb testing.TB, d time.Duration, what string, pred func([]fleet.Event) bool) []fleet.Event {
	tb.Helper()
	deadline := time.After(d)
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
			tb.Fatalf("waiting for %s: not within %v; %d events: %s", what, d, len(evs), describe(evs))
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

func newNamespace(tb testing.TB) *kubetest.Namespace {
	tb.Helper()
	return kubetest.NewNamespace(tb, controlplane.Require(tb, cp, cpErr))
}

func setReady(n *kubetest.Namespace, ns, name string, ready int64) {
	n.SetStatus(ns, name, map[string]any{"replicas": int64(3), "readyReplicas": ready})
}

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
