package allocator

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleetapi"
	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
)

// Service is Agones' AllocationService over fleetcast's view: it places
// each request on the fleets whose game servers can take it (Parse, Rank)
// and forwards it to their clusters' allocators (Forwarder) until one
// allocates.
type Service struct {
	pb.UnimplementedAllocationServiceServer
	view     *fleetapi.Service
	fwd      *Forwarder
	policies atomic.Pointer[[]Policy]
	log      *slog.Logger
	metrics  *Metrics
}

// NewService returns a Service placing by view with policies, forwarding
// through fwd. metrics may be nil.
func NewService(view *fleetapi.Service, fwd *Forwarder, policies []Policy, log *slog.Logger, metrics *Metrics) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{view: view, fwd: fwd, log: log, metrics: metrics}
	s.SetPolicies(policies)
	return s
}

// SetPolicies replaces the policies; requests in flight keep theirs.
func (s *Service) SetPolicies(p []Policy) { s.policies.Store(&p) }

// Allocate places and forwards one request. Its errors are statuses with
// the codes Agones' allocator answers, so that clients' retries work as
// they did: INVALID_ARGUMENT for a request it cannot read,
// RESOURCE_EXHAUSTED when no cluster has a game server for it (or this
// instance is busy), UNAVAILABLE when the view or every candidate's
// allocator cannot be reached, DEADLINE_EXCEEDED when the caller's time
// ran out, and a forwarded call's own status when it may have allocated.
func (s *Service) Allocate(ctx context.Context, in *pb.AllocationRequest) (*pb.AllocationResponse, error) {
	start := time.Now()
	resp, tries, err := s.allocate(ctx, in)
	s.metrics.observe(tries, err, time.Since(start))
	return resp, err
}

func (s *Service) allocate(ctx context.Context, in *pb.AllocationRequest) (*pb.AllocationResponse, []Try, error) {
	r, err := Parse(in)
	if err != nil {
		return nil, nil, err
	}
	cands, advertised, err := s.place(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	resp, tries, err := s.fwd.Allocate(ctx, in, cands, func(c string) string { return advertised[c] })
	if err != nil {
		s.log.InfoContext(ctx, "allocation: not allocated", "namespace", r.Namespace, "candidates", len(cands), "tries", len(tries),
			"code", status.Code(err).String(), "reason", status.Convert(err).Message())
	}
	return resp, tries, err
}

// place ranks the candidates on a snapshot of the view, in one of the
// view's heavy slots (fleetapi.Service.Admit): it reads every fleet.
func (s *Service) place(ctx context.Context, r Request) ([]Candidate, map[string]string, error) {
	release, err := s.view.Admit(ctx)
	if err != nil {
		return nil, nil, statusOf(err)
	}
	defer release()
	var cands []Candidate
	advertised := map[string]string{}
	err = s.view.Read(ctx, func(read *fleetapi.Read) error {
		cands = Rank(read, r, Applicable(r, *s.policies.Load()), s.fwd.opts.MaxTries, nil)
		for _, c := range cands {
			if cl, err := read.Cluster(c.Policy.Cluster); err == nil {
				advertised[c.Policy.Cluster] = cl.AllocatorEndpoint
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, statusOf(err)
	}
	return cands, advertised, nil
}

// statusOf is the status of a view's error.
func statusOf(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	var code codes.Code
	switch fleetapi.CodeOf(err) {
	case fleetapi.ResourceExhausted:
		code = codes.ResourceExhausted
	case fleetapi.Unavailable:
		code = codes.Unavailable
	default:
		code = codes.Internal
	}
	return status.Errorf(code, "fleetcast's view: %v", err)
}

// Metrics are the allocation service's Prometheus metrics.
type Metrics struct {
	// Allocations counts requests by the cluster that allocated ("" when
	// none did) and outcome (allocated, or the status code's name).
	Allocations *prometheus.CounterVec
	// Tries counts the tries of each request, by outcome.
	Tries *prometheus.CounterVec
	// TriesPerAllocation is how many clusters each request tried.
	TriesPerAllocation prometheus.Histogram
	// Latency is each request's time, by outcome.
	Latency *prometheus.HistogramVec
	// FailedOver counts requests allocated after a first try that did not
	// allocate: what the failover alert watches.
	FailedOver prometheus.Counter
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetcast_allocator_allocations_total",
			Help: "Allocation requests by the cluster that allocated (empty: none) and outcome (allocated, or the gRPC status)."}, []string{"cluster", "outcome"}),
		Tries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetcast_allocator_tries_total",
			Help: "Requests forwarded to a cluster's allocator, by cluster and outcome (allocated, exhausted, refused, unreachable, certificate_refused, no_endpoint, failed)."}, []string{"cluster", "outcome"}),
		TriesPerAllocation: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetcast_allocator_tries_per_allocation",
			Help: "Clusters tried per allocation request.", Buckets: []float64{0, 1, 2, 3, 4, 5, 10}}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleetcast_allocator_allocation_seconds",
			Help: "Time to answer an allocation request, by outcome.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"outcome"}),
		FailedOver: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetcast_allocator_failed_over_total",
			Help: "Allocations made by another cluster than the first tried, after it did not allocate."}),
	}
	reg.MustRegister(m.Allocations, m.Tries, m.TriesPerAllocation, m.Latency, m.FailedOver)
	return m
}

func (m *Metrics) observe(tries []Try, err error, took time.Duration) {
	if m == nil {
		return
	}
	outcome, cluster := Allocated, ""
	if err != nil {
		outcome = status.Code(err).String()
	} else if len(tries) > 0 {
		cluster = tries[len(tries)-1].Cluster
		if len(tries) > 1 {
			m.FailedOver.Inc()
		}
	}
	m.Allocations.WithLabelValues(cluster, outcome).Inc()
	m.TriesPerAllocation.Observe(float64(len(tries)))
	m.Latency.WithLabelValues(outcome).Observe(took.Seconds())
	for _, t := range tries {
		m.Tries.WithLabelValues(t.Cluster, t.Outcome).Inc()
	}
}
