package fleetapi

import (
	"cmp"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"

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
	// GameServerLabels are the labels the fleet's template gives its game
	// servers; absent when none.
	GameServerLabels map[string]string `json:"gameServerLabels,omitempty"`
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
	// UnavailableClusters are the clusters of the partitions that did
	// not answer (Partitions): their fleets are missing from the answer.
	UnavailableClusters []string `json:"unavailableClusters,omitempty"`
}

// NewFleet shapes a live document.
func NewFleet(d *fleet.Document, stale bool) Fleet {
	f := Fleet{
		Cluster: d.Cluster, Namespace: d.Namespace, Name: d.Name,
		Labels: nonNil(d.Labels), Annotations: d.Annotations, GameServerLabels: d.GameServerLabels,
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
	// UnavailableClusters are the clusters of the partitions that did
	// not answer (Partitions): their fleets are not counted.
	UnavailableClusters []string `json:"unavailableClusters,omitempty"`
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
