package query

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
)

// information serves fleetcast.v1.InformationService (schemas/fleetcast/v1)
// with connect-go: the Connect protocol, gRPC-Web and gRPC, from the same
// view as the /v1 HTTP API. Its answers are that API's, in protobuf.
type information struct {
	fleetcastv1connect.UnimplementedInformationServiceHandler // WatchFleets: the next step of issue 12
	svc                                                       *fleetapi.Service
	log                                                       *slog.Logger
}

// fieldOf names, for each /v1/fleets parameter, the field of an
// InformRequest that carries it.
var fieldOf = map[string]string{
	"cluster": "filter.clusters", "namespace": "filter.namespace", "selector": "filter.selector",
	"minReady": "filter.min_ready", "counter": "filter.counter", "minAvailable": "filter.min_counter_available",
	"list": "filter.list", "minListAvailable": "filter.min_list_available", "includeStale": "filter.include_stale",
	"orderBy": "order_by", "pageSize": "page_size", "pageToken": "page_token", "key": "key",
}

// informQuery turns an InformRequest into the query /v1/fleets would
// parse, so that both validate alike.
func informQuery(req *fleetcastv1.InformRequest) (fleetapi.Query, error) {
	v := url.Values{}
	f := req.GetFilter()
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
	set("includeStale", "true", f.GetIncludeStale())
	switch req.GetOrderBy() {
	case fleetcastv1.OrderBy_ORDER_BY_UNSPECIFIED:
	case fleetcastv1.OrderBy_ORDER_BY_READY:
		v.Set("orderBy", fleetapi.OrderByReady)
	case fleetcastv1.OrderBy_ORDER_BY_AVAILABLE:
		v.Set("orderBy", fleetapi.OrderByAvailable)
	default:
		return fleetapi.Query{}, &fleetapi.Error{Code: fleetapi.InvalidArgument, Param: "orderBy", Message: "not an OrderBy value"}
	}
	set("pageSize", strconv.Itoa(int(req.GetPageSize())), req.GetPageSize() != 0)
	set("pageToken", req.GetPageToken(), req.GetPageToken() != "")
	return fleetapi.ParseQuery(v)
}

// fail maps the read model's errors to Connect codes, logging faults as
// /v1 does; a bad parameter is named by its field.
func (s *information) fail(ctx context.Context, procedure string, err error) error {
	e := logFault(ctx, s.log, procedure, err)
	switch e.Code {
	case fleetapi.InvalidArgument:
		field := fieldOf[e.Param]
		if field == "" {
			field = e.Param
		}
		return connect.NewError(connect.CodeInvalidArgument, errors.New(field+": "+e.Message))
	case fleetapi.NotFound:
		return connect.NewError(connect.CodeNotFound, errors.New(e.Message))
	case fleetapi.Unavailable:
		return connect.NewError(connect.CodeUnavailable, errors.New(e.Message))
	}
	return connect.NewError(connect.CodeInternal, errors.New("the query failed; see the function's logs"))
}

// Inform answers the live fleets matching the request, as /v1/fleets.
func (s *information) Inform(ctx context.Context, req *connect.Request[fleetcastv1.InformRequest]) (*connect.Response[fleetcastv1.InformResponse], error) {
	q, err := informQuery(req.Msg)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	l, err := s.svc.ListFleets(ctx, q)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	out := &fleetcastv1.InformResponse{NextPageToken: l.NextPageToken, TotalSize: int32(l.TotalSize)}
	for _, f := range l.Items {
		out.FleetInformation = append(out.FleetInformation, fleetInformation(f))
	}
	return connect.NewResponse(out), nil
}

// ListClusters answers every cluster, as /v1/clusters.
func (s *information) ListClusters(ctx context.Context, req *connect.Request[fleetcastv1.ListClustersRequest]) (*connect.Response[fleetcastv1.ListClustersResponse], error) {
	l, err := s.svc.ListClusters(ctx)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	out := &fleetcastv1.ListClustersResponse{}
	for _, c := range l.Items {
		out.Clusters = append(out.Clusters, cluster(c))
	}
	return connect.NewResponse(out), nil
}

// LabelValues sums the live fleets carrying a label, as /v1/labels/{key}.
func (s *information) LabelValues(ctx context.Context, req *connect.Request[fleetcastv1.LabelValuesRequest]) (*connect.Response[fleetcastv1.LabelValuesResponse], error) {
	lv, err := s.svc.LabelValues(ctx, req.Msg.GetKey(), req.Msg.GetIncludeStale())
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	out := &fleetcastv1.LabelValuesResponse{Key: lv.Key}
	for _, v := range lv.Values {
		out.Values = append(out.Values, &fleetcastv1.LabelValue{Value: v.Value, Fleets: v.Fleets,
			ReadyGameservers: v.ReadyReplicas, AllocatedGameservers: v.AllocatedReplicas, Clusters: v.Clusters})
	}
	return connect.NewResponse(out), nil
}

func fleetInformation(f fleetapi.Fleet) *fleetcastv1.FleetInformation {
	return &fleetcastv1.FleetInformation{
		ClusterName: f.Cluster, FleetName: f.Name, Namespace: f.Namespace, Labels: labelsOf(f.Labels),
		AllocatedGameservers: f.AllocatedReplicas, ReadyGameservers: f.ReadyReplicas, ReservedGameservers: f.ReservedReplicas,
		Replicas: f.Replicas, CurrentReplicas: f.CurrentReplicas, Allocations: f.Allocations,
		Players: capacity(f.Players), Counters: aggregates(f.Counters), Lists: aggregates(f.Lists),
		ObservedTime: timestamppb.New(f.ObservedAt), LagMillis: f.LagMillis, Stale: f.Stale,
		Version: &fleetcastv1.Version{Term: f.Version.Term, Seq: f.Version.Seq}, Scheduling: f.Scheduling,
		Degraded: f.Degraded, Annotations: f.Annotations,
	}
}

func cluster(c fleetapi.Cluster) *fleetcastv1.Cluster {
	t := c.Totals
	return &fleetcastv1.Cluster{
		ClusterName: c.Cluster, Labels: labelsOf(c.Labels),
		Publisher:     &fleetcastv1.Publisher{Id: c.Publisher.ID, Version: c.Publisher.Version},
		HeartbeatTime: timestamppb.New(c.HeartbeatAt), FleetCount: c.FleetCount,
		Totals: &fleetcastv1.FleetTotals{Replicas: t.Replicas, ReadyGameservers: t.ReadyReplicas, ReservedGameservers: t.ReservedReplicas,
			AllocatedGameservers: t.AllocatedReplicas, Allocations: t.Allocations, Players: capacity(t.Players),
			Counters: aggregates(t.Counters), Lists: aggregates(t.Lists)},
		TotalsTruncated: c.TotalsTruncated, Stale: c.Stale,
	}
}

// labelsOf lists labels in key order, so that answers are deterministic.
func labelsOf(m map[string]string) []*fleetcastv1.Label {
	out := make([]*fleetcastv1.Label, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, &fleetcastv1.Label{Key: k, Value: m[k]})
	}
	return out
}

func capacity(c fleet.DocCapacity) *fleetcastv1.Capacity {
	return &fleetcastv1.Capacity{Count: c.Count, Capacity: c.Capacity, Available: c.Available}
}

func aggregates(m map[string]fleet.DocAggregate) map[string]*fleetcastv1.Aggregate {
	out := make(map[string]*fleetcastv1.Aggregate, len(m))
	for k, a := range m {
		out[k] = &fleetcastv1.Aggregate{Count: a.Count, Capacity: a.Capacity, AllocatedCount: a.AllocatedCount,
			AllocatedCapacity: a.AllocatedCapacity, Available: a.Available}
	}
	return out
}
