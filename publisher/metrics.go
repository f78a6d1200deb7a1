package publisher

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the publisher's Prometheus metrics.
type Metrics struct {
	// Publishes counts publish attempts by event kind and result (ok, error).
	Publishes *prometheus.CounterVec
	// InformerEvents counts informer notifications by type (add, update, delete).
	InformerEvents *prometheus.CounterVec
	// Coalesced counts changes folded into a later publish of their fleet.
	Coalesced prometheus.Counter
	// Unchanged counts updates whose projection equals what was published.
	Unchanged prometheus.Counter
	// Invalid counts fleets that could not be projected into a valid state.
	Invalid prometheus.Counter
	// Refreshed counts last events re-sent by the refresh.
	Refreshed prometheus.Counter
	// Degraded counts fleet updates published with parts of their state
	// dropped to fit (fleet.Fit).
	Degraded prometheus.Counter
	// Unvouched counts fleets left out of snapshots because Pub/Sub
	// refused their last event.
	Unvouched prometheus.Counter
	// InvalidSnapshots counts snapshots not taken because they would be
	// invalid (none should be: totals are bounded).
	InvalidSnapshots prometheus.Counter
	// PublishLatency is the time from stamping an event to Pub/Sub's ack.
	PublishLatency prometheus.Histogram
	// LastSnapshot is the Unix time of the last snapshot stamped.
	LastSnapshot prometheus.Gauge
	// Leader is 1 while this instance publishes.
	Leader prometheus.Gauge
	// Term is the current term (0 while not leader).
	Term prometheus.Gauge
	// OrphanAutoscalers counts FleetAutoscalers targeting a fleet that is
	// not published; SharedFleets the fleets several autoscalers target.
	OrphanAutoscalers prometheus.Gauge
	SharedFleets      prometheus.Gauge
	// SourceListed is 1 for each optional resource (gameserversets,
	// fleetautoscalers) of each watched namespace the publisher lists,
	// and 0 while it cannot: its fleets publish with that part unknown.
	SourceListed *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg, with a gauge
// of the pending fleets that calls pending at every scrape.
func NewMetrics(reg prometheus.Registerer, pending func() float64) (*Metrics, error) {
	m := &Metrics{
		Publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetcast_publisher_publishes_total",
			Help: "Publish attempts to Pub/Sub, by event kind and result.",
		}, []string{"kind", "result"}),
		InformerEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetcast_publisher_informer_events_total",
			Help: "Fleet notifications from the informer, by type.",
		}, []string{"type"}),
		Coalesced: counter("fleetcast_publisher_coalesced_updates_total",
			"Fleet changes folded into a later publish of the same fleet (min interval)."),
		Unchanged: counter("fleetcast_publisher_unchanged_updates_total",
			"Fleet updates that changed nothing that is published."),
		Invalid: counter("fleetcast_publisher_invalid_fleets_total",
			"Fleet updates skipped because they could not be projected into a valid state."),
		PublishLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fleetcast_publisher_publish_latency_seconds",
			Help:    "Time from stamping an event to its acknowledgement by Pub/Sub, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		Refreshed: counter("fleetcast_publisher_refreshed_total",
			"Fleets' last events re-sent unchanged (--refresh-interval), to heal messages lost after Pub/Sub accepted them."),
		Degraded: counter("fleetcast_publisher_degraded_fleets_total",
			"Fleet updates published with parts of their state dropped to fit (logged at ERROR)."),
		Unvouched: counter("fleetcast_publisher_unvouched_fleets_total",
			"Fleets left out of snapshots because Pub/Sub refused their last event."),
		InvalidSnapshots: counter("fleetcast_publisher_invalid_snapshots_total",
			"Snapshots not taken because they would be invalid (logged at ERROR): no heartbeat that time."),
		LastSnapshot: gauge("fleetcast_publisher_last_snapshot_timestamp_seconds",
			"Unix time of the last snapshot stamped."),
		Leader: gauge("fleetcast_publisher_leader",
			"1 while this instance is the cluster's writer."),
		Term: gauge("fleetcast_publisher_term",
			"The current term, the fencing token of this instance's events."),
		OrphanAutoscalers: gauge("fleetcast_publisher_orphan_autoscalers",
			"FleetAutoscalers targeting a fleet that is not published (missing, or outside --label-selector); each logged at WARNING."),
		SharedFleets: gauge("fleetcast_publisher_shared_autoscaler_fleets",
			"Fleets that more than one FleetAutoscaler targets; each logged at WARNING, all listed in the fleet's state."),
		SourceListed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetcast_publisher_source_listed",
			Help: "1 while the publisher lists an optional resource in a namespace (\"\" for all), 0 while it cannot (a Role without it, a cluster without its CRD; logged at ERROR): fleets publish with their rollout or autoscalers unknown.",
		}, []string{"resource", "namespace"}),
	}
	for _, c := range []prometheus.Collector{
		m.OrphanAutoscalers, m.SharedFleets, m.SourceListed,
		m.Publishes, m.InformerEvents, m.Coalesced, m.Unchanged, m.Invalid, m.Refreshed, m.InvalidSnapshots, m.Degraded, m.Unvouched,
		m.PublishLatency, m.LastSnapshot, m.Leader, m.Term,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fleetcast_publisher_pending_fleets",
			Help: "Fleets with an event not yet acknowledged by Pub/Sub or a trailing publish pending.",
		}, pending),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}
