// Package fleetpb converts between the query API's answers (fleetapi) and
// the messages of fleetcast.v1.InformationService, both ways: the query
// function sends them, the Go clients (fleetwatch) read them back.
package fleetpb

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
)

// Fleet is f as a FleetInformation.
func Fleet(f fleetapi.Fleet) *fleetcastv1.FleetInformation {
	return &fleetcastv1.FleetInformation{
		ClusterName: f.Cluster, FleetName: f.Name, Namespace: f.Namespace, Labels: labelsOf(f.Labels),
		AllocatedGameservers: f.AllocatedReplicas, ReadyGameservers: f.ReadyReplicas, ReservedGameservers: f.ReservedReplicas,
		Replicas: f.Replicas, CurrentReplicas: f.CurrentReplicas, Allocations: f.Allocations,
		Players: capacity(f.Players), Counters: aggregates(f.Counters), Lists: aggregates(f.Lists),
		ObservedTime: timestamppb.New(f.ObservedAt), LagMillis: f.LagMillis, Stale: f.Stale,
		Version: &fleetcastv1.Version{Term: f.Version.Term, Seq: f.Version.Seq}, Scheduling: f.Scheduling,
		Degraded: f.Degraded, Annotations: f.Annotations, Rollout: rollout(f.Rollout), Autoscalers: autoscalers(f.Autoscalers),
		GameServerLabels: labelsOf(f.GameServerLabels),
	}
}

// FromFleet is the inverse of Fleet.
func FromFleet(m *fleetcastv1.FleetInformation) fleetapi.Fleet {
	return fleetapi.Fleet{
		Cluster: m.GetClusterName(), Namespace: m.GetNamespace(), Name: m.GetFleetName(), Labels: labelMap(m.GetLabels()),
		Annotations: nilIfEmpty(m.GetAnnotations()), Replicas: m.GetReplicas(), CurrentReplicas: m.GetCurrentReplicas(),
		ReadyReplicas: m.GetReadyGameservers(), AllocatedReplicas: m.GetAllocatedGameservers(), ReservedReplicas: m.GetReservedGameservers(),
		Allocations: m.GetAllocations(), Scheduling: m.GetScheduling(), Players: fromCapacity(m.GetPlayers()),
		Counters: fromAggregates(m.GetCounters()), Lists: fromAggregates(m.GetLists()), ObservedAt: m.GetObservedTime().AsTime(),
		LagMillis: m.GetLagMillis(), Version: fleet.Version{Term: m.GetVersion().GetTerm(), Seq: m.GetVersion().GetSeq()},
		Stale: m.GetStale(), Degraded: m.GetDegraded(), Rollout: fromRollout(m.GetRollout()), Autoscalers: fromAutoscalers(m.GetAutoscalers()),
		GameServerLabels: nilIfEmpty(labelMap(m.GetGameServerLabels())),
	}
}

func rollout(r *fleet.Rollout) *fleetcastv1.Rollout {
	if r == nil {
		return nil
	}
	out := &fleetcastv1.Rollout{Complete: r.Complete}
	for _, s := range r.Sets {
		out.Sets = append(out.Sets, &fleetcastv1.GameServerSet{Name: s.Name, Current: s.Current, Replicas: s.Replicas,
			ReadyGameservers: s.ReadyReplicas, AllocatedGameservers: s.AllocatedReplicas, ReservedGameservers: s.ReservedReplicas})
	}
	return out
}

func fromRollout(m *fleetcastv1.Rollout) *fleet.Rollout {
	if m == nil {
		return nil
	}
	out := &fleet.Rollout{Complete: m.GetComplete()}
	for _, s := range m.GetSets() {
		out.Sets = append(out.Sets, fleet.GameServerSet{Name: s.GetName(), Current: s.GetCurrent(), Replicas: s.GetReplicas(),
			ReadyReplicas: s.GetReadyGameservers(), AllocatedReplicas: s.GetAllocatedGameservers(), ReservedReplicas: s.GetReservedGameservers()})
	}
	return out
}

func autoscalers(as []fleetapi.Autoscaler) []*fleetcastv1.Autoscaler {
	var out []*fleetcastv1.Autoscaler
	for _, a := range as {
		p := a.Policy
		m := &fleetcastv1.Autoscaler{Name: a.Name, SyncSeconds: a.SyncSeconds, CurrentReplicas: a.CurrentReplicas,
			DesiredReplicas: a.DesiredReplicas, AbleToScale: a.AbleToScale, ScalingLimited: a.ScalingLimited,
			Policy: &fleetcastv1.AutoscalerPolicy{Type: p.Type, BufferSize: p.BufferSize, MinReplicas: p.MinReplicas,
				MaxReplicas: p.MaxReplicas, Key: p.Key, MinCapacity: p.MinCapacity, MaxCapacity: p.MaxCapacity, WebhookHost: p.WebhookHost}}
		if a.LastScaleTime != nil {
			m.LastScaleTime = timestamppb.New(*a.LastScaleTime)
		}
		out = append(out, m)
	}
	return out
}

func fromAutoscalers(ms []*fleetcastv1.Autoscaler) []fleetapi.Autoscaler {
	var out []fleetapi.Autoscaler
	for _, m := range ms {
		p := m.GetPolicy()
		a := fleetapi.Autoscaler{Name: m.GetName(), SyncSeconds: m.GetSyncSeconds(), CurrentReplicas: m.GetCurrentReplicas(),
			DesiredReplicas: m.GetDesiredReplicas(), AbleToScale: m.GetAbleToScale(), ScalingLimited: m.GetScalingLimited(),
			Policy: fleet.AutoscalerPolicy{Type: p.GetType(), BufferSize: p.GetBufferSize(), MinReplicas: p.GetMinReplicas(),
				MaxReplicas: p.GetMaxReplicas(), Key: p.GetKey(), MinCapacity: p.GetMinCapacity(), MaxCapacity: p.GetMaxCapacity(), WebhookHost: p.GetWebhookHost()}}
		if m.GetLastScaleTime() != nil {
			t := m.GetLastScaleTime().AsTime()
			a.LastScaleTime = &t
		}
		out = append(out, a)
	}
	return out
}

// Cluster is c as a Cluster message.
func Cluster(c fleetapi.Cluster) *fleetcastv1.Cluster {
	t := c.Totals
	return &fleetcastv1.Cluster{
		ClusterName: c.Cluster, Labels: labelsOf(c.Labels),
		Publisher:     &fleetcastv1.Publisher{Id: c.Publisher.ID, Version: c.Publisher.Version},
		HeartbeatTime: timestamppb.New(c.HeartbeatAt), FleetCount: c.FleetCount,
		Totals: &fleetcastv1.FleetTotals{Replicas: t.Replicas, ReadyGameservers: t.ReadyReplicas, ReservedGameservers: t.ReservedReplicas,
			AllocatedGameservers: t.AllocatedReplicas, Allocations: t.Allocations, Players: capacity(t.Players),
			Counters: aggregates(t.Counters), Lists: aggregates(t.Lists)},
		TotalsTruncated: c.TotalsTruncated, Stale: c.Stale, AllocatorEndpoint: c.AllocatorEndpoint,
	}
}

// FromCluster is the inverse of Cluster.
func FromCluster(m *fleetcastv1.Cluster) fleetapi.Cluster {
	t := m.GetTotals()
	return fleetapi.Cluster{
		Cluster: m.GetClusterName(), Labels: labelMap(m.GetLabels()),
		Publisher:   fleet.Publisher{ID: m.GetPublisher().GetId(), Version: m.GetPublisher().GetVersion()},
		HeartbeatAt: m.GetHeartbeatTime().AsTime(), FleetCount: m.GetFleetCount(),
		Totals: fleet.DocStatus{Replicas: t.GetReplicas(), ReadyReplicas: t.GetReadyGameservers(), ReservedReplicas: t.GetReservedGameservers(),
			AllocatedReplicas: t.GetAllocatedGameservers(), Allocations: t.GetAllocations(), Players: fromCapacity(t.GetPlayers()),
			Counters: fromAggregates(t.GetCounters()), Lists: fromAggregates(t.GetLists())},
		TotalsTruncated: m.GetTotalsTruncated(), Stale: m.GetStale(), AllocatorEndpoint: m.GetAllocatorEndpoint(),
	}
}

// Event is a watch event as a WatchFleetsResponse.
func Event(e fleetapi.Event) *fleetcastv1.WatchFleetsResponse {
	out := &fleetcastv1.WatchFleetsResponse{ResumeToken: e.ResumeToken}
	change := func(t fleetcastv1.ChangeType) {
		out.Event = &fleetcastv1.WatchFleetsResponse_Fleet{Fleet: &fleetcastv1.FleetChange{Type: t, Fleet: Fleet(e.Fleet)}}
	}
	switch e.Kind {
	case fleetapi.Added:
		change(fleetcastv1.ChangeType_CHANGE_TYPE_ADDED)
	case fleetapi.Modified:
		change(fleetcastv1.ChangeType_CHANGE_TYPE_MODIFIED)
	case fleetapi.Removed:
		change(fleetcastv1.ChangeType_CHANGE_TYPE_REMOVED)
	case fleetapi.ClusterChanged:
		out.Event = &fleetcastv1.WatchFleetsResponse_Cluster{Cluster: &fleetcastv1.ClusterChange{Cluster: Cluster(e.Cluster)}}
	case fleetapi.Synced:
		out.Event = &fleetcastv1.WatchFleetsResponse_Synced{Synced: &fleetcastv1.Synced{FleetCount: int32(e.FleetCount)}}
	case fleetapi.Restart:
		out.Event = &fleetcastv1.WatchFleetsResponse_Restart{Restart: &fleetcastv1.Restart{}}
	case fleetapi.Heartbeat:
		out.Event = &fleetcastv1.WatchFleetsResponse_Heartbeat{Heartbeat: &fleetcastv1.Heartbeat{Time: timestamppb.New(e.Time)}}
	}
	return out
}

// FromEvent is the inverse of Event; false for an event this version does
// not know (a newer server's), which a client skips.
func FromEvent(m *fleetcastv1.WatchFleetsResponse) (fleetapi.Event, bool) {
	e := fleetapi.Event{ResumeToken: m.GetResumeToken()}
	switch ev := m.GetEvent().(type) {
	case *fleetcastv1.WatchFleetsResponse_Fleet:
		switch ev.Fleet.GetType() {
		case fleetcastv1.ChangeType_CHANGE_TYPE_ADDED:
			e.Kind = fleetapi.Added
		case fleetcastv1.ChangeType_CHANGE_TYPE_MODIFIED:
			e.Kind = fleetapi.Modified
		case fleetcastv1.ChangeType_CHANGE_TYPE_REMOVED:
			e.Kind = fleetapi.Removed
		default:
			return e, false
		}
		e.Fleet = FromFleet(ev.Fleet.GetFleet())
	case *fleetcastv1.WatchFleetsResponse_Cluster:
		e.Kind, e.Cluster = fleetapi.ClusterChanged, FromCluster(ev.Cluster.GetCluster())
	case *fleetcastv1.WatchFleetsResponse_Synced:
		e.Kind, e.FleetCount = fleetapi.Synced, int(ev.Synced.GetFleetCount())
	case *fleetcastv1.WatchFleetsResponse_Restart:
		e.Kind = fleetapi.Restart
	case *fleetcastv1.WatchFleetsResponse_Heartbeat:
		e.Kind, e.Time = fleetapi.Heartbeat, ev.Heartbeat.GetTime().AsTime()
	default:
		return e, false
	}
	return e, true
}

// Filter is the FleetFilter of q's filters (not its order or page).
func Filter(q fleetapi.Query) *fleetcastv1.FleetFilter {
	f := &fleetcastv1.FleetFilter{Clusters: q.Clusters, Namespace: q.Namespace, MinReady: q.MinReady,
		Counter: q.Counter, MinCounterAvailable: q.MinAvailable, List: q.List, MinListAvailable: q.MinListAvail, IncludeStale: q.IncludeStale,
		RolloutComplete: q.RolloutComplete}
	if q.Selector != nil && !q.Selector.Empty() {
		f.Selector = q.Selector.String()
	}
	return f
}

// FilterValues returns a FleetFilter as the parameters of /v1/fleets, for
// fleetapi.ParseQuery to validate as it does those.
func FilterValues(f *fleetcastv1.FleetFilter) url.Values {
	v := url.Values{}
	for _, c := range f.GetClusters() {
		v.Add("cluster", c)
	}
	set := func(name, value string, given bool) {
		if given {
			v.Set(name, value)
		}
	}
	set("namespace", f.GetNamespace(), f.GetNamespace() != "")
	set("selector", f.GetSelector(), f.GetSelector() != "")
	set("minReady", strconv.FormatInt(f.GetMinReady(), 10), f.GetMinReady() != 0)
	set("counter", f.GetCounter(), f.GetCounter() != "")
	set("minAvailable", strconv.FormatInt(f.GetMinCounterAvailable(), 10), f.GetMinCounterAvailable() != 0)
	set("list", f.GetList(), f.GetList() != "")
	set("minListAvailable", strconv.FormatInt(f.GetMinListAvailable(), 10), f.GetMinListAvailable() != 0)
	if f != nil && f.RolloutComplete != nil {
		v.Set("rolloutComplete", strconv.FormatBool(f.GetRolloutComplete()))
	}
	set("includeStale", "true", f.GetIncludeStale())
	return v
}

// labelsOf lists labels in key order, so that answers are deterministic.
func labelsOf(m map[string]string) []*fleetcastv1.Label {
	out := make([]*fleetcastv1.Label, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, &fleetcastv1.Label{Key: k, Value: m[k]})
	}
	return out
}

func labelMap(l []*fleetcastv1.Label) map[string]string {
	out := make(map[string]string, len(l))
	for _, x := range l {
		out[x.GetKey()] = x.GetValue()
	}
	return out
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func capacity(c fleet.DocCapacity) *fleetcastv1.Capacity {
	return &fleetcastv1.Capacity{Count: c.Count, Capacity: c.Capacity, Available: c.Available}
}

func fromCapacity(c *fleetcastv1.Capacity) fleet.DocCapacity {
	return fleet.DocCapacity{Count: c.GetCount(), Capacity: c.GetCapacity(), Available: c.GetAvailable()}
}

func aggregates(m map[string]fleet.DocAggregate) map[string]*fleetcastv1.Aggregate {
	out := make(map[string]*fleetcastv1.Aggregate, len(m))
	for k, a := range m {
		out[k] = &fleetcastv1.Aggregate{Count: a.Count, Capacity: a.Capacity, AllocatedCount: a.AllocatedCount,
			AllocatedCapacity: a.AllocatedCapacity, Available: a.Available}
	}
	return out
}

func fromAggregates(m map[string]*fleetcastv1.Aggregate) map[string]fleet.DocAggregate {
	out := make(map[string]fleet.DocAggregate, len(m))
	for k, a := range m {
		out[k] = fleet.DocAggregate{Count: a.GetCount(), Capacity: a.GetCapacity(), AllocatedCount: a.GetAllocatedCount(),
			AllocatedCapacity: a.GetAllocatedCapacity(), Available: a.GetAvailable()}
	}
	return out
}

// PlaceValues are a PlaceRequest as the parameters of GET
// /v1/placements, which fleetapi.ParsePlace reads and checks, so that
// both edges refuse alike; each rule is SELECTOR:PRIORITY:WEIGHT.
func PlaceValues(m *fleetcastv1.PlaceRequest) url.Values {
	v := FilterValues(m.GetFilter())
	if m.GetCount() != 0 {
		v.Set("count", strconv.Itoa(int(m.GetCount())))
	}
	if m.GetGameServers() != 0 {
		v.Set("gameServers", strconv.FormatInt(m.GetGameServers(), 10))
	}
	if m.GetPlayers() != 0 {
		v.Set("players", strconv.FormatInt(m.GetPlayers(), 10))
	}
	for _, r := range m.GetPolicy() {
		weight := int32(1)
		if r.Weight != nil {
			weight = r.GetWeight()
		}
		v.Add("policy", fmt.Sprintf("%s:%d:%d", r.GetClusterSelector(), r.GetPriority(), weight))
	}
	return v
}

// PlaceRequest is r as the InformationService's request (but Rand).
func PlaceRequest(r fleetapi.PlaceRequest) *fleetcastv1.PlaceRequest {
	q := r.Filter
	q.Counter, q.MinAvailable, q.List, q.MinListAvail = r.Need.Counter, r.Need.CounterAvailable, r.Need.List, r.Need.ListAvailable
	m := &fleetcastv1.PlaceRequest{Filter: Filter(q), GameServers: r.Need.GameServers, Players: r.Need.Players, Count: int32(r.Count)}
	if r.Policy != nil {
		for _, rule := range r.Policy.Rules {
			sel := ""
			if rule.Clusters != nil {
				sel = rule.Clusters.String()
			}
			m.Policy = append(m.Policy, &fleetcastv1.PlacementRule{ClusterSelector: sel, Priority: rule.Priority, Weight: &rule.Weight})
		}
		if len(r.Policy.Rules) == 0 { // every cluster alike
			m.Policy = []*fleetcastv1.PlacementRule{{}}
		}
	}
	return m
}

var reasonOf = map[fleetapi.Reason]fleetcastv1.LeftOutReason{
	fleetapi.FilteredOut:       fleetcastv1.LeftOutReason_LEFT_OUT_REASON_FILTERED_OUT,
	fleetapi.StaleCluster:      fleetcastv1.LeftOutReason_LEFT_OUT_REASON_STALE,
	fleetapi.NotInPolicy:       fleetcastv1.LeftOutReason_LEFT_OUT_REASON_NOT_IN_POLICY,
	fleetapi.TooLittleCapacity: fleetcastv1.LeftOutReason_LEFT_OUT_REASON_TOO_LITTLE_CAPACITY,
}

// Placements is p as the InformationService's answer.
func Placements(p fleetapi.Placements) *fleetcastv1.PlaceResponse {
	out := &fleetcastv1.PlaceResponse{Eligible: int32(p.Eligible), Policy: p.Policy, PolicySource: p.PolicySource,
		UnavailableClusters: p.UnavailableClusters}
	for _, c := range p.Placements {
		out.Placements = append(out.Placements, &fleetcastv1.Placement{ClusterName: c.Cluster, Namespace: c.Namespace, FleetName: c.Name,
			Labels: labelsOf(c.Labels), AllocatorEndpoint: c.AllocatorEndpoint, Resource: c.Resource, Available: c.Available,
			ReadyGameservers: c.ReadyReplicas, Priority: c.Priority, Weight: c.Weight, ObservedTime: timestamppb.New(c.ObservedAt),
			LagMillis: c.LagMillis, HeartbeatAgeMillis: c.HeartbeatAgeMillis, Stale: c.Stale, DrawKey: c.DrawKey})
	}
	for _, l := range p.LeftOut {
		out.LeftOut = append(out.LeftOut, &fleetcastv1.LeftOut{Reason: reasonOf[l.Reason], Fleets: int32(l.Fleets), Clusters: l.Clusters,
			ClusterCount: int32(l.ClusterCount), Message: l.Message})
	}
	return out
}

// FromPlacements is the inverse of Placements.
func FromPlacements(m *fleetcastv1.PlaceResponse) fleetapi.Placements {
	out := fleetapi.Placements{Placements: []fleetapi.Placement{}, Eligible: int(m.GetEligible()), LeftOut: []fleetapi.LeftOut{},
		Policy: m.GetPolicy(), PolicySource: m.GetPolicySource(), UnavailableClusters: m.GetUnavailableClusters()}
	if out.Policy == nil {
		out.Policy = []string{}
	}
	for _, c := range m.GetPlacements() {
		out.Placements = append(out.Placements, fleetapi.Placement{Cluster: c.GetClusterName(), Namespace: c.GetNamespace(), Name: c.GetFleetName(),
			Labels: labelMap(c.GetLabels()), AllocatorEndpoint: c.GetAllocatorEndpoint(), Resource: c.GetResource(), Available: c.GetAvailable(),
			ReadyReplicas: c.GetReadyGameservers(), Priority: c.GetPriority(), Weight: c.GetWeight(), ObservedAt: c.GetObservedTime().AsTime(),
			LagMillis: c.GetLagMillis(), HeartbeatAgeMillis: c.GetHeartbeatAgeMillis(), Stale: c.GetStale(), DrawKey: c.GetDrawKey()})
	}
	for _, l := range m.GetLeftOut() {
		r := fleetapi.Reason("")
		for k, v := range reasonOf {
			if v == l.GetReason() {
				r = k
			}
		}
		clusters := l.GetClusters()
		if clusters == nil {
			clusters = []string{}
		}
		out.LeftOut = append(out.LeftOut, fleetapi.LeftOut{Reason: r, Fleets: int(l.GetFleets()), Clusters: clusters,
			ClusterCount: int(l.GetClusterCount()), Message: l.GetMessage()})
	}
	return out
}
