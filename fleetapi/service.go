package fleetapi

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"iter"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetview"
)

// Service answers queries from an in-memory view of the live fleets and
// clusters (a fleetview.Engine): each answer is computed on one immutable
// snapshot of it, which no sync and no other request changes or waits
// for. Its methods are safe for concurrent use.
type Service struct {
	eng   *fleetview.Engine
	opts  Options
	admit *admission
}

// NewService returns a Service over src. Nothing is read until the first
// answer, or Start.
func NewService(src Source, opts Options) *Service {
	eng := fleetview.New(src, opts.view())
	v := eng.Options()
	opts.StaleAfter, opts.Clusters, opts.Now, opts.Log = v.StaleAfter, v.Clusters, v.Now, v.Log
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	return &Service{eng: eng, opts: opts, admit: newAdmission(opts)}
}

// Start loads the view in the background, so that no request waits for
// it: an instance calls it when it starts.
func (s *Service) Start() { s.eng.Start() }

// Sync waits for a sync of the view that begins after the call: then the
// view holds every write acknowledged before the call.
func (s *Service) Sync(ctx context.Context) error {
	if err := s.eng.Sync(ctx); err != nil {
		return storeErr(err)
	}
	return nil
}

// Read is a consistent reading of the view: one immutable snapshot, as
// current as Options say, and the time it judges staleness at. It is valid
// only during the call Service.Read makes with it.
type Read struct {
	s     *Service
	snap  *fleetview.Snapshot
	now   time.Time
	stale map[string]bool // by cluster, for every cluster with a document
	tag   uint64          // digest of the view and the staleness of its clusters
}

// Read calls f with a reading of the view, returning f's error. The
// reading is an immutable snapshot: f neither waits for a sync nor delays
// one, nor any other request, however long it takes. The error is an
// *Error (Unavailable or Internal) when the store cannot be read.
func (s *Service) Read(ctx context.Context, f func(*Read) error) error {
	snap, err := s.eng.Read(ctx)
	if err != nil {
		return storeErr(err)
	}
	return f(s.reading(snap))
}

// reading is a Read of snap now.
func (s *Service) reading(snap *fleetview.Snapshot) *Read {
	r := &Read{s: s, snap: snap, now: s.opts.Now(), stale: make(map[string]bool, snap.ClusterCount())}
	h := fnv.New64a()
	h.Write(binary.LittleEndian.AppendUint64(nil, snap.Digest()))
	for name := range snap.Clusters() {
		st := snap.StaleAt(name, r.now, s.opts.StaleAfter)
		r.stale[name] = st
		if st {
			h.Write([]byte(name + "\x00"))
		}
	}
	r.tag = h.Sum64()
	return r
}

// Version identifies what the reading holds: it changes when any document
// of the view or any cluster's staleness changes, and is the same for
// every reading of the same snapshot at the same staleness. Figures
// derived from a reading (the metrics) are cached by it.
func (r *Read) Version() uint64 { return r.tag }

// ETag returns the entity tag of the answer named by key (an endpoint and
// its canonical parameters) in this reading: it changes when any document
// of the view or any cluster's staleness changes, and is the same on every
// instance holding the same documents. It costs no read.
func (r *Read) ETag(key string) string {
	h := fnv.New128a()
	h.Write(binary.LittleEndian.AppendUint64(nil, r.tag))
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}

// FleetsKey is the ETag key of a fleet list query.
func FleetsKey(q Query) string { return "fleets?" + q.normalized().key() }

func (r *Read) isStale(cluster string) bool {
	st, ok := r.stale[cluster]
	return st || !ok
}

// Fleets answers one page of a fleet query.
func (r *Read) Fleets(q Query) (FleetList, error) {
	q = q.normalized()
	if err := r.s.holds(q.Clusters...); err != nil {
		return FleetList{}, err
	}
	if err := r.knownKeys(q); err != nil {
		return FleetList{}, err
	}
	p := &pager{q: q}
	set, exact := r.narrow(q)
	if exact && q.OrderBy == OrderByName {
		// Every fleet of the set matches, and the set yields them in
		// the page's order: read the page, and one more to know
		// whether another follows.
		after := ""
		if q.After != nil {
			after = q.After.ID
		}
		for id, d := range r.snap.In(set, after) {
			p.add(item{id: id, doc: d})
			if p.after > q.PageSize {
				break
			}
		}
		p.total = set.Len()
	} else {
		// The candidates come in ID order, a cluster's together: its
		// staleness is looked up once, not once a fleet.
		cluster, stale := "", false
		for id, d := range r.snap.In(set, "") {
			if d.Cluster != cluster {
				cluster, stale = d.Cluster, r.isStale(d.Cluster)
			}
			if q.Matches(d, stale) {
				p.add(item{id: id, doc: d})
			}
		}
	}
	page, next := p.page()
	out := FleetList{Items: make([]Fleet, 0, len(page)), NextPageToken: next, TotalSize: p.total}
	for _, e := range page {
		out.Items = append(out.Items, NewFleet(e.doc, r.isStale(e.doc.Cluster)))
	}
	return out, nil
}

// noClusterReports begins knownKeys' refusals: Partitions tells them,
// which one partition's clusters may give while another's answer, from
// the request's own faults.
const noClusterReports = "no cluster reports"

// knownKeys rejects a counter or list that no cluster reports in its
// totals: most likely a typo, which would otherwise quietly match nothing.
func (r *Read) knownKeys(q Query) error {
	var counter, list bool
	for _, c := range r.snap.Clusters() {
		_, hasCounter := c.Totals.Counters[q.Counter]
		_, hasList := c.Totals.Lists[q.List]
		counter, list = counter || hasCounter, list || hasList
	}
	if q.Counter != "" && !counter {
		return paramErr("counter", noClusterReports+" a counter %q", q.Counter)
	}
	if q.List != "" && !list {
		return paramErr("list", noClusterReports+" a list %q", q.List)
	}
	return nil
}

// Fleet returns one live fleet, or a NotFound *Error.
func (r *Read) Fleet(k fleet.Key) (Fleet, error) {
	if err := ValidateKey(k); err != nil {
		return Fleet{}, err
	}
	if err := r.s.holds(k.Cluster); err != nil {
		return Fleet{}, err
	}
	d, ok := r.snap.Fleet(k.DocID())
	if !ok {
		return Fleet{}, notFound("fleet %s: not found", k)
	}
	return NewFleet(d, r.isStale(k.Cluster)), nil
}

// Clusters returns every cluster, by name.
func (r *Read) Clusters() ClusterList {
	out := ClusterList{Items: make([]Cluster, 0, r.snap.ClusterCount())}
	for name, doc := range r.snap.Clusters() {
		c := NewCluster(doc, r.stale[name])
		c.OverBudget = r.snap.OverBudget(name)
		out.Items = append(out.Items, c)
	}
	return out
}

// Cluster returns one cluster, or a NotFound *Error.
func (r *Read) Cluster(name string) (Cluster, error) {
	if err := ValidateClusterName(name); err != nil {
		return Cluster{}, err
	}
	if err := r.s.holds(name); err != nil {
		return Cluster{}, err
	}
	c, ok := r.snap.Cluster(name)
	if !ok {
		return Cluster{}, notFound("cluster %s: not found", name)
	}
	out := NewCluster(c, r.stale[name])
	out.OverBudget = r.snap.OverBudget(name)
	return out, nil
}

// Labels sums the live fleets carrying label key by value; fleets of stale
// clusters only when includeStale.
func (r *Read) Labels(key string, includeStale bool) (LabelValues, error) {
	if err := ValidateLabelKey(key); err != nil {
		return LabelValues{}, err
	}
	return aggregateLabel(key, r.fleets(includeStale)), nil
}

// Now is the time this reading judges staleness and ages at.
func (r *Read) Now() time.Time { return r.now }

// LiveFleets yields the documents a fleet query without filters matches
// (live fleets of clusters that are not stale), in the order of its
// answers. They are the view's own: read them, never change them, and copy
// out what outlives the Read.
func (r *Read) LiveFleets() iter.Seq[*fleet.Document] {
	return func(yield func(*fleet.Document) bool) {
		for d := range r.fleets(false) {
			if !d.Deleted && !yield(d) {
				return
			}
		}
	}
}

func (r *Read) fleets(includeStale bool) iter.Seq[*fleet.Document] {
	return func(yield func(*fleet.Document) bool) {
		for d := range r.snap.Fleets() {
			if (includeStale || !r.isStale(d.Cluster)) && !yield(d) {
				return
			}
		}
	}
}

// holds refuses the first of clusters outside the Service's partition
// (Options.Clusters): the request reached an instance that cannot answer
// it, and an empty answer would say, wrongly, that the cluster has no
// fleets.
func (s *Service) holds(clusters ...string) error {
	if len(s.opts.Clusters) == 0 {
		return nil
	}
	for _, c := range clusters {
		if !slices.Contains(s.opts.Clusters, c) {
			return paramErr("cluster", "cluster %q is not in this instance's partition (clusters %s): ask the query service of the partition that holds it",
				c, strings.Join(s.opts.Clusters, ", "))
		}
	}
	return nil
}

// ValidateKey checks a fleet's key as a parameter.
func ValidateKey(k fleet.Key) error {
	if err := ValidateClusterName(k.Cluster); err != nil {
		return err
	}
	if err := k.Ref().Validate(); err != nil {
		return paramErr("namespace/name", "%v", err)
	}
	return nil
}

// ValidateClusterName checks a cluster name as a parameter.
func ValidateClusterName(name string) error {
	if err := fleet.ValidateClusterName(name); err != nil {
		return paramErr("cluster", "%q is not a cluster name (a DNS-1123 label)", name)
	}
	return nil
}

// ValidateLabelKey checks a label key as a parameter.
func ValidateLabelKey(key string) error {
	if err := fleet.ValidateLabels("key", map[string]string{key: ""}); err != nil {
		return paramErr("key", "%q is not a label key", key)
	}
	return nil
}

// The Service answers as the API does, for callers in the same process.
var _ API = (*Service)(nil)

// API is the query API, answered in process (Service) or over HTTP
// (Client). Errors are *Error.
type API interface {
	ListFleets(ctx context.Context, q Query) (FleetList, error)
	GetFleet(ctx context.Context, k fleet.Key) (Fleet, error)
	ListClusters(ctx context.Context) (ClusterList, error)
	GetCluster(ctx context.Context, name string) (Cluster, error)
	LabelValues(ctx context.Context, key string, includeStale bool) (LabelValues, error)
	Place(ctx context.Context, req PlaceRequest) (Placements, error)
}

// ListFleets answers one page of a fleet query.
func (s *Service) ListFleets(ctx context.Context, q Query) (FleetList, error) {
	return withRead(ctx, s, func(r *Read) (FleetList, error) { return r.Fleets(q) })
}

// GetFleet returns one live fleet.
func (s *Service) GetFleet(ctx context.Context, k fleet.Key) (Fleet, error) {
	return withRead(ctx, s, func(r *Read) (Fleet, error) { return r.Fleet(k) })
}

// ListClusters returns every cluster.
func (s *Service) ListClusters(ctx context.Context) (ClusterList, error) {
	return withRead(ctx, s, func(r *Read) (ClusterList, error) { return r.Clusters(), nil })
}

// GetCluster returns one cluster.
func (s *Service) GetCluster(ctx context.Context, name string) (Cluster, error) {
	return withRead(ctx, s, func(r *Read) (Cluster, error) { return r.Cluster(name) })
}

// LabelValues sums the live fleets carrying label key by value.
func (s *Service) LabelValues(ctx context.Context, key string, includeStale bool) (LabelValues, error) {
	return withRead(ctx, s, func(r *Read) (LabelValues, error) { return r.Labels(key, includeStale) })
}

func withRead[T any](ctx context.Context, s *Service, f func(*Read) (T, error)) (T, error) {
	var v T
	err := s.Read(ctx, func(r *Read) (err error) {
		v, err = f(r)
		return err
	})
	return v, err
}

// AllFleets returns every fleet matching q, following the pages.
func AllFleets(ctx context.Context, api API, q Query) ([]Fleet, error) {
	q = q.normalized()
	q.PageSize = MaxPageSize
	var out []Fleet
	for {
		page, err := api.ListFleets(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.NextPageToken == "" {
			return out, nil
		}
		if q, err = q.Next(page.NextPageToken); err != nil {
			return nil, fmt.Errorf("the API returned a page token of another query: %w", err)
		}
	}
}

// NewQuery returns the query of every live fleet, first page.
func NewQuery() Query {
	return Query{Selector: labels.Everything(), OrderBy: OrderByName, PageSize: DefaultPageSize}
}

// normalized fills the zero fields of a query built in Go rather than
// parsed, as ParseQuery would.
func (q Query) normalized() Query {
	if q.Selector == nil {
		q.Selector = labels.Everything()
	}
	if q.OrderBy == "" {
		q.OrderBy = OrderByName
	}
	if q.PageSize <= 0 {
		q.PageSize = DefaultPageSize
	}
	q.PageSize = min(q.PageSize, MaxPageSize)
	return q
}

// ViewBytes returns what the view's budget (Options.MaxViewBytes) counts
// of the fleets it holds.
func (s *Service) ViewBytes() int {
	return s.eng.Current().Bytes()
}

// API answers as the Service does, from this reading alone: every answer
// of it is of the same snapshot, at the same time. It is valid only
// during the call Service.Read makes with r.
func (r *Read) API() API { return readAPI{r} }

type readAPI struct{ r *Read }

func (a readAPI) ListFleets(_ context.Context, q Query) (FleetList, error) { return a.r.Fleets(q) }
func (a readAPI) GetFleet(_ context.Context, k fleet.Key) (Fleet, error)   { return a.r.Fleet(k) }
func (a readAPI) ListClusters(context.Context) (ClusterList, error)        { return a.r.Clusters(), nil }
func (a readAPI) GetCluster(_ context.Context, name string) (Cluster, error) {
	return a.r.Cluster(name)
}
func (a readAPI) LabelValues(_ context.Context, key string, includeStale bool) (LabelValues, error) {
	return a.r.Labels(key, includeStale)
}
func (a readAPI) Place(_ context.Context, req PlaceRequest) (Placements, error) {
	return a.r.Place(req)
}
