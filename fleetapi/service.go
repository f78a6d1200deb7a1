package fleetapi

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"iter"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
)

// DefaultStaleAfter is three default snapshot intervals: a cluster whose
// last heartbeat is older is stale, and its fleets are left out unless
// asked for.
const DefaultStaleAfter = 90 * time.Second

// Defaults of Options.
const (
	// DefaultClusterRefresh is how often a view reads the cluster
	// documents written since its last read of them.
	DefaultClusterRefresh = time.Second
	// DefaultCommitLag bounds how long after its server timestamp a
	// write may become visible to queries. The Firestore emulator
	// showed up to 13 ms with four concurrent writers (docs/api.md).
	DefaultCommitLag = 250 * time.Millisecond
	// DefaultMaxStaleness is how old a view may be and still answer
	// without waiting for a sync; see Options.MaxStaleness.
	DefaultMaxStaleness = 250 * time.Millisecond
	// DefaultMaxViewBytes bounds the view's fleet documents (docBytes):
	// 10 000 fleets at fleet.MaxStateBytes take about 110 MiB, a typical
	// fleet a tenth of one of those.
	DefaultMaxViewBytes = 160 << 20
	// DefaultMaxWatches is how many watches an instance serves at once:
	// each holds at most a chunk of StepEvents events, a few KiB of
	// buffers and the socket's (BENCHMARKS.md measures them), so that
	// with the view they stay well inside a 512 MiB instance.
	DefaultMaxWatches = 500
	// DefaultResync is how often a view loads everything again, which
	// bounds the life of any change it missed (a write that became
	// visible later than CommitLag, or a clock off by more).
	DefaultResync = 15 * time.Minute
)

// Options configure a Service; zero fields take their defaults.
type Options struct {
	// StaleAfter: a cluster whose heartbeat is older is stale.
	StaleAfter time.Duration
	// MaxStaleness is how long before a request the view's newest sync
	// may have begun for the request to be answered without waiting for
	// another: an answer then holds every write acknowledged more than
	// MaxStaleness before the request (and, if it waited, every write
	// acknowledged before it). The view syncs in the background once it
	// is half that old. Negative: every request waits for a sync that
	// begins after it arrived (read-your-writes).
	MaxStaleness time.Duration
	// ClusterRefresh bounds how old the view's cluster documents
	// (heartbeats, labels, totals) may be when it answers: they are
	// read again at most this often, which spares a read per request
	// at a high request rate. Fleet documents are read before every
	// answer. Negative: before every answer too.
	ClusterRefresh time.Duration
	// CommitLag is how long after its server timestamp (writtenAt) a
	// write may become visible to queries, plus how far the Service's
	// clock may be ahead of Firestore's: each sync reads again what was
	// stamped within CommitLag before the previous one.
	CommitLag time.Duration
	// Resync is how often the view loads everything again.
	Resync time.Duration
	// TombstoneRetention is how long Firestore keeps a tombstone: a
	// view that has not synced for half of it loads everything again,
	// since the tombstones of fleets deleted meanwhile may be gone.
	TombstoneRetention time.Duration
	// WatchPoll is how often the view syncs while watches run and no
	// listener delivers the writes (a Source that is no Follower, or a
	// listener that failed).
	WatchPoll time.Duration
	// Heartbeat is how often a watch sends a heartbeat.
	Heartbeat time.Duration
	// SyncTimeout bounds one sync (default 30 s).
	SyncTimeout time.Duration
	// MaxViewBytes bounds the fleet documents the view holds, by
	// docBytes (DefaultMaxViewBytes). Past it, the cluster whose fleets
	// take the most is left out and reported stale until the next full
	// load finds room for it: one cluster creating fleets without end
	// cannot exhaust the instance that answers for all.
	MaxViewBytes int
	// FeedMaxBytes bounds the documents the feed of changes keeps alive
	// (DefaultFeedMaxBytes); a watch further behind restarts.
	FeedMaxBytes int
	// MaxWatches bounds the watches (streams) an instance serves at
	// once; past it, Watch refuses with ResourceExhausted
	// (DefaultMaxWatches).
	MaxWatches int
	// Clusters, when set, are the clusters this Service's view holds: a
	// partition of a deployment too large for one instance
	// (docs/capacity.md), whose Source reads those clusters' documents
	// only (firestoredb.Store.Partition; the query side's VIEW_CLUSTERS).
	// The view admits no document of another cluster, whatever its
	// Source returns, and a request that names one is refused
	// (InvalidArgument, param "cluster"), naming the partition's: it was
	// sent to the wrong instance. Empty: every cluster.
	Clusters []string
	// Policy is the placement policy of a Place request that gives none
	// (the query side's PLACEMENT_POLICY); the zero Policy gives every
	// cluster priority 0 and weight 1.
	Policy Policy
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Log receives the view's loads and skipped documents; none when nil.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.StaleAfter <= 0 {
		o.StaleAfter = DefaultStaleAfter
	}
	switch {
	case o.MaxStaleness == 0:
		o.MaxStaleness = DefaultMaxStaleness
	case o.MaxStaleness < 0:
		o.MaxStaleness = 0
	}
	switch {
	case o.ClusterRefresh == 0:
		o.ClusterRefresh = DefaultClusterRefresh
	case o.ClusterRefresh < 0:
		o.ClusterRefresh = 0
	}
	if o.CommitLag <= 0 {
		o.CommitLag = DefaultCommitLag
	}
	if o.Resync <= 0 {
		o.Resync = DefaultResync
	}
	if o.TombstoneRetention <= 0 {
		o.TombstoneRetention = fleet.DefaultTombstoneRetention
	}
	if o.WatchPoll <= 0 {
		o.WatchPoll = DefaultWatchPoll
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = 30 * time.Second
	}
	if o.MaxWatches <= 0 {
		o.MaxWatches = DefaultMaxWatches
	}
	if o.FeedMaxBytes <= 0 {
		o.FeedMaxBytes = DefaultFeedMaxBytes
	}
	if o.MaxViewBytes <= 0 {
		o.MaxViewBytes = DefaultMaxViewBytes
	}
	if len(o.Clusters) > 0 {
		o.Clusters = slices.Compact(slices.Sorted(slices.Values(o.Clusters)))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Service answers queries from an in-memory view of the live fleets and
// clusters, synced from its Source before each answer at the cost of the
// documents written since the previous sync. Its methods are safe for
// concurrent use.
type Service struct {
	src  Source
	opts Options

	mu   sync.RWMutex // guards view
	view view

	// epoch tells this Service's resume tokens from another's.
	epoch uint64
	// stepEvents is StepEvents (tests make it smaller).
	stepEvents int
	// unanswerable counts the documents left out because no answer
	// could hold them (Encodable).
	unanswerable atomic.Int64

	syncMu   sync.Mutex // guards running, queued, watches and pollStop
	running  *syncRound
	queued   *syncRound
	watches  int
	pollStop chan struct{}
}

// NewService returns a Service over src. Nothing is read until the first
// answer.
func NewService(src Source, opts Options) *Service {
	s := &Service{src: src, opts: opts.withDefaults(), epoch: rand.Uint64() | 1, stepEvents: StepEvents}
	s.view.feed.updated = make(chan struct{})
	s.view.feed.maxBytes = s.opts.FeedMaxBytes
	s.view.maxBytes = s.opts.MaxViewBytes
	s.view.clusterBytes, s.view.overBudget = map[string]int{}, map[string]bool{}
	return s
}

// Read is a consistent reading of the view, as current as Options say:
// every write acknowledged before Service.Read was called is in it, or,
// within MaxStaleness, every write acknowledged that long before; cluster
// documents may be up to ClusterRefresh older. It is valid only during
// the call Service.Read makes with it.
type Read struct {
	s     *Service
	now   time.Time
	stale map[string]bool // by cluster, for every cluster with a document
	tag   uint64          // digest of the view and the staleness of its clusters
}

// Read syncs the view and calls f with a reading of it, returning f's
// error. The view does not change during f, and syncs wait for it: keep
// it short, and copy out what outlives it. The error is an *Error
// (Unavailable or Internal) when the store cannot be read.
func (s *Service) Read(ctx context.Context, f func(*Read) error) error {
	r, err := s.read(ctx)
	if err != nil {
		return err
	}
	defer r.s.mu.RUnlock()
	return f(r)
}

// read syncs the view and returns a reading of it, holding the view's read
// lock, which the caller releases.
func (s *Service) read(ctx context.Context) (*Read, error) {
	if err := s.sync(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	r := &Read{s: s, now: s.opts.Now(), stale: make(map[string]bool, len(s.view.clusters))}
	h := fnv.New64a()
	h.Write(binary.LittleEndian.AppendUint64(nil, s.view.digest))
	for _, name := range slices.Sorted(maps.Keys(s.view.clusters)) {
		st := IsStale(s.view.clusters[name], r.now, s.opts.StaleAfter) || s.view.overBudget[name]
		r.stale[name] = st
		if st {
			h.Write([]byte(name + "\x00"))
		}
	}
	r.tag = h.Sum64()
	return r, nil
}

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
	for _, e := range r.s.view.sorted {
		if q.Matches(e.doc, r.isStale(e.doc.Cluster)) {
			p.add(e)
		}
	}
	page, next := p.page()
	out := FleetList{Items: make([]Fleet, 0, len(page)), NextPageToken: next, TotalSize: p.total}
	for _, e := range page {
		out.Items = append(out.Items, NewFleet(e.doc, r.isStale(e.doc.Cluster)))
	}
	return out, nil
}

// knownKeys rejects a counter or list that no cluster reports in its
// totals: most likely a typo, which would otherwise quietly match nothing.
func (r *Read) knownKeys(q Query) error {
	var counter, list bool
	for _, c := range r.s.view.clusters {
		_, hasCounter := c.Totals.Counters[q.Counter]
		_, hasList := c.Totals.Lists[q.List]
		counter, list = counter || hasCounter, list || hasList
	}
	if q.Counter != "" && !counter {
		return paramErr("counter", "no cluster reports a counter %q", q.Counter)
	}
	if q.List != "" && !list {
		return paramErr("list", "no cluster reports a list %q", q.List)
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
	e, ok := r.s.view.byID[k.DocID()]
	if !ok {
		return Fleet{}, notFound("fleet %s: not found", k)
	}
	return NewFleet(e.doc, r.isStale(k.Cluster)), nil
}

// Clusters returns every cluster, by name.
func (r *Read) Clusters() ClusterList {
	out := ClusterList{Items: make([]Cluster, 0, len(r.s.view.clusters))}
	for _, name := range slices.Sorted(maps.Keys(r.s.view.clusters)) {
		c := NewCluster(r.s.view.clusters[name], r.stale[name])
		c.OverBudget = r.s.view.overBudget[name]
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
	c, ok := r.s.view.clusters[name]
	if !ok {
		return Cluster{}, notFound("cluster %s: not found", name)
	}
	out := NewCluster(c, r.stale[name])
	out.OverBudget = r.s.view.overBudget[name]
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
		for _, e := range r.s.view.sorted {
			if (includeStale || !r.isStale(e.doc.Cluster)) && !yield(e.doc) {
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

// admits says whether the view may hold a document of cluster.
func (s *Service) admits(cluster string) bool {
	return len(s.opts.Clusters) == 0 || slices.Contains(s.opts.Clusters, cluster)
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
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.view.bytes
}
