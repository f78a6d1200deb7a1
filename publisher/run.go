package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
)

// Deps are what Run needs from outside.
type Deps struct {
	// Kube reaches the cluster's API server.
	Kube *rest.Config
	// Transport delivers events (pubsubtopic.Transport in production).
	Transport Transport
	// Log receives the publisher's logs.
	Log *slog.Logger
	// Registry receives the metrics; a new one when nil.
	Registry *prometheus.Registry
	// Ready, if set, is called with the Agent once the informers synced
	// (tests use it to observe the publisher).
	Ready func(*Agent, *Sender)
	// Clock stamps the events and the terms; RealClock when nil (tests
	// give a publisher a skewed one).
	Clock Clock
}

// Run runs the publisher until ctx ends, then flushes what is pending for
// at most cfg.ShutdownGrace and releases the Lease.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	log := deps.Log
	var clk Clock = RealClock{}
	if deps.Clock != nil {
		clk = deps.Clock
	}
	reg := deps.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
			if err := reg.Register(c); err != nil {
				return fmt.Errorf("register runtime metrics: %w", err)
			}
		}
	}
	dyn, err := dynamic.NewForConfig(deps.Kube)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(deps.Kube)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}

	var agent *Agent
	var sender *Sender
	metrics, err := NewMetrics(reg, func() float64 {
		keys := map[string]struct{}{}
		agent.PendingKeys(keys)
		sender.PendingKeys(keys)
		return float64(len(keys))
	})
	if err != nil {
		return err
	}
	sender = NewSender(SenderConfig{}, deps.Transport, clock.RealClock{}, metrics, log)
	agent = NewAgent(AgentConfig{
		Cluster:           cfg.Cluster,
		Publisher:         fleet.Publisher{ID: cfg.ID, Version: cfg.PublisherVersion},
		MinInterval:       cfg.MinInterval,
		ClusterLabels:     cfg.ClusterLabels,
		SnapshotPartBytes: cfg.SnapshotPartBytes,
		RefreshInterval:   cfg.RefreshInterval,
	}, clk, sender, metrics, log)
	// A version whose event Pub/Sub refused is never vouched for in a
	// snapshot.
	sender.OnRefused(agent.Unvouch)

	// The sender outlives ctx: it must deliver what the shutdown flushes.
	sendCtx, stopSender := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopSender()
	wg.Go(func() { sender.Run(sendCtx) })

	var synced atomic.Bool
	if cfg.MetricsAddr != "" {
		srv, err := serveOps(cfg.MetricsAddr, reg, func() error {
			switch {
			case !synced.Load():
				return errors.New("fleet informers not synced")
			case agent.Term() != 0 && !sender.Healthy():
				return errors.New("leader, but publishing fails")
			}
			return nil
		}, log)
		if err != nil {
			return err
		}
		defer func() {
			shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdownCtx)
		}()
	}

	stopInformers, err := startInformers(ctx, cfg, dyn, agent, metrics, log)
	if err != nil {
		return err
	}
	defer stopInformers()
	synced.Store(true)
	log.Info("fleet informers synced", "fleets", agent.Fleets(), "namespaces", cfg.Namespaces, "labelSelector", cfg.LabelSelector)
	if deps.Ready != nil {
		deps.Ready(agent, sender)
	}

	// Publishing lasts until the shutdown has flushed, not until ctx ends.
	pubCtx, stopPublishing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPublishing()
	terms := NewTermStore(kube.CoordinationV1(), cfg.LeaseNamespace, cfg.LeaseName, clk.Now)
	var leadMu sync.Mutex
	lead := func(lctx context.Context, holder string) {
		term, ok := takeTerm(lctx, terms, holder, log)
		if !ok {
			return
		}
		leadMu.Lock()
		if lctx.Err() == nil {
			agent.StartTerm(term)
		}
		leadMu.Unlock()
		ticker := time.NewTicker(cfg.SnapshotInterval)
		defer ticker.Stop()
		var refresh <-chan time.Time
		if cfg.RefreshInterval > 0 {
			t := time.NewTicker(RefreshTick(cfg.RefreshInterval))
			defer t.Stop()
			refresh = t.C
		}
		for {
			select {
			case <-lctx.Done():
				return
			case <-ticker.C:
				agent.Snapshot()
			case <-refresh:
				agent.Refresh()
			}
		}
	}
	stopTerm := func() {
		leadMu.Lock()
		defer leadMu.Unlock()
		agent.StopTerm()
	}
	if cfg.LeaderElect {
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Name: cfg.LeaseName, Namespace: cfg.LeaseNamespace},
				Client:     kube.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.ID},
			},
			LeaseDuration:   cfg.LeaseDuration,
			RenewDeadline:   cfg.RenewDeadline,
			RetryPeriod:     cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            cfg.LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) { lead(lctx, cfg.ID) },
				OnStoppedLeading: stopTerm,
				OnNewLeader: func(id string) {
					log.Info("cluster writer", "leader", id, "self", id == cfg.ID)
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		wg.Go(func() {
			// A deposed leader becomes a candidate again.
			for pubCtx.Err() == nil {
				elector.Run(pubCtx)
			}
		})
	} else {
		wg.Go(func() {
			lead(pubCtx, "")
			stopTerm()
		})
	}

	<-ctx.Done()
	log.Info("shutting down: publishing what is pending", "grace", cfg.ShutdownGrace.String())
	agent.Flush()
	graceCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
	defer cancel()
	if err := sender.Flush(graceCtx); err != nil {
		log.Warn("shutdown grace period over with events unsent; the next writer republishes every fleet", logging.KeyError, err.Error())
	}
	stopPublishing() // releases the Lease
	return nil
}

// takeTerm retries until it has a term, the lease is lost, or ctx ends.
func takeTerm(ctx context.Context, terms *TermStore, holder string, log *slog.Logger) (int64, bool) {
	wait := 100 * time.Millisecond
	for {
		term, err := terms.Next(ctx, holder)
		if err == nil {
			return term, true
		}
		if errors.Is(err, ErrNotHolder) || ctx.Err() != nil {
			log.Warn("no term taken", logging.KeyError, err.Error())
			return 0, false
		}
		log.Warn("cannot take a term yet; retrying", logging.KeyError, err.Error())
		select {
		case <-ctx.Done():
			return 0, false
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// startInformers starts the informers of each watched namespace (Fleets,
// their GameServerSets, FleetAutoscalers), waits for their caches, and
// returns a function stopping them.
func startInformers(ctx context.Context, cfg Config, dyn dynamic.Interface, agent *Agent, m *Metrics, log *slog.Logger) (func(), error) {
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	stop := make(chan struct{})
	j := &joiner{cfg: cfg, agent: agent, m: m, log: log}
	var factories []dynamicinformer.DynamicSharedInformerFactory
	var syncs []cache.InformerSynced
	for _, ns := range namespaces {
		// The label selector picks fleets; their sets and autoscalers
		// carry no fleet labels, and are joined by name.
		fleets := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, func(o *metav1.ListOptions) {
			o.LabelSelector = cfg.LabelSelector
		})
		others := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
		inf := &nsInformers{
			fleets:  fleets.ForResource(FleetGVR).Informer(),
			sets:    others.ForResource(GameServerSetGVR).Informer(),
			scalers: others.ForResource(FleetAutoscalerGVR).Informer(),
		}
		if err := j.wire(inf); err != nil {
			return nil, err
		}
		j.informers = append(j.informers, inf)
		factories = append(factories, fleets, others)
		syncs = append(syncs, inf.fleets.HasSynced, inf.sets.HasSynced, inf.scalers.HasSynced)
	}
	for _, f := range factories {
		f.Start(stop)
	}
	stopAll := func() {
		close(stop)
		for _, f := range factories {
			f.Shutdown()
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), syncs...) {
		stopAll()
		return nil, fmt.Errorf("informers did not sync (is the publisher allowed to list fleets, gameserversets and fleetautoscalers?): %w", context.Cause(ctx))
	}
	j.countMisconfigured()
	return stopAll, nil
}

// serveOps serves /metrics, /healthz and /readyz on addr.
func serveOps(addr string, reg *prometheus.Registry, ready func() error, log *slog.Logger) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --metrics-addr %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("operations server stopped", logging.KeyError, err.Error())
		}
	}()
	log.Info("serving /metrics, /healthz and /readyz", "addr", l.Addr().String())
	return srv, nil
}
