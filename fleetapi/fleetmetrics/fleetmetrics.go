// Package fleetmetrics exposes the read model's capacity figures as
// Prometheus metrics, for scalers (KEDA's prometheus and gcp-stackdriver
// scalers, the Horizontal Pod Autoscaler through an adapter), Grafana and a
// cluster's own tooling: per fleet, its replicas, ready, allocated and
// reserved game servers, the capacity its counters and lists have left and
// whether its rollout is complete; per cluster, its heartbeat's age and
// whether it is stale.
//
// The figures are those of a fleet query without filters: the live fleets
// of clusters that are not stale, as GET /v1/fleets answers them from the
// same view. Collect copies them from a fleetapi.Read (one immutable
// snapshot of the view), costing no read of the store; Snapshot.Write
// encodes them in the format the scraper asked for (expfmt.Negotiate). A
// Cache does both once per version of the view, for every scraper.
//
// Cardinality is bounded. Each fleet is its own series (labelled cluster,
// namespace, fleet and the label_* of Options.Labels) while all of them
// fit in Options.MaxSeries; beyond it, or when Options.Aggregate says so,
// the series are sums by cluster and Options.Labels, and
// fleetcast_metrics_aggregated says which. A sum that does not fit either is
// left out, whole and counted in fleetcast_metrics_series_omitted: a
// scraper never sees a partial group.
package fleetmetrics

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sync/singleflight"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
)

// DefaultMaxSeries is Options.MaxSeries' default: 1 000 fleets of a few
// counters each fit per fleet; 10 000 are summed. Each series scraped every
// 30 s is 86 400 samples a month, which Managed Service for Prometheus
// bills (see the bill).
const DefaultMaxSeries = 10_000

// Options configure the metrics.
type Options struct {
	// Labels are fleet label keys (such as platform, version) exported as
	// Prometheus labels named label_<key>, every character outside
	// [a-zA-Z0-9_] an underscore, as kube-state-metrics names them; the
	// sums group by them. A fleet without one has it empty.
	Labels []string
	// MaxSeries bounds the fleet series of an answer; 0 is
	// DefaultMaxSeries.
	MaxSeries int
	// Aggregate sums by cluster and Labels however few the fleets.
	Aggregate bool
}

// MaxLabels bounds Options.Labels.
const MaxLabels = 10

// Validate reports every bad option, naming its field.
func (o Options) Validate() error {
	var errs []error
	if o.MaxSeries < 0 {
		errs = append(errs, fmt.Errorf("MaxSeries %d: want 0 (the default, %d) or more", o.MaxSeries, DefaultMaxSeries))
	}
	if len(o.Labels) > MaxLabels {
		errs = append(errs, fmt.Errorf("Labels: %d keys, at most %d", len(o.Labels), MaxLabels))
	}
	seen := map[string]string{}
	for _, k := range o.Labels {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("Labels: %q is not a label key: %s", k, strings.Join(msgs, "; ")))
			continue
		}
		name := LabelName(k)
		if prev, dup := seen[name]; dup {
			errs = append(errs, fmt.Errorf("Labels: %q and %q are both %s", prev, k, name))
			continue
		}
		seen[name] = k
	}
	return errors.Join(errs...)
}

// LabelName is the Prometheus label that carries the fleet label key.
func LabelName(key string) string {
	var b strings.Builder
	b.WriteString("label_")
	for _, r := range key {
		if r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// The gauges of a fleet (or of a sum of fleets), in the order of a row's
// values.
var fleetGauges = [...]struct{ name, help string }{
	{"fleetcast_fleet_replicas", "Game servers the fleet asks for (spec.replicas)."},
	{"fleetcast_fleet_current_replicas", "Game servers the fleet has (status.replicas)."},
	{"fleetcast_fleet_ready_replicas", "Ready game servers: what an allocation can take now."},
	{"fleetcast_fleet_allocated_replicas", "Allocated game servers."},
	{"fleetcast_fleet_reserved_replicas", "Reserved game servers."},
}

const (
	nameRollout     = "fleetcast_fleet_rollout_complete"
	nameCounter     = "fleetcast_fleet_counter_available"
	nameList        = "fleetcast_fleet_list_available"
	nameFleets      = "fleetcast_fleets"
	nameHeartbeat   = "fleetcast_cluster_heartbeat_age_seconds"
	nameStale       = "fleetcast_cluster_stale"
	nameClusterSize = "fleetcast_cluster_fleets"
	nameAggregated  = "fleetcast_metrics_aggregated"
	nameOmitted     = "fleetcast_metrics_series_omitted"
)

// row is one fleet, or one sum of fleets.
type row struct {
	labels   []string // values of Snapshot.labelNames
	gauges   [len(fleetGauges)]float64
	fleets   int // summed into it
	rollouts int // with a known rollout
	complete int // with a complete rollout
	counters map[string]int64
	lists    map[string]int64
}

func (r *row) series(aggregated bool) int {
	n := len(fleetGauges) + len(r.counters) + len(r.lists)
	if r.rollouts > 0 {
		n++
	}
	if aggregated {
		n++
	}
	return n
}

type clusterRow struct {
	name   string
	age    float64
	stale  bool
	fleets int64
}

// Snapshot is the figures of one reading, ready to encode: its fleets'
// (shared by every scrape of one version of the view, when a Cache
// collected them) and its clusters' (taken at each scrape: a heartbeat's
// age grows with the clock).
type Snapshot struct {
	*fleets
	clusters []clusterRow
}

// fleets is the fleets' figures of one version of the view, and their
// encoding in each format asked for.
type fleets struct {
	labelNames []string
	rows       []*row
	aggregated bool
	omitted    int

	mu      sync.Mutex
	encoded map[expfmt.Format][]byte
}

// Collect copies the figures from a reading. It allocates what it copies
// and reads no store: call it inside fleetapi.Service.Read, and Write
// after. A Cache collects the fleets' once per version of the view.
func Collect(r *fleetapi.Read, o Options) *Snapshot {
	return &Snapshot{fleets: collectFleets(r, o), clusters: collectClusters(r)}
}

// Cache collects the fleets' figures once per version of the view
// (fleetapi.Read.Version), and encodes them once per format asked for:
// any number of scrapers of one version cost one computation, one
// concurrent with it waits for its result rather than repeating it
// (single flight). Only the clusters' figures, a few per cluster, are
// taken at each scrape. It keeps the newest version's figures alone.
type Cache struct {
	opts     Options
	group    singleflight.Group
	mu       sync.Mutex
	version  uint64
	last     *fleets
	computed atomic.Int64
}

// NewCache returns a Cache of the figures o describes.
func NewCache(o Options) *Cache { return &Cache{opts: o} }

// Collect is Collect, the fleets' figures computed once per version.
func (c *Cache) Collect(r *fleetapi.Read) *Snapshot {
	v := r.Version()
	c.mu.Lock()
	f := c.last
	if f != nil && c.version != v {
		f = nil
	}
	c.mu.Unlock()
	if f == nil {
		got, _, _ := c.group.Do(strconv.FormatUint(v, 16), func() (any, error) {
			f := collectFleets(r, c.opts)
			c.computed.Add(1)
			c.mu.Lock()
			c.version, c.last = v, f
			c.mu.Unlock()
			return f, nil
		})
		f = got.(*fleets)
	}
	return &Snapshot{fleets: f, clusters: collectClusters(r)}
}

// Computations counts the times the Cache computed the fleets' figures.
func (c *Cache) Computations() int64 { return c.computed.Load() }

func collectFleets(r *fleetapi.Read, o Options) *fleets {
	maxSeries := cmp.Or(o.MaxSeries, DefaultMaxSeries)
	s := &fleets{aggregated: o.Aggregate}
	if !s.aggregated {
		n := 0
		for d := range r.LiveFleets() {
			n += len(fleetGauges)
			if d.Rollout != nil {
				n++
			}
			if d.Status != nil {
				n += len(d.Status.Counters) + len(d.Status.Lists)
			}
		}
		s.aggregated = n > maxSeries
	}
	if s.aggregated {
		s.labelNames = append([]string{"cluster"}, labelNames(o.Labels)...)
	} else {
		s.labelNames = append([]string{"cluster", "namespace", "fleet"}, labelNames(o.Labels)...)
	}
	groups := map[string]*row{}
	for d := range r.LiveFleets() {
		values := make([]string, 0, len(s.labelNames))
		values = append(values, d.Cluster)
		if !s.aggregated {
			values = append(values, d.Namespace, d.Name)
		}
		for _, k := range o.Labels {
			values = append(values, d.Labels[k])
		}
		var g *row
		if s.aggregated {
			key := strings.Join(values, "\x00")
			if g = groups[key]; g == nil {
				g = &row{labels: values}
				groups[key] = g
				s.rows = append(s.rows, g)
			}
		} else {
			g = &row{labels: values}
			s.rows = append(s.rows, g)
		}
		g.add(d)
	}
	if s.aggregated {
		slices.SortFunc(s.rows, func(a, b *row) int { return slices.Compare(a.labels, b.labels) })
		s.rows = s.fairShare(maxSeries)
	}
	return s
}

func collectClusters(r *fleetapi.Read) []clusterRow {
	now := r.Now()
	var out []clusterRow
	for _, c := range r.Clusters().Items {
		out = append(out, clusterRow{
			name: c.Cluster, age: max(0, now.Sub(c.HeartbeatAt).Seconds()), stale: c.Stale, fleets: c.FleetCount,
		})
	}
	return out
}

// fairShare keeps the sums that fit in maxSeries, each cluster within an
// equal share of it: what one cluster's fleets carry (a label value or a
// counter name per fleet) can leave its own sums out, never another
// cluster's. A sum too large for its cluster's share is left out whole
// and counted; the cluster's next sums may still fit. The rows are sorted
// by cluster first.
func (s *fleets) fairShare(maxSeries int) []*row {
	clusters := 0
	for i, g := range s.rows {
		if i == 0 || g.labels[0] != s.rows[i-1].labels[0] {
			clusters++
		}
	}
	if clusters == 0 {
		return s.rows
	}
	share := maxSeries / clusters
	kept := make([]*row, 0, len(s.rows))
	used := 0
	for i, g := range s.rows {
		if i == 0 || g.labels[0] != s.rows[i-1].labels[0] {
			used = 0
		}
		n := g.series(true)
		if used+n > share {
			s.omitted += n
			continue
		}
		used += n
		kept = append(kept, g)
	}
	return kept
}

func labelNames(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = LabelName(k)
	}
	return out
}

// add sums one fleet into the row.
func (g *row) add(d *fleet.Document) {
	g.fleets++
	if d.Spec != nil {
		g.gauges[0] += float64(d.Spec.Replicas)
	}
	if st := d.Status; st != nil {
		g.gauges[1] += float64(st.Replicas)
		g.gauges[2] += float64(st.ReadyReplicas)
		g.gauges[3] += float64(st.AllocatedReplicas)
		g.gauges[4] += float64(st.ReservedReplicas)
		g.counters = addAvailable(g.counters, st.Counters)
		g.lists = addAvailable(g.lists, st.Lists)
	}
	if d.Rollout != nil {
		g.rollouts++
		if d.Rollout.Complete {
			g.complete++
		}
	}
}

func addAvailable(sum map[string]int64, aggs map[string]fleet.DocAggregate) map[string]int64 {
	if len(aggs) == 0 {
		return sum
	}
	if sum == nil {
		sum = make(map[string]int64, len(aggs))
	}
	for k, a := range aggs {
		sum[k] = fleet.SatAdd(sum[k], a.Available)
	}
	return sum
}

// Aggregated says whether the fleet series are sums.
func (s *Snapshot) Aggregated() bool { return s.aggregated }

// Write encodes the snapshot in format (one expfmt.Negotiate chose): the
// fleets' families, encoded once per format for every scrape that shares
// them, then the clusters'.
func (s *Snapshot) Write(w io.Writer, format expfmt.Format) error {
	b, err := s.fleets.encode(format)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	return encode(w, format, s.clusterFamilies(), true)
}

// encode returns the fleets' families in format, encoding them the first
// time.
func (s *fleets) encode(format expfmt.Format) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.encoded[format]; ok {
		return b, nil
	}
	var buf bytes.Buffer
	if err := encode(&buf, format, s.families(), false); err != nil {
		return nil, err
	}
	if s.encoded == nil {
		s.encoded = map[expfmt.Format][]byte{}
	}
	s.encoded[format] = buf.Bytes()
	return buf.Bytes(), nil
}

// encode writes families in format; closing writes what ends an answer
// (OpenMetrics' "# EOF").
func encode(w io.Writer, format expfmt.Format, families iter.Seq[*dto.MetricFamily], closing bool) error {
	enc := expfmt.NewEncoder(w, format)
	for mf := range families {
		if len(mf.Metric) == 0 {
			continue // the text format has no empty family: expfmt refuses one
		}
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	if c, ok := enc.(expfmt.Closer); ok && closing {
		return c.Close()
	}
	return nil
}

// families builds the fleets' metric families one by one: only one
// family's messages are held at a time.
func (s *fleets) families() iter.Seq[*dto.MetricFamily] {
	return func(yield func(*dto.MetricFamily) bool) {
		// Every row's label pairs, shared by its series of every family.
		pairs := make([][]*dto.LabelPair, len(s.rows))
		for i, g := range s.rows {
			pairs[i] = make([]*dto.LabelPair, len(s.labelNames))
			for j := range s.labelNames {
				pairs[i][j] = &dto.LabelPair{Name: &s.labelNames[j], Value: &g.labels[j]}
			}
		}
		summed := ""
		if s.aggregated {
			summed = " Summed over the series' fleets (fleetcast_fleets)."
		}
		for k, gauge := range fleetGauges {
			if !yield(s.family(gauge.name, gauge.help+summed, pairs, func(g *row) (float64, bool) { return g.gauges[k], true })) {
				return
			}
		}
		rolloutHelp := "1 when the fleet's rollout is complete (its current GameServerSet alone runs all its replicas), 0 while it rolls out; absent while unknown."
		if s.aggregated {
			rolloutHelp = "The fleets whose rollout is complete (of those whose rollout is known)."
		}
		if !yield(s.family(nameRollout, rolloutHelp, pairs, func(g *row) (float64, bool) {
			return float64(g.complete), g.rollouts > 0
		})) {
			return
		}
		if s.aggregated && !yield(s.family(nameFleets, "The live fleets summed into the series.", pairs, func(g *row) (float64, bool) {
			return float64(g.fleets), true
		})) {
			return
		}
		if !yield(s.keyed(nameCounter, "counter", "Capacity the fleet's game servers have left in a counter (capacity - count)."+summed, pairs, func(g *row) map[string]int64 { return g.counters })) {
			return
		}
		if !yield(s.keyed(nameList, "list", "Capacity the fleet's game servers have left in a list (capacity - values)."+summed, pairs, func(g *row) map[string]int64 { return g.lists })) {
			return
		}
	}
}

// clusterFamilies builds the clusters' families and the answer's own.
func (s *Snapshot) clusterFamilies() iter.Seq[*dto.MetricFamily] {
	return func(yield func(*dto.MetricFamily) bool) {
		for _, f := range []struct {
			name, help string
			v          func(c clusterRow) float64
		}{
			{nameHeartbeat, "Seconds since the cluster's publisher took its last snapshot (its heartbeat).", func(c clusterRow) float64 { return c.age }},
			{nameStale, "1 when the cluster's heartbeat is older than STALE_AFTER or its fleets exceed the view's budget: its fleets are left out.", func(c clusterRow) float64 { return b2f(c.stale) }},
			{nameClusterSize, "Fleets the cluster's last snapshot counted.", func(c clusterRow) float64 { return float64(c.fleets) }},
		} {
			mf := newFamily(f.name, f.help, len(s.clusters))
			for _, c := range s.clusters {
				mf.Metric = append(mf.Metric, gaugeMetric(f.v(c), &dto.LabelPair{Name: proto.String("cluster"), Value: proto.String(c.name)}))
			}
			if !yield(mf) {
				return
			}
		}
		for _, f := range []struct {
			name, help string
			v          float64
		}{
			{nameAggregated, "1 when the fleet series are sums by cluster and the label_* labels, 0 when each is one fleet.", b2f(s.aggregated)},
			{nameOmitted, "Series left out of this answer by the series limit (METRICS_MAX_SERIES).", float64(s.omitted)},
		} {
			mf := newFamily(f.name, f.help, 1)
			mf.Metric = append(mf.Metric, gaugeMetric(f.v))
			if !yield(mf) {
				return
			}
		}
	}
}

func (s *fleets) family(name, help string, pairs [][]*dto.LabelPair, value func(*row) (float64, bool)) *dto.MetricFamily {
	mf := newFamily(name, help, len(s.rows))
	sl := newSlab(len(s.rows))
	for i, g := range s.rows {
		if v, ok := value(g); ok {
			mf.Metric = append(mf.Metric, sl.metric(v, pairs[i]))
		}
	}
	return mf
}

// keyed builds a family with one series per row and key of its map.
func (s *fleets) keyed(name, keyLabel, help string, pairs [][]*dto.LabelPair, m func(*row) map[string]int64) *dto.MetricFamily {
	n := 0
	for _, g := range s.rows {
		n += len(m(g))
	}
	mf := newFamily(name, help, n)
	sl := newSlab(n)
	keyPairs := make([]dto.LabelPair, n)
	width := len(s.labelNames) + 1
	labels := make([]*dto.LabelPair, n*width)
	j := 0
	for i, g := range s.rows {
		vals := m(g)
		for _, k := range slices.Sorted(maps.Keys(vals)) {
			kp := &keyPairs[j]
			kp.Name, kp.Value = &keyLabel, proto.String(k)
			lp := labels[j*width : (j+1)*width : (j+1)*width]
			copy(lp, pairs[i])
			lp[width-1] = kp
			mf.Metric = append(mf.Metric, sl.metric(float64(vals[k]), lp))
			j++
		}
	}
	return mf
}

func newFamily(name, help string, n int) *dto.MetricFamily {
	return &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: dto.MetricType_GAUGE.Enum(), Metric: make([]*dto.Metric, 0, n)}
}

// slab hands out one family's messages from three allocations, not three
// a series: at 10 000 fleets a scrape builds about 70 000. Its size is the
// family's count of series, counted before.
type slab struct {
	metrics []dto.Metric
	gauges  []dto.Gauge
	values  []float64
	next    int
}

func newSlab(n int) *slab {
	return &slab{metrics: make([]dto.Metric, n), gauges: make([]dto.Gauge, n), values: make([]float64, n)}
}

func (s *slab) metric(v float64, labels []*dto.LabelPair) *dto.Metric {
	i := s.next
	s.next++
	s.values[i] = v
	s.gauges[i].Value = &s.values[i]
	s.metrics[i].Label, s.metrics[i].Gauge = labels, &s.gauges[i]
	return &s.metrics[i]
}

func gaugeMetric(v float64, labels ...*dto.LabelPair) *dto.Metric {
	return &dto.Metric{Label: labels, Gauge: &dto.Gauge{Value: proto.Float64(v)}}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Names lists every metric name Write may encode, for checks of what
// refers to them (dashboards, scalers, alerts).
func Names() []string {
	out := make([]string, 0, len(fleetGauges)+9)
	for _, g := range fleetGauges {
		out = append(out, g.name)
	}
	return append(out, nameRollout, nameFleets, nameCounter, nameList, nameHeartbeat, nameStale, nameClusterSize, nameAggregated, nameOmitted)
}
