package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/fleetcast/fleetcast/logging"
)

// source is an optional informer of one namespace: GameServerSets (a
// fleet's rollout) or FleetAutoscalers. While it cannot list — the
// publisher's Role lacks the resource (an upgrade that did not update
// RBAC, a hand-made Role), or the cluster lacks its CRD — fleets publish
// without what it adds, marked unknown, instead of waiting for it; the
// informer keeps retrying (client-go's backoff, at most 30 s apart), and
// once it lists every fleet of the namespace is projected again.
type source struct {
	resource, namespace string
	// what names the part of a fleet's state it adds, in a fleet's
	// degraded text ("rollout", "autoscalers").
	what     string
	informer cache.SharedIndexInformer

	settled chan struct{} // closed at its first error, if any
	once    sync.Once
	mu      sync.Mutex
	err     error // the last error listing it, before it synced
}

func newSource(resource, namespace, what string, inf cache.SharedIndexInformer) (*source, error) {
	s := &source{resource: resource, namespace: namespace, what: what, informer: inf, settled: make(chan struct{})}
	err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		s.mu.Lock()
		if !inf.HasSynced() {
			s.err = err
		}
		s.mu.Unlock()
		s.once.Do(func() { close(s.settled) })
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	if err != nil {
		return nil, fmt.Errorf("%s informer: %w", resource, err)
	}
	return s, nil
}

// unavailable returns why the source has not listed, or nil once it has.
func (s *source) unavailable() error {
	if s.informer.HasSynced() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	return errors.New("not listed yet")
}

// sourceWait bounds how long the publisher waits at its start for an
// optional source that neither lists nor fails (an API server that
// answers slowly) before it publishes without it.
const sourceWait = 30 * time.Second

// await waits until the source listed or failed once, ctx ends, or
// sourceWait passes.
func (s *source) await(ctx context.Context, clk Clock) {
	t := clk.NewTimer(sourceWait)
	defer t.Stop()
	synced := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		if cache.WaitForCacheSync(stop, s.informer.HasSynced) {
			close(synced)
		}
	}()
	select {
	case <-synced:
	case <-s.settled:
	case <-ctx.Done():
	case <-t.C():
	}
}

// String describes the source for logs and /readyz.
func (s *source) String() string {
	ns := s.namespace
	if ns == "" {
		ns = "every namespace"
	}
	return s.resource + " in " + ns
}

// follow reports a source that could not list, at ERROR once, and once it
// lists calls listed — the fleets projected before it listed are projected
// again — and says so if it had failed; it returns when stop closes.
func (s *source) follow(stop <-chan struct{}, m *Metrics, log *slog.Logger, listed func()) {
	gauge := m.SourceListed.WithLabelValues(s.resource, s.namespace)
	err := s.unavailable()
	if err == nil {
		gauge.Set(1)
		listed()
		return
	}
	gauge.Set(0)
	log.Error("cannot list "+s.String()+": its fleets publish with their "+s.what+" unknown until it can; "+
		"does the publisher's Role allow get, list and watch on it, and is Agones' CRD installed?",
		"resource", s.resource, "namespace", s.namespace, logging.KeyError, err.Error())
	if !cache.WaitForCacheSync(stop, s.informer.HasSynced) {
		return
	}
	gauge.Set(1)
	listed()
	log.Info("listing "+s.String()+" again: its fleets' "+s.what+" is known", "resource", s.resource, "namespace", s.namespace)
}
