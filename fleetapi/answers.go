package fleetapi

import (
	"cmp"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetcast/fleetcast/fleet"
)

// Fleet is one fleet in the query API.
type Fleet struct {
	Cluster           string                        `json:"cluster"`
	Namespace         string                        `json:"namespace"`
	Name              string                        `json:"name"`
	Labels            map[string]string             `json:"labels"`
	Annotations       map[string]string             `json:"annotations,omitempty"`
	Replicas          int64                         `json:"replicas"`
	CurrentReplicas   int64                         `json:"currentReplicas"`
	ReadyReplicas     int64                         `json:"readyReplicas"`
	AllocatedReplicas int64                         `json:"allocatedReplicas"`
	ReservedReplicas  int64                         `json:"reservedReplicas"`
	Allocations       int64                         `json:"allocations"`
	Scheduling        string                        `json:"scheduling,omitempty"`
	Players           fleet.DocCapacity             `json:"players"`
	Counters          map[string]fleet.DocAggregate `json:"counters"`
	Lists             map[string]fleet.DocAggregate `json:"lists"`
	ObservedAt        time.Time                     `json:"observedAt"`
	LagMillis         int64                         `json:"lagMillis"`
	Version           fleet.Version                 `json:"version"`
	Stale             bool                          `json:"stale"`
	// Degraded says what the publisher dropped from the state, and why.
	Degraded string `json:"degraded,omitempty"`
	// Rollout is absent while unknown; Autoscalers when none targets the
	// fleet.
	Rollout     *fleet.Rollout `json:"rollout,omitempty"`
	Autoscalers []Autoscaler   `json:"autoscalers,omitempty"`
}

// Autoscaler is a FleetAutoscaler targeting a fleet.
type Autoscaler struct {
	Name            string                 `json:"name"`
	Policy          fleet.AutoscalerPolicy `json:"policy"`
	SyncSeconds     int64                  `json:"syncSeconds"`
	CurrentReplicas int64                  `json:"currentReplicas"`
	DesiredReplicas int64                  `json:"desiredReplicas"`
	AbleToScale     bool                   `json:"ableToScale"`
	ScalingLimited  bool                   `json:"scalingLimited"`
	// LastScaleTime is absent when it never scaled.
	LastScaleTime *time.Time `json:"lastScaleTime,omitempty"`
}

// newAutoscaler shapes a document's autoscaler.
func newAutoscaler(a fleet.Autoscaler) Autoscaler {
	out := Autoscaler{Name: a.Name, Policy: a.Policy, SyncSeconds: a.SyncSeconds,
		CurrentReplicas: a.Status.CurrentReplicas, DesiredReplicas: a.Status.DesiredReplicas,
		AbleToScale: a.Status.AbleToScale, ScalingLimited: a.Status.ScalingLimited}
	if a.Status.LastScaleTime != 0 {
		t := a.Status.LastScaleTime.Time()
		out.LastScaleTime = &t
	}
	return out
}

// FleetList is a page of fleets.
type FleetList struct {
	Items         []Fleet `json:"items"`
	NextPageToken string  `json:"nextPageToken,omitempty"`
	// TotalSize counts the fleets matching the query, over every page.
	TotalSize int `json:"totalSize"`
}

// NewFleet shapes a live document.
func NewFleet(d *fleet.Document, stale bool) Fleet {
	f := Fleet{
		Cluster: d.Cluster, Namespace: d.Namespace, Name: d.Name,
		Labels: nonNil(d.Labels), Annotations: d.Annotations,
		ObservedAt: d.ObservedAt, LagMillis: d.LagMillis, Version: d.Version, Stale: stale, Degraded: d.Degraded,
		Counters: map[string]fleet.DocAggregate{}, Lists: map[string]fleet.DocAggregate{},
	}
	if d.Spec != nil {
		f.Replicas, f.Scheduling = d.Spec.Replicas, d.Spec.Scheduling
	}
	if s := d.Status; s != nil {
		f.CurrentReplicas, f.ReadyReplicas, f.AllocatedReplicas = s.Replicas, s.ReadyReplicas, s.AllocatedReplicas
		f.ReservedReplicas, f.Allocations, f.Players = s.ReservedReplicas, s.Allocations, s.Players
		f.Counters, f.Lists = nonNil(s.Counters), nonNil(s.Lists)
	}
	f.Rollout = d.Rollout
	for _, a := range d.Autoscalers {
		f.Autoscalers = append(f.Autoscalers, newAutoscaler(a))
	}
	return f
}

// Cluster is one cluster in the query API.
type Cluster struct {
	Cluster     string            `json:"cluster"`
	Labels      map[string]string `json:"labels"`
	Publisher   fleet.Publisher   `json:"publisher"`
	HeartbeatAt time.Time         `json:"heartbeatAt"`
	FleetCount  int64             `json:"fleetCount"`
	Totals      fleet.DocStatus   `json:"totals"`
	// TotalsTruncated: Totals hold only the fleet.MaxAggregates counters
	// and lists of the largest capacity.
	TotalsTruncated bool `json:"totalsTruncated"`
	Stale           bool `json:"stale"`
	// OverBudget: its fleets exceed the instance's memory budget and are
	// left out of its view (it is stale) until its next full load.
	OverBudget bool `json:"overBudget,omitempty"`
	// AllocatorEndpoint is where to allocate game servers in the cluster:
	// its Agones allocator service, host:port, as its publisher advertises
	// it; empty when it does not.
	AllocatorEndpoint string `json:"allocatorEndpoint,omitempty"`
}

// ClusterList lists every cluster.
type ClusterList struct {
	Items []Cluster `json:"items"`
}

// NewCluster shapes a cluster document.
func NewCluster(c *fleet.ClusterDocument, stale bool) Cluster {
	t := c.Totals
	t.Counters, t.Lists = nonNil(t.Counters), nonNil(t.Lists)
	return Cluster{
		Cluster: c.Cluster, Labels: nonNil(c.Labels), Publisher: c.Publisher, HeartbeatAt: c.HeartbeatAt,
		FleetCount: c.FleetCount, Totals: t, TotalsTruncated: c.TotalsTruncated, Stale: stale, AllocatorEndpoint: c.AllocatorEndpoint,
	}
}

// LabelValues answers "which values of this label are deployed where".
type LabelValues struct {
	Key    string       `json:"key"`
	Values []LabelValue `json:"values"`
}

// LabelValue is one value of a label across live fleets.
type LabelValue struct {
	Value             string   `json:"value"`
	Fleets            int64    `json:"fleets"`
	ReadyReplicas     int64    `json:"readyReplicas"`
	AllocatedReplicas int64    `json:"allocatedReplicas"`
	Clusters          []string `json:"clusters"`
}

// aggregateLabel sums the live documents carrying label key by value,
// most fleets first, then by value.
func aggregateLabel(key string, docs iter.Seq[*fleet.Document]) LabelValues {
	byValue := map[string]*LabelValue{}
	clusters := map[string]map[string]bool{}
	for d := range docs {
		v, ok := d.Labels[key]
		if d.Deleted || !ok {
			continue
		}
		lv := byValue[v]
		if lv == nil {
			lv = &LabelValue{Value: v}
			byValue[v] = lv
			clusters[v] = map[string]bool{}
		}
		lv.Fleets++
		if d.Status != nil {
			lv.ReadyReplicas = fleet.SatAdd(lv.ReadyReplicas, d.Status.ReadyReplicas)
			lv.AllocatedReplicas = fleet.SatAdd(lv.AllocatedReplicas, d.Status.AllocatedReplicas)
		}
		clusters[v][d.Cluster] = true
	}
	out := LabelValues{Key: key, Values: []LabelValue{}}
	for v, lv := range byValue {
		lv.Clusters = slices.Sorted(maps.Keys(clusters[v]))
		out.Values = append(out.Values, *lv)
	}
	slices.SortFunc(out.Values, func(a, b LabelValue) int {
		return cmp.Or(cmp.Compare(b.Fleets, a.Fleets), strings.Compare(a.Value, b.Value))
	})
	return out
}

func nonNil[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// Encodable reports why an answer holding d could not be encoded, or nil:
// a time outside years 1 to 9999 (what both Go's JSON encoding of a time
// and a protobuf Timestamp can express) or a string that is not UTF-8
// (protobuf's strings must be). The ingest function never stores such a
// document; one written by anything else is left out of the view, so that
// it fails no answer about the others.
func Encodable(d *fleet.Document) error {
	var bad []string
	t := func(field string, v time.Time) {
		if v.Before(firstAnswerable) || v.After(lastAnswerable) {
			bad = append(bad, field)
		}
	}
	s := func(field string, vs ...string) {
		for _, v := range vs {
			if !utf8.ValidString(v) {
				bad = append(bad, field)
				return
			}
		}
	}
	t("observedAt", d.ObservedAt)
	s("cluster, namespace, name", d.Cluster, d.Namespace, d.Name)
	s("degraded", d.Degraded)
	s("publisher", d.Publisher.ID, d.Publisher.Version)
	for k, v := range d.Labels {
		s("labels", k, v)
	}
	for k, v := range d.Annotations {
		s("annotations", k, v)
	}
	if d.Spec != nil {
		s("spec", d.Spec.Scheduling, d.Spec.StrategyType)
	}
	if d.Status != nil {
		for k := range d.Status.Counters {
			s("status.counters", k)
		}
		for k := range d.Status.Lists {
			s("status.lists", k)
		}
	}
	if d.Rollout != nil {
		for _, set := range d.Rollout.Sets {
			s("rollout.sets", set.Name)
		}
	}
	for _, a := range d.Autoscalers {
		s("autoscalers", a.Name, a.Policy.Type, a.Policy.BufferSize, a.Policy.Key, a.Policy.WebhookHost)
		if a.Status.LastScaleTime < 0 || a.Status.LastScaleTime > fleet.MaxMicros {
			bad = append(bad, "autoscalers.status.lastScaleTime")
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("cannot be answered: %s out of range or not UTF-8", strings.Join(slices.Compact(bad), ", "))
	}
	return nil
}

// ClusterEncodable is Encodable for a cluster document.
func ClusterEncodable(c *fleet.ClusterDocument) error {
	var bad []string
	if c.HeartbeatAt.Before(firstAnswerable) || c.HeartbeatAt.After(lastAnswerable) {
		bad = append(bad, "heartbeatAt")
	}
	ok := utf8.ValidString(c.Cluster) && utf8.ValidString(c.Publisher.ID) && utf8.ValidString(c.Publisher.Version)
	for k, v := range c.Labels {
		ok = ok && utf8.ValidString(k) && utf8.ValidString(v)
	}
	for k := range c.Totals.Counters {
		ok = ok && utf8.ValidString(k)
	}
	for k := range c.Totals.Lists {
		ok = ok && utf8.ValidString(k)
	}
	if !ok {
		bad = append(bad, "a string")
	}
	if len(bad) > 0 {
		return fmt.Errorf("cannot be answered: %s out of range or not UTF-8", strings.Join(bad, ", "))
	}
	return nil
}

// The times an answer can hold: years 1 to 9999.
var (
	firstAnswerable = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	lastAnswerable  = fleet.MaxMicros.Time().Add(999 * time.Nanosecond)
)

// docBytes estimates the heap a document takes in the view: its fixed part
// (the document, its status, its entry and its place in the view's indexes),
// each string, and each map entry with the map's overhead (measured: a label
// of 314 bytes takes about 410, a counter about 100). BenchmarkInstanceMemory
// holds it against the heap: 10 000 typical fleets count 15.4 MiB and take
// 15.3, at fleet.MaxStateBytes they count 135 and take 131. The view and
// the feed are bounded by it.
func docBytes(d *fleet.Document) int {
	if d == nil {
		return 0
	}
	const fixed, entry, aggregate = 1280, 64, 48
	n := fixed + len(d.Cluster) + len(d.Namespace) + len(d.Name) + len(d.UID) + len(d.DocID) + len(d.Degraded) +
		len(d.Publisher.ID) + len(d.Publisher.Version)
	for k, v := range d.Labels {
		n += entry + len(k) + len(v)
	}
	for k, v := range d.Annotations {
		n += entry + len(k) + len(v)
	}
	if d.Status != nil {
		for k := range d.Status.Counters {
			n += entry + aggregate + len(k)
		}
		for k := range d.Status.Lists {
			n += entry + aggregate + len(k)
		}
	}
	if d.Rollout != nil {
		for _, s := range d.Rollout.Sets {
			n += entry + len(s.Name)
		}
	}
	for _, a := range d.Autoscalers {
		n += 2*entry + len(a.Name) + len(a.Policy.Type) + len(a.Policy.BufferSize) + len(a.Policy.Key) + len(a.Policy.WebhookHost)
	}
	return n
}
