package fleetapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
)

// Partition is one partition of a deployment too large for one view
// (docs/capacity.md): the clusters it holds and the API answering for
// them — its query service over HTTP (fleetclient.Client), or a Service
// in the same process.
type Partition struct {
	// Name says which partition it is in logs and errors (its URL).
	Name     string
	Clusters []string
	API      API
}

// DefaultPartitionTimeout bounds how long a merged answer waits for one
// partition: one that has not answered by then is reported unavailable
// (its clusters stale), and the others' answer goes out.
const DefaultPartitionTimeout = 2 * time.Second

// DefaultPartitionsHeavySlots is how many lists, placements and label
// values a merging instance works on at once. A merge mostly waits for
// the partitions, so more than a view's one a processor; but each holds
// every partition's page (17 partitions × a page of 1 000 is some 40 MB
// of fleets), so few enough that they fit a 512 MiB instance together.
const DefaultPartitionsHeavySlots = 4

// PartitionsOptions configure Partitions; zero fields take their
// defaults.
type PartitionsOptions struct {
	// Timeout bounds each partition's answer (DefaultPartitionTimeout).
	Timeout time.Duration
	// StaleAfter is the partitions' (DefaultStaleAfter): it words why a
	// placement leaves out stale clusters' fleets.
	StaleAfter time.Duration
	// HeavySlots, HeavyQueue and HeavyWait bound the heavy reads the
	// merging instance works on at once (Options'; HeavySlots
	// DefaultPartitionsHeavySlots).
	HeavySlots int
	HeavyQueue int
	HeavyWait  time.Duration
	// MaxWatches bounds the merged watches served at once, each a stream
	// of every partition (DefaultMaxWatches).
	MaxWatches int
	// Log receives the partitions that did not answer; none when nil.
	Log *slog.Logger
}

// Partitions answers the query API over every partition of a deployment
// as one view of all their clusters would: a page of fleets in the same
// order, its page token valid across partitions (it names a position in
// the query's order, not a partition), totals and label values summed,
// placements ranked across every partition by the same draw, clusters
// listed together. A partition that does not answer in time, or fails,
// does not fail the answer: its clusters are listed stale (as it last
// described them), and an answer that would have held their fleets
// names them in UnavailableClusters.
//
// Each partition is asked the query narrowed to its clusters
// (Query.Narrowed), at once and concurrently: an answer costs the
// slowest partition's time, not their sum. Its methods are safe for
// concurrent use.
type Partitions struct {
	parts     []Partition
	byCluster map[string]int
	opts      PartitionsOptions
	admit     *admission
	watches   *semaphore.Weighted
	// last holds each partition's clusters as it last listed them, to
	// describe them (stale) while it does not answer.
	last []atomic.Pointer[[]Cluster]
}

var _ API = (*Partitions)(nil)

// NewPartitions returns the API over parts. Each partition holds at least
// one cluster, and no cluster is in two.
func NewPartitions(parts []Partition, opts PartitionsOptions) (*Partitions, error) {
	if len(parts) == 0 {
		return nil, errors.New("no partition")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultPartitionTimeout
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = DefaultStaleAfter
	}
	if opts.MaxWatches <= 0 {
		opts.MaxWatches = DefaultMaxWatches
	}
	if opts.HeavySlots <= 0 {
		opts.HeavySlots = DefaultPartitionsHeavySlots
	}
	p := &Partitions{byCluster: map[string]int{}, opts: opts, last: make([]atomic.Pointer[[]Cluster], len(parts)), watches: semaphore.NewWeighted(int64(opts.MaxWatches)),
		admit: newAdmission(Options{HeavySlots: opts.HeavySlots, HeavyQueue: opts.HeavyQueue, HeavyWait: opts.HeavyWait})}
	for i, part := range parts {
		if part.API == nil {
			return nil, fmt.Errorf("partition %s: no API", part.Name)
		}
		if len(part.Clusters) == 0 {
			return nil, fmt.Errorf("partition %s: no cluster", part.Name)
		}
		part.Clusters = slices.Clone(part.Clusters)
		slices.Sort(part.Clusters)
		part.Clusters = slices.Compact(part.Clusters)
		for _, c := range part.Clusters {
			if err := fleet.ValidateClusterName(c); err != nil {
				return nil, fmt.Errorf("partition %s: %w", part.Name, err)
			}
			if j, dup := p.byCluster[c]; dup {
				return nil, fmt.Errorf("cluster %s is in partitions %s and %s", c, parts[j].Name, part.Name)
			}
			p.byCluster[c] = i
		}
		p.parts = append(p.parts, part)
	}
	return p, nil
}

// Admit waits for a slot to do a heavy read in, as Service.Admit: the
// merging instance's own bound on the lists, placements and label values
// it merges at once.
func (p *Partitions) Admit(ctx context.Context) (release func(), err error) {
	return p.admit.acquire(ctx)
}

// answer is one partition's answer to one request.
type answer[T any] struct {
	v   T
	err error
	// asked: the request concerned the partition (it holds a cluster
	// the request names).
	asked bool
}

// ask asks every partition ask returns a request for (ok), concurrently,
// each within the timeout, and returns their answers in partition order.
func ask[T any](ctx context.Context, p *Partitions, call func(ctx context.Context, i int) (v T, asked bool, err error)) []answer[T] {
	out := make([]answer[T], len(p.parts))
	var wg sync.WaitGroup
	for i := range p.parts {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
			defer cancel()
			v, asked, err := call(pctx, i)
			out[i] = answer[T]{v: v, err: err, asked: asked}
		})
	}
	wg.Wait()
	return out
}

// down says whether a partition's failure leaves its clusters out of the
// answer (it is down, slow or refuses the merging instance) rather than
// being the request's own fault, which fails the answer.
func down(err error) bool {
	c := CodeOf(err)
	return c != InvalidArgument && c != NotFound
}

// gather sorts the partitions' answers: those that answered, the
// clusters of those that did not (by name), and the error that fails the
// answer: the caller's context's, or a partition's refusal of the
// request itself (InvalidArgument) — but for a counter or a list a
// partition's clusters do not report while another's do (refused where
// no cluster reports it): that partition has no fleet to add. Every
// partition's failure is logged.
func gather[T any](ctx context.Context, p *Partitions, what string, answers []answer[T]) (ok []T, unavailable []string, err error) {
	var refusal error
	for i, a := range answers {
		switch {
		case !a.asked:
		case a.err == nil:
			ok = append(ok, a.v)
		case ctx.Err() != nil:
			return nil, nil, &Error{Code: Unavailable, Message: "the request ended", Err: ctx.Err()}
		case down(a.err):
			unavailable = append(unavailable, p.parts[i].Clusters...)
			p.unanswered(i, what, "its clusters are named unavailable", a.err)
		case unknownKey(a.err):
			refusal = cmp.Or(refusal, a.err)
		default:
			return nil, nil, a.err
		}
	}
	if len(ok) == 0 && refusal != nil {
		return nil, nil, refusal
	}
	slices.Sort(unavailable)
	return ok, unavailable, nil
}

// unknownKey says whether err refuses a counter or a list no cluster of
// the answering view reports (Read.knownKeys).
func unknownKey(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Code == InvalidArgument && (e.Param == "counter" || e.Param == "list") && strings.HasPrefix(e.Message, noClusterReports)
}

// ListFleets answers one page of a fleet query over every partition
// (MergeFleets).
func (p *Partitions) ListFleets(ctx context.Context, q Query) (FleetList, error) {
	q = q.normalized()
	if err := p.known(q.Clusters...); err != nil {
		return FleetList{}, err
	}
	answers := ask(ctx, p, func(ctx context.Context, i int) (FleetList, bool, error) {
		n := q.Narrowed(p.parts[i].Clusters)
		if n == nil {
			return FleetList{}, false, nil
		}
		l, err := p.parts[i].API.ListFleets(ctx, *n)
		return l, true, err
	})
	pages, unavailable, err := gather(ctx, p, "fleets", answers)
	if err != nil {
		return FleetList{}, err
	}
	out := MergeFleets(q, pages)
	out.UnavailableClusters = named(unavailable, q.Clusters)
	return out, nil
}

// named returns the clusters of unavailable a request names (every one
// when it names none).
func named(unavailable, clusters []string) []string {
	if len(clusters) == 0 {
		return unavailable
	}
	return slices.DeleteFunc(unavailable, func(c string) bool { return !slices.Contains(clusters, c) })
}

// known refuses the first of clusters no partition holds.
func (p *Partitions) known(clusters ...string) error {
	for _, c := range clusters {
		if _, ok := p.byCluster[c]; !ok {
			return paramErr("cluster", "cluster %q is in no partition of this service", c)
		}
	}
	return nil
}

// GetFleet asks the partition holding the fleet's cluster.
func (p *Partitions) GetFleet(ctx context.Context, k fleet.Key) (Fleet, error) {
	if err := ValidateKey(k); err != nil {
		return Fleet{}, err
	}
	i, ok := p.byCluster[k.Cluster]
	if !ok {
		return Fleet{}, notFound("fleet %s: not found (cluster %s is in no partition)", k, k.Cluster)
	}
	pctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	f, err := p.parts[i].API.GetFleet(pctx, k)
	if err != nil && down(err) && ctx.Err() == nil {
		p.unanswered(i, "fleet", "the fleet is unavailable", err)
		return Fleet{}, p.unavailable(i, err)
	}
	return f, err
}

// UnansweredMessage is the WARNING line Partitions logs each time a
// partition does not answer (down, slow, refusing the merging service's
// identity), with the partition (logging.KeyPartition), the request
// (logging.KeyRequest), what the answer does about it ("then") and the
// error. The module's log-based metric partition_unanswered counts these
// lines, and its alert fires while they go on.
const UnansweredMessage = "a partition did not answer"

func (p *Partitions) unanswered(i int, request, then string, err error) {
	if p.opts.Log != nil {
		p.opts.Log.Warn(UnansweredMessage, logging.KeyPartition, p.parts[i].Name, logging.KeyRequest, request, "then", then,
			"clusters", strings.Join(p.parts[i].Clusters, ","), logging.KeyError, fmt.Sprint(err))
	}
}

func (p *Partitions) unavailable(i int, err error) *Error {
	return &Error{Code: Unavailable, Message: fmt.Sprintf("partition %s, holding clusters %s, did not answer; retry",
		p.parts[i].Name, strings.Join(p.parts[i].Clusters, ", ")), Err: err}
}

// ListClusters lists every partition's clusters, by name: those of a
// partition that does not answer as it last listed them (or by name
// alone, if it never did), stale.
func (p *Partitions) ListClusters(ctx context.Context) (ClusterList, error) {
	answers := ask(ctx, p, func(ctx context.Context, i int) (ClusterList, bool, error) {
		l, err := p.parts[i].API.ListClusters(ctx)
		return l, true, err
	})
	if ctx.Err() != nil {
		return ClusterList{}, &Error{Code: Unavailable, Message: "the request ended", Err: ctx.Err()}
	}
	lists := make([]ClusterList, 0, len(answers))
	for i, a := range answers {
		if a.err == nil {
			// Only the clusters it holds: it answers for no other.
			items := slices.DeleteFunc(slices.Clone(a.v.Items), func(c Cluster) bool {
				j, ok := p.byCluster[c.Cluster]
				return !ok || j != i
			})
			p.last[i].Store(&items)
			lists = append(lists, ClusterList{Items: items})
			continue
		}
		p.unanswered(i, "clusters", "its clusters are listed stale", a.err)
		lists = append(lists, ClusterList{Items: p.lastClusters(i)})
	}
	return MergeClusters(lists), nil
}

// lastCluster is a cluster as its partition last listed it, stale;
// false when it never did.
func (p *Partitions) lastCluster(name string) (Cluster, bool) {
	if l := p.last[p.byCluster[name]].Load(); l != nil {
		for _, c := range *l {
			if c.Cluster == name {
				c.Stale = true
				return c, true
			}
		}
	}
	return Cluster{}, false
}

// lastClusters are partition i's clusters as it last listed them, stale,
// and those it never listed by name alone.
func (p *Partitions) lastClusters(i int) []Cluster {
	out := make([]Cluster, 0, len(p.parts[i].Clusters))
	for _, name := range p.parts[i].Clusters {
		c, ok := p.lastCluster(name)
		if !ok {
			c = Cluster{Cluster: name, Labels: map[string]string{}, Stale: true,
				Totals: fleet.DocStatus{Counters: map[string]fleet.DocAggregate{}, Lists: map[string]fleet.DocAggregate{}}}
		}
		out = append(out, c)
	}
	return out
}

// GetCluster asks the partition holding the cluster; while it does not
// answer, the cluster as it last listed it, stale.
func (p *Partitions) GetCluster(ctx context.Context, name string) (Cluster, error) {
	if err := ValidateClusterName(name); err != nil {
		return Cluster{}, err
	}
	i, ok := p.byCluster[name]
	if !ok {
		return Cluster{}, notFound("cluster %s: not found (in no partition)", name)
	}
	pctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	c, err := p.parts[i].API.GetCluster(pctx, name)
	if err == nil || !down(err) || ctx.Err() != nil {
		return c, err
	}
	p.unanswered(i, "cluster", "the cluster is shown stale", err)
	if c, ok := p.lastCluster(name); ok {
		return c, nil
	}
	return Cluster{}, p.unavailable(i, err)
}

// LabelValues sums the values of label key over every partition
// (MergeLabelValues).
func (p *Partitions) LabelValues(ctx context.Context, key string, includeStale bool) (LabelValues, error) {
	if err := ValidateLabelKey(key); err != nil {
		return LabelValues{}, err
	}
	answers := ask(ctx, p, func(ctx context.Context, i int) (LabelValues, bool, error) {
		lv, err := p.parts[i].API.LabelValues(ctx, key, includeStale)
		return lv, true, err
	})
	ok, unavailable, err := gather(ctx, p, "labels", answers)
	if err != nil {
		return LabelValues{}, err
	}
	out := MergeLabelValues(key, ok)
	out.UnavailableClusters = unavailable
	return out, nil
}

// Place ranks the candidates of every partition as one view of them
// would. Each partition draws its own fleets' keys (an exponential
// variate over each fleet's weight: Ranking) and returns its best
// req.Count with them; the best req.Count of all, by staleness, priority
// and key, are the best of one draw over every fleet, since the keys are
// independent whichever partition draws them. The weights are the same
// as one view's for every fleet whose capacity is within twice its
// priority's median (CapacityBound): each partition bounds a larger
// claim by its own candidates' median, as it holds no other's. Eligible
// fleets and those left out are summed; the clusters of a partition that
// does not answer are UnavailableClusters, and their fleets (as it last
// counted them) left out as stale.
func (p *Partitions) Place(ctx context.Context, req PlaceRequest) (Placements, error) {
	if err := p.known(req.Filter.Clusters...); err != nil {
		return Placements{}, err
	}
	if req.Count < 0 || req.Count > MaxPlacements {
		return Placements{}, paramErr("count", "%d: want 1 to %d", req.Count, MaxPlacements)
	}
	req.Count = max(req.Count, 1)
	// A *rand.Rand is not safe for concurrent use: each partition draws
	// from its own, seeded from the request's.
	rands := make([]*rand.Rand, len(p.parts))
	if req.Rand != nil {
		for i := range rands {
			rands[i] = rand.New(rand.NewPCG(req.Rand.Uint64(), req.Rand.Uint64()))
		}
	}
	answers := ask(ctx, p, func(ctx context.Context, i int) (Placements, bool, error) {
		n := req.Filter.Narrowed(p.parts[i].Clusters)
		if n == nil {
			return Placements{}, false, nil
		}
		r := req
		r.Filter, r.Rand = *n, rands[i]
		pl, err := p.parts[i].API.Place(ctx, r)
		return pl, true, err
	})
	ok, unavailable, err := gather(ctx, p, "placements", answers)
	if err != nil {
		return Placements{}, err
	}
	unavailable = named(unavailable, req.Filter.Clusters)
	return p.mergePlacements(req, ok, unavailable), nil
}

// mergePlacements merges the partitions' placements (Place). The
// partitions hold disjoint clusters: a reason's fleets and clusters are
// the sums of each partition's, and its first clusters by name among the
// first each partition names.
func (p *Partitions) mergePlacements(req PlaceRequest, answers []Placements, unavailable []string) Placements {
	out := Placements{Placements: []Placement{}, LeftOut: []LeftOut{}, Policy: []string{}, PolicySource: "none", UnavailableClusters: unavailable}
	if req.Policy != nil {
		out.Policy, out.PolicySource = req.Policy.Strings(), "request"
	}
	left := map[Reason]*LeftOut{}
	leave := func(r Reason, fleets, clusters int, names ...string) {
		l := left[r]
		if l == nil {
			l = &LeftOut{Reason: r}
			left[r] = l
		}
		l.Fleets += fleets
		l.ClusterCount += clusters
		l.Clusters = append(l.Clusters, names...)
	}
	for i, a := range answers {
		out.Placements = append(out.Placements, a.Placements...)
		out.Eligible += a.Eligible
		if i == 0 {
			out.Policy, out.PolicySource = a.Policy, a.PolicySource
		}
		for _, l := range a.LeftOut {
			leave(l.Reason, l.Fleets, l.ClusterCount, l.Clusters...)
		}
	}
	for _, c := range unavailable {
		if last, _ := p.lastCluster(c); last.FleetCount > 0 {
			leave(StaleCluster, int(last.FleetCount), 1, c)
		}
	}
	slices.SortFunc(out.Placements, func(a, b Placement) int {
		if a.Stale != b.Stale {
			if !a.Stale {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.DrawKey, b.DrawKey))
	})
	out.Placements = out.Placements[:min(len(out.Placements), req.Count)]
	staleText := fmt.Sprintf("no heartbeat for %v", p.opts.StaleAfter)
	if len(unavailable) > 0 {
		staleText += ", or their partition did not answer"
	}
	for _, reason := range reasons {
		l := left[reason]
		if l == nil {
			continue
		}
		slices.Sort(l.Clusters)
		l.Clusters = l.Clusters[:min(len(l.Clusters), maxReasonClusters)]
		l.Message = leftOutMessage(*l, req.Need, staleText)
		out.LeftOut = append(out.LeftOut, *l)
	}
	return out
}
