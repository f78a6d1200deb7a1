package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/publisher/inform"
)

// Deps are what a Publisher needs from outside.
type Deps struct {
	// Kube reaches the cluster's API server.
	Kube *rest.Config
	// Transport delivers events (pubsubtopic.Transport in production);
	// none when Config.Publish is false.
	Transport Transport
	// Log receives the publisher's logs.
	Log *slog.Logger
	// Registry receives the metrics; a new one when nil.
	Registry *prometheus.Registry
	// Ready, if set, is called with the Agent once the informers synced
	// (tests use it to observe the publisher).
	Ready func(*Agent, *Sender)
	// Clock stamps the events and the terms and times everything;
	// clock.RealClock when nil (tests give a publisher a skewed one).
	Clock Clock
}

// Publisher is one publisher instance: New wires its parts, Run runs
// them.
type Publisher struct {
	cfg      Config
	log      *slog.Logger
	clock    Clock
	registry *prometheus.Registry
	metrics  *Metrics
	agent    *Agent
	sender   *Sender
	dyn      dynamic.Interface
	meta     metadata.Interface
	kube     kubernetes.Interface
	// joiner holds the informers, once started.
	joiner *joiner
	terms  *TermStore
	ready  func(*Agent, *Sender)
	// synced: the informers' caches are full (readiness).
	synced atomic.Bool
	// sources are the optional informers, for /readyz's detail.
	sources atomic.Pointer[[]*source]
	// leadMu orders a term's start against its stop.
	leadMu sync.Mutex
	// store and certs serve InformationService (Config.GRPCAddr): the
	// fleets as the informers show them, and the TLS files (nil:
	// plaintext).
	store *inform.Store
	certs *inform.Certs
}

// New builds a publisher from cfg and deps without starting anything.
func New(cfg Config, deps Deps) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("publisher configuration: %w", err)
	}
	p := &Publisher{cfg: cfg, log: deps.Log, clock: deps.Clock, registry: deps.Registry, ready: deps.Ready}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	if p.registry == nil {
		p.registry = prometheus.NewRegistry()
		for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
			if err := p.registry.Register(c); err != nil {
				return nil, fmt.Errorf("register runtime metrics: %w", err)
			}
		}
	}
	var err error
	if p.dyn, err = dynamic.NewForConfig(deps.Kube); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	if p.kube, err = kubernetes.NewForConfig(deps.Kube); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if p.meta, err = metadata.NewForConfig(deps.Kube); err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	if p.metrics, err = NewMetrics(p.registry, p.pendingFleets); err != nil {
		return nil, err
	}
	if cfg.Publish && deps.Transport == nil {
		return nil, errors.New("publisher: Deps.Transport is required to publish")
	}
	var local Local
	if cfg.GRPCAddr != "" {
		p.store = inform.NewStore(cfg.Cluster, fleet.Publisher{ID: cfg.ID, Version: cfg.PublisherVersion}, cfg.ClusterLabels, p.clock.Now)
		p.store.SetAllocatorEndpoint(cfg.AllocatorEndpoint)
		local = p.store
		if !cfg.GRPCPlaintext {
			if p.certs, err = inform.NewCerts(cfg.TLSCertFile, cfg.TLSPrivateKeyFile, cfg.ClientCAFile, p.clock.Now, p.log); err != nil {
				return nil, err
			}
		}
	}
	p.sender = NewSender(SenderConfig{}, deps.Transport, p.clock, p.metrics, p.log)
	p.agent = NewAgent(AgentConfig{
		Cluster:           cfg.Cluster,
		Publisher:         fleet.Publisher{ID: cfg.ID, Version: cfg.PublisherVersion},
		MinInterval:       cfg.MinInterval,
		ClusterLabels:     cfg.ClusterLabels,
		AllocatorEndpoint: cfg.AllocatorEndpoint,
		SnapshotPartBytes: cfg.SnapshotPartBytes,
		RefreshInterval:   cfg.RefreshInterval,
		Local:             local,
	}, p.clock, p.sender, p.metrics, p.log)
	// A version whose event Pub/Sub refused is never vouched for in a
	// snapshot.
	p.sender.OnRefused(p.agent.Unvouch)
	p.terms = NewTermStore(p.kube.CoordinationV1(), cfg.LeaseNamespace, cfg.LeaseName, p.clock)
	return p, nil
}

// pendingFleets is the gauge of the fleets with work pending anywhere.
func (p *Publisher) pendingFleets() float64 {
	keys := map[string]struct{}{}
	p.agent.PendingKeys(keys)
	p.sender.PendingKeys(keys)
	return float64(len(keys))
}

// Run runs the publisher until ctx ends, then flushes what is pending for
// at most cfg.ShutdownGrace and releases the Lease.
func (p *Publisher) Run(ctx context.Context) error {
	// The sender outlives ctx: it must deliver what the shutdown flushes.
	sendCtx, stopSender := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopSender()
	wg.Go(func() { p.sender.Run(sendCtx) })

	stopOps, err := p.serveOps(ctx)
	if err != nil {
		return err
	}
	defer stopOps()
	// Listening first fails the start on a bad address; serving waits for
	// the informers, so that no answer is partial.
	info, err := p.listenInformation()
	if err != nil {
		return err
	}
	defer info.Shutdown(context.WithoutCancel(ctx))
	stopInformers, j, err := startInformers(ctx, p.cfg, p.dyn, p.agent, p.metrics, p.clock, p.log)
	if err != nil {
		return err
	}
	p.joiner = j
	p.sources.Store(&j.sources)
	defer stopInformers()
	p.synced.Store(true)
	p.log.Info("fleet informers synced", "fleets", p.agent.Fleets(), "namespaces", p.cfg.Namespaces, "labelSelector", p.cfg.LabelSelector)
	if p.ready != nil {
		p.ready(p.agent, p.sender)
	}

	served := p.serveInformation(sendCtx, info, &wg)

	// Publishing lasts until the shutdown has flushed, not until ctx ends.
	pubCtx, stopPublishing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPublishing()
	if p.cfg.Publish {
		if err := p.startPublishing(pubCtx, &wg); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	p.log.Info("shutting down: publishing what is pending", "grace", p.cfg.ShutdownGrace.String())
	p.agent.Flush()
	graceCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.ShutdownGrace)
	defer cancel()
	if err := p.sender.Flush(graceCtx); err != nil {
		p.log.Warn("shutdown grace period over with events unsent; the next writer republishes every fleet", logging.KeyError, err.Error())
	}
	stopPublishing() // releases the Lease
	return nil
}

// listenInformation listens for InformationService when Config.GRPCAddr
// asks for it; nil (whose Shutdown does nothing) otherwise.
func (p *Publisher) listenInformation() (*inform.Server, error) {
	if p.store == nil {
		return nil, nil
	}
	return inform.Listen(p.cfg.GRPCAddr, p.store, p.certs, fleetapi.Options{StaleAfter: 3 * p.cfg.SnapshotInterval}, p.log)
}

// serveInformation serves InformationService, if info is set, with its
// heartbeats until ctx ends; the channel says why serving stopped.
func (p *Publisher) serveInformation(ctx context.Context, info *inform.Server, wg *sync.WaitGroup) <-chan error {
	served := make(chan error, 1)
	if info != nil {
		wg.Go(func() { p.heartbeats(ctx) })
		go func() { served <- info.Serve() }()
	}
	return served
}

// heartbeats keeps the InformationService's cluster fresh: a heartbeat
// now, and one every snapshot interval, until ctx ends.
func (p *Publisher) heartbeats(ctx context.Context) {
	p.store.Heartbeat()
	t := p.clock.NewTicker(p.cfg.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			p.store.Heartbeat()
		}
	}
}

// startPublishing starts leading: through the Lease's election, or at once
// without one. It stops when ctx ends.
func (p *Publisher) startPublishing(ctx context.Context, wg *sync.WaitGroup) error {
	if !p.cfg.LeaderElect {
		wg.Go(func() {
			p.lead(ctx, "")
			p.stopTerm()
		})
		return nil
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: p.cfg.LeaseName, Namespace: p.cfg.LeaseNamespace},
			Client:     p.kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: p.cfg.ID},
		},
		LeaseDuration:   p.cfg.LeaseDuration,
		RenewDeadline:   p.cfg.RenewDeadline,
		RetryPeriod:     p.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            p.cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { p.lead(lctx, p.cfg.ID) },
			OnStoppedLeading: p.stopTerm,
			OnNewLeader: func(id string) {
				p.log.Info("cluster writer", "leader", id, "self", id == p.cfg.ID)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	wg.Go(func() {
		// A deposed leader becomes a candidate again.
		for ctx.Err() == nil {
			elector.Run(ctx)
		}
	})
	return nil
}

// lead takes a term and publishes under it — snapshots and refreshes on
// their intervals — until ctx ends (the Lease is lost, or shutdown).
func (p *Publisher) lead(ctx context.Context, holder string) {
	term, ok := takeTerm(ctx, p.terms, holder, p.clock, p.log)
	if !ok || !p.catchUp(ctx) {
		return
	}
	p.leadMu.Lock()
	if ctx.Err() == nil {
		p.agent.StartTerm(term)
	}
	p.leadMu.Unlock()
	snapshots := p.clock.NewTicker(p.cfg.SnapshotInterval)
	defer snapshots.Stop()
	var refresh <-chan time.Time
	if p.cfg.RefreshInterval > 0 {
		t := p.clock.NewTicker(RefreshTick(p.cfg.RefreshInterval))
		defer t.Stop()
		refresh = t.C()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-snapshots.C():
			p.agent.Snapshot()
		case <-refresh:
			p.agent.Refresh()
		}
	}
}

func (p *Publisher) stopTerm() {
	p.leadMu.Lock()
	defer p.leadMu.Unlock()
	p.agent.StopTerm()
}

// takeTerm retries until it has a term, the lease is lost, or ctx ends.
func takeTerm(ctx context.Context, terms *TermStore, holder string, clk Clock, log *slog.Logger) (int64, bool) {
	// 100 ms doubling to 5 s, ±20 %.
	b := wait.Backoff{Duration: 80 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: 4 * time.Second}
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
		case <-clk.After(b.Step()):
		}
	}
}

// startInformers starts the informers of each watched namespace (Fleets,
// their GameServerSets, FleetAutoscalers), waits for the fleets' caches,
// and for each optional one until it lists or fails (see source), and
// returns a function stopping them and the optional sources.
func startInformers(ctx context.Context, cfg Config, dyn dynamic.Interface, agent *Agent, m *Metrics, clk Clock, log *slog.Logger) (func(), *joiner, error) {
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	stop := make(chan struct{})
	j := &joiner{cfg: cfg, agent: agent, m: m, log: log}
	var factories []dynamicinformer.DynamicSharedInformerFactory
	var syncs []cache.InformerSynced
	for _, ns := range namespaces {
		inf, fs, err := newNSInformers(cfg, dyn, ns)
		if err != nil {
			return nil, nil, err
		}
		if err := j.wire(inf); err != nil {
			return nil, nil, err
		}
		j.informers = append(j.informers, inf)
		factories = append(factories, fs...)
		syncs = append(syncs, inf.fleets.HasSynced)
		j.sources = append(j.sources, inf.setsSource, inf.scalersSource)
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
		return nil, nil, fmt.Errorf("fleet informers did not sync (is the publisher allowed to list fleets?): %w", context.Cause(ctx))
	}
	for _, src := range j.sources {
		src.await(ctx, clk)
	}
	if ctx.Err() != nil {
		stopAll()
		return nil, nil, context.Cause(ctx)
	}
	for _, inf := range j.informers {
		for _, src := range []*source{inf.setsSource, inf.scalersSource} {
			go src.follow(stop, m, log, func() { j.projectAll(inf) })
		}
	}
	j.countMisconfigured()
	return stopAll, j, nil
}

// newNSInformers makes the informers of one namespace, and their
// factories.
func newNSInformers(cfg Config, dyn dynamic.Interface, ns string) (*nsInformers, []dynamicinformer.DynamicSharedInformerFactory, error) {
	// The label selector picks fleets; their sets and autoscalers carry
	// no fleet labels, and are joined by name.
	fleets := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, func(o *metav1.ListOptions) {
		o.LabelSelector = cfg.LabelSelector
	})
	others := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
	inf := &nsInformers{
		namespace: ns,
		fleets:    fleets.ForResource(FleetGVR).Informer(),
		sets:      others.ForResource(GameServerSetGVR).Informer(),
		scalers:   others.ForResource(FleetAutoscalerGVR).Informer(),
	}
	var err error
	if inf.setsSource, err = newSource(GameServerSetGVR.Resource, ns, "rollout", inf.sets); err != nil {
		return nil, nil, err
	}
	if inf.scalersSource, err = newSource(FleetAutoscalerGVR.Resource, ns, "autoscalers", inf.scalers); err != nil {
		return nil, nil, err
	}
	return inf, []dynamicinformer.DynamicSharedInformerFactory{fleets, others}, nil
}

// serveOps serves /metrics, /healthz and /readyz on cfg.MetricsAddr
// (nowhere when empty); the function returned stops it.
func (p *Publisher) serveOps(ctx context.Context) (func(), error) {
	if p.cfg.MetricsAddr == "" {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := p.readiness(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		// Ready all the same without an optional source: its fleets
		// publish, with that part unknown. Said here, line by line.
		_, _ = w.Write([]byte("ok\n"))
		if sources := p.sources.Load(); sources != nil {
			for _, src := range *sources {
				if err := src.unavailable(); err != nil {
					fmt.Fprintf(w, "degraded: cannot list %s (%v): its fleets' %s is unknown\n", src, err, src.what)
				}
			}
		}
	})
	l, err := net.Listen("tcp", p.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on --metrics-addr %s: %w", p.cfg.MetricsAddr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("operations server stopped", logging.KeyError, err.Error())
		}
	}()
	p.log.Info("serving /metrics, /healthz and /readyz", "addr", l.Addr().String())
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}, nil
}

// readiness is ready once the informers synced, unless this instance
// leads and cannot publish.
func (p *Publisher) readiness() error {
	switch {
	case !p.synced.Load():
		return errors.New("fleet informers not synced")
	case p.agent.Term() != 0 && !p.sender.Healthy():
		return errors.New("leader, but publishing fails")
	}
	return nil
}
