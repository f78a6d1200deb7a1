// Package kubetest drives Fleets and publishers on a test control plane
// (internal/testenv/controlplane): namespaces with Fleet helpers, and publisher
// instances run in-process with a chosen Transport.
package kubetest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/publisher"
)

// WaitTimeout bounds every wait on the control plane or a publisher.
const WaitTimeout = 30 * time.Second

// Namespace is a fresh namespace of one test, with Fleet helpers.
type Namespace struct {
	tb   testing.TB
	Name string
	Dyn  dynamic.Interface
}

// NewNamespace creates a namespace with a unique name on cp.
func NewNamespace(tb testing.TB, cp *controlplane.ControlPlane) *Namespace {
	tb.Helper()
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	require.NoError(tb, err)
	name := fmt.Sprintf("t%d", time.Now().UnixNano()%1_000_000_000)
	_, err = kube.CoreV1().Namespaces().Create(tb.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(tb, err)
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	require.NoError(tb, err)
	return &Namespace{tb: tb, Name: name, Dyn: dyn}
}

// For returns the namespace bound to another test or benchmark, for one
// that reuses a namespace filled before it.
func (n *Namespace) For(tb testing.TB) *Namespace {
	c := *n
	c.tb = tb
	return &c
}

// Fleets is the Fleet resource of namespace ns.
func (n *Namespace) Fleets(ns string) dynamic.ResourceInterface {
	return n.Dyn.Resource(publisher.FleetGVR).Namespace(ns)
}

// CreateFleet creates a Fleet with 3 replicas in namespace ns.
func (n *Namespace) CreateFleet(ns, name string, labels map[string]string) {
	n.tb.Helper()
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
	_, err := n.Fleets(ns).Create(n.tb.Context(), obj, metav1.CreateOptions{})
	require.NoError(n.tb, err)
}

// Patch merge-patches a Fleet (or its subresource).
func (n *Namespace) Patch(ns, name string, p map[string]any, subresource ...string) {
	n.tb.Helper()
	patch(n, n.Fleets(ns), name, p, subresource...)
}

// SetStatus merge-patches a Fleet's status through the status subresource,
// as the Agones controller does.
func (n *Namespace) SetStatus(ns, name string, status map[string]any) {
	n.tb.Helper()
	n.Patch(ns, name, map[string]any{"status": status}, "status")
}

// DeleteFleet deletes a Fleet.
func (n *Namespace) DeleteFleet(ns, name string) {
	n.tb.Helper()
	require.NoError(n.tb, n.Fleets(ns).Delete(n.tb.Context(), name, metav1.DeleteOptions{}))
}

// Config is a publisher configuration for tests, from the defaults:
// cluster, the namespace watched and holding the Lease, leader election
// off, short intervals and a short Lease.
func Config(cluster, namespace string) publisher.Config {
	c := publisher.DefaultConfig()
	c.Cluster, c.Namespaces, c.Project, c.Topic, c.ID = cluster, []string{namespace}, "unused", "unused", "pub-"+cluster
	c.Projection = publisher.Projection{ExcludeLabels: []string{"noise.example.com/*"}}
	c.MinInterval, c.SnapshotInterval = 20*time.Millisecond, time.Hour
	c.LeaderElect, c.LeaseNamespace = false, namespace
	c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 3*time.Second, 1500*time.Millisecond, 250*time.Millisecond
	c.ShutdownGrace, c.MetricsAddr, c.PublisherVersion = 5*time.Second, "", "test"
	return c
}

// Publisher is a publisher run in-process.
type Publisher struct {
	ID     string // the instance's, cfg.ID
	Agent  *publisher.Agent
	Sender *publisher.Sender
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// StartPublisher runs a publisher until the test ends (or Stop), and waits
// until its informers synced.
func StartPublisher(tb testing.TB, cfg publisher.Config, kube *rest.Config, t publisher.Transport, opts ...func(*publisher.Deps)) *Publisher {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{ID: cfg.ID, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	deps := publisher.Deps{
		Kube:      kube,
		Transport: t,
		Log:       logging.New(LogWriter(cfg.ID), slog.LevelInfo),
		Ready: func(a *publisher.Agent, s *publisher.Sender) {
			p.Agent, p.Sender = a, s
			close(ready)
		},
	}
	for _, o := range opts {
		o(&deps)
	}
	pub, err := publisher.New(cfg, deps)
	if err != nil {
		cancel()
		tb.Fatalf("publisher %s: %v", cfg.ID, err)
	}
	go func() { p.done <- pub.Run(ctx) }()
	select {
	case <-ready:
	case err := <-p.done:
		cancel()
		tb.Fatalf("publisher %s exited: %v", cfg.ID, err)
	case <-time.After(WaitTimeout):
		cancel()
		tb.Fatalf("publisher %s did not sync within %v", cfg.ID, WaitTimeout)
	}
	tb.Cleanup(p.Stop)
	return p
}

// WithClockSkew gives a publisher a clock off by skew: its events' times
// and its terms are stamped that far from the real time.
func WithClockSkew(skew time.Duration) func(*publisher.Deps) {
	return func(d *publisher.Deps) { d.Clock = skewedClock{skew: skew} }
}

// skewedClock is the real clock, read skew off: durations and timers are
// real, the time it tells is not.
type skewedClock struct {
	clock.RealClock
	skew time.Duration
}

func (c skewedClock) Now() time.Time { return time.Now().Add(c.skew) }

func (c skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Stop shuts the publisher down (flushing, releasing its Lease) and waits;
// once, however often it is called.
func (p *Publisher) Stop() {
	p.once.Do(func() {
		p.cancel()
		select {
		case <-p.done:
		case <-time.After(WaitTimeout):
		}
	})
}

// LogWriter is where in-process publishers log: stderr, prefixed, when
// FLEETCAST_TEST_LOGS=1, nowhere otherwise.
func LogWriter(prefix string) logWriter { return logWriter(prefix) }

type logWriter string

func (w logWriter) Write(p []byte) (int, error) {
	if os.Getenv("FLEETCAST_TEST_LOGS") == "1" {
		fmt.Fprintf(os.Stderr, "[%s] %s", string(w), p)
	}
	return len(p), nil
}
