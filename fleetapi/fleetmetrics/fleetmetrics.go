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
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/common/expfmt"
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
	zipped  map[expfmt.Format]*gzipped
}

// Collect copies the figures from a reading. It allocates what it copies
// and reads no store: call it inside fleetapi.Service.Read, and Write
// after. A Cache collects the fleets' once per version of the view.
func Collect(r *fleetapi.Read, o Options) *Snapshot {
	return &Snapshot{fleets: collectFleets(r, o), clusters: collectClusters(r)}
}

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

// Names lists every metric name Write may encode, for checks of what
// refers to them (dashboards, scalers, alerts).
func Names() []string {
	out := make([]string, 0, len(fleetGauges)+9)
	for _, g := range fleetGauges {
		out = append(out, g.name)
	}
	return append(out, nameRollout, nameFleets, nameCounter, nameList, nameHeartbeat, nameStale, nameClusterSize, nameAggregated, nameOmitted)
}
