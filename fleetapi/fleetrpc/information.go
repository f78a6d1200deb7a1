package fleetrpc

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetpb"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
)

// Backend is what InformationService answers from: a Service (one view)
// or Partitions (every partition's, merged).
type Backend interface {
	fleetapi.API
	fleetapi.Watcher
	Admit(ctx context.Context) (release func(), err error)
}

// information implements InformationService over the read model.
type information struct {
	svc     Backend
	log     *slog.Logger
	streams *Streams
}

var _ fleetcastv1connect.InformationServiceHandler = (*information)(nil)

// fieldOf names, for each /v1/fleets parameter, the field of an
// InformRequest that carries it.
var fieldOf = map[string]string{
	"cluster": "filter.clusters", "namespace": "filter.namespace", "selector": "filter.selector",
	"minReady": "filter.min_ready", "counter": "filter.counter", "minAvailable": "filter.min_counter_available",
	"list": "filter.list", "minListAvailable": "filter.min_list_available", "rolloutComplete": "filter.rollout_complete",
	"includeStale": "filter.include_stale",
	"orderBy":      "order_by", "pageSize": "page_size", "pageToken": "page_token", "key": "key",
	"resumeToken": "resume_token", "count": "count", "gameServers": "game_servers", "players": "players", "policy": "policy",
}

// informValues turns an InformRequest into the parameters /v1/fleets
// would parse, so that both validate alike, and checks their bounds
// (fleetapi.CheckBounds); ParseQuery reads them once admitted.
func informValues(req *fleetcastv1.InformRequest) (url.Values, error) {
	v := fleetpb.FilterValues(req.GetFilter())
	switch req.GetOrderBy() {
	case fleetcastv1.OrderBy_ORDER_BY_UNSPECIFIED:
	case fleetcastv1.OrderBy_ORDER_BY_READY:
		v.Set("orderBy", fleetapi.OrderByReady)
	case fleetcastv1.OrderBy_ORDER_BY_AVAILABLE:
		v.Set("orderBy", fleetapi.OrderByAvailable)
	default:
		return nil, &fleetapi.Error{Code: fleetapi.InvalidArgument, Param: "orderBy", Message: "not an OrderBy value"}
	}
	if req.GetPageSize() != 0 {
		v.Set("pageSize", strconv.Itoa(int(req.GetPageSize())))
	}
	if req.GetPageToken() != "" {
		v.Set("pageToken", req.GetPageToken())
	}
	return v, fleetapi.CheckBounds(v)
}

// fail maps the read model's errors to Connect codes, logging faults as
// /v1 does; a bad parameter is named by its field.
func (s *information) fail(ctx context.Context, procedure string, err error) error {
	e := LogFault(ctx, s.log, procedure, err)
	code, ok := connectCode[e.Code]
	switch {
	case !ok || e.Code == fleetapi.Internal:
		return connect.NewError(connect.CodeInternal, errors.New(internalMessage))
	case e.Code == fleetapi.InvalidArgument:
		field := fieldOf[e.Param]
		if field == "" {
			field = e.Param
		}
		return invalid(field, e.Param, e.Message)
	}
	return connect.NewError(code, errors.New(e.Message))
}

// invalid is an INVALID_ARGUMENT naming the request's field, with the
// details a client reads it back from: a google.rpc.BadRequest (the field
// and what is wrong with it) and an ErrorInfo carrying the /v1 parameter.
func invalid(field, param, message string) error {
	ce := connect.NewError(connect.CodeInvalidArgument, errors.New(field+": "+message))
	if d, err := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: message}}}); err == nil {
		ce.AddDetail(d)
	}
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "INVALID_ARGUMENT", Domain: "fleetcast", Metadata: map[string]string{"param": param}}); err == nil {
		ce.AddDetail(d)
	}
	return ce
}

// connectCode maps the read model's error codes to Connect's.
var connectCode = map[fleetapi.Code]connect.Code{
	fleetapi.InvalidArgument:   connect.CodeInvalidArgument,
	fleetapi.NotFound:          connect.CodeNotFound,
	fleetapi.Unavailable:       connect.CodeUnavailable,
	fleetapi.ResourceExhausted: connect.CodeResourceExhausted,
	fleetapi.PermissionDenied:  connect.CodePermissionDenied,
	fleetapi.Internal:          connect.CodeInternal,
}

// Inform answers the live fleets matching the request, as /v1/fleets.
func (s *information) Inform(ctx context.Context, req *connect.Request[fleetcastv1.InformRequest]) (*connect.Response[fleetcastv1.InformResponse], error) {
	v, err := informValues(req.Msg)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	release, err := s.svc.Admit(ctx)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	defer release()
	// Parsed in the slot, as /v1/fleets does (fleetapi.CheckBounds).
	q, err := fleetapi.ParseQuery(v)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	l, err := s.svc.ListFleets(ctx, q)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	out := &fleetcastv1.InformResponse{NextPageToken: l.NextPageToken, TotalSize: int32(l.TotalSize), UnavailableClusters: l.UnavailableClusters}
	for _, f := range l.Items {
		out.FleetInformation = append(out.FleetInformation, fleetpb.Fleet(f))
	}
	return connect.NewResponse(out), nil
}

// WatchFleets streams the matching fleets, then their changes, as
// /v1/watch. A stream ends with UNAVAILABLE shortly before its request's
// deadline, which clients answer by resuming.
func (s *information) WatchFleets(ctx context.Context, req *connect.Request[fleetcastv1.WatchFleetsRequest], stream *connect.ServerStream[fleetcastv1.WatchFleetsResponse]) error {
	v := fleetpb.FilterValues(req.Msg.GetFilter())
	if t := req.Msg.GetResumeToken(); t != "" {
		v.Set("resumeToken", t)
	}
	q, token, err := fleetapi.ParseWatch(v)
	if err != nil {
		return s.fail(ctx, req.Spec().Procedure, err)
	}
	ctx, stop := StreamContext(ctx)
	defer stop()
	s.streams.Arm(ctx)
	err = s.svc.Watch(ctx, q, token, func(e fleetapi.Event) error {
		return stream.Send(fleetpb.Event(e))
	})
	switch {
	case err != nil && s.streams.Stalled(ctx, req.Spec().Procedure, err):
		return nil // the connection is broken: nothing more can be written
	case err != nil && ctx.Err() != nil:
		return nil // the client went away while a message was sent
	case err != nil:
		return s.fail(ctx, req.Spec().Procedure, err)
	case EndedByServer(ctx) != nil:
		return connect.NewError(connect.CodeUnavailable, EndedByServer(ctx))
	}
	return nil
}

// keyFields name a GetFleet or GetCluster request's fields for the
// parameters of a fleet's or a cluster's key.
var keyFields = map[string]string{"cluster": "cluster_name", "namespace/name": "namespace, fleet_name"}

// keyFail is fail for a key's error, with the request's field names.
func (s *information) keyFail(ctx context.Context, procedure string, err error) error {
	if e, ok := errors.AsType[*fleetapi.Error](err); ok && e.Code == fleetapi.InvalidArgument && keyFields[e.Param] != "" {
		return invalid(keyFields[e.Param], e.Param, e.Message)
	}
	return s.fail(ctx, procedure, err)
}

// GetFleet answers one live fleet, as /v1/fleets/{cluster}/{namespace}/{name}.
func (s *information) GetFleet(ctx context.Context, req *connect.Request[fleetcastv1.GetFleetRequest]) (*connect.Response[fleetcastv1.GetFleetResponse], error) {
	k := fleet.Key{Cluster: req.Msg.GetClusterName(), Namespace: req.Msg.GetNamespace(), Name: req.Msg.GetFleetName()}
	if err := fleetapi.ValidateKey(k); err != nil {
		return nil, s.keyFail(ctx, req.Spec().Procedure, err)
	}
	f, err := s.svc.GetFleet(ctx, k)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	return connect.NewResponse(&fleetcastv1.GetFleetResponse{FleetInformation: fleetpb.Fleet(f)}), nil
}

// GetCluster answers one cluster, as /v1/clusters/{cluster}.
func (s *information) GetCluster(ctx context.Context, req *connect.Request[fleetcastv1.GetClusterRequest]) (*connect.Response[fleetcastv1.GetClusterResponse], error) {
	if err := fleetapi.ValidateClusterName(req.Msg.GetClusterName()); err != nil {
		return nil, s.keyFail(ctx, req.Spec().Procedure, err)
	}
	c, err := s.svc.GetCluster(ctx, req.Msg.GetClusterName())
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	return connect.NewResponse(&fleetcastv1.GetClusterResponse{Cluster: fleetpb.Cluster(c)}), nil
}

// ListClusters answers every cluster, as /v1/clusters.
func (s *information) ListClusters(ctx context.Context, req *connect.Request[fleetcastv1.ListClustersRequest]) (*connect.Response[fleetcastv1.ListClustersResponse], error) {
	l, err := s.svc.ListClusters(ctx)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	out := &fleetcastv1.ListClustersResponse{}
	for _, c := range l.Items {
		out.Clusters = append(out.Clusters, fleetpb.Cluster(c))
	}
	return connect.NewResponse(out), nil
}

// LabelValues sums the live fleets carrying a label, as /v1/labels/{key}.
func (s *information) LabelValues(ctx context.Context, req *connect.Request[fleetcastv1.LabelValuesRequest]) (*connect.Response[fleetcastv1.LabelValuesResponse], error) {
	if err := fleetapi.ValidateLabelKey(req.Msg.GetKey()); err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	release, err := s.svc.Admit(ctx)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	defer release()
	lv, err := s.svc.LabelValues(ctx, req.Msg.GetKey(), req.Msg.GetIncludeStale())
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	out := &fleetcastv1.LabelValuesResponse{Key: lv.Key, UnavailableClusters: lv.UnavailableClusters}
	for _, v := range lv.Values {
		out.Values = append(out.Values, &fleetcastv1.LabelValue{Value: v.Value, Fleets: v.Fleets,
			ReadyGameservers: v.ReadyReplicas, AllocatedGameservers: v.AllocatedReplicas, Clusters: v.Clusters})
	}
	return connect.NewResponse(out), nil
}

// Place answers where a match can go now, as /v1/placements.
func (s *information) Place(ctx context.Context, req *connect.Request[fleetcastv1.PlaceRequest]) (*connect.Response[fleetcastv1.PlaceResponse], error) {
	v := fleetpb.PlaceValues(req.Msg)
	if err := fleetapi.CheckBounds(v); err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	release, err := s.svc.Admit(ctx)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	defer release()
	// Parsed in the slot, as /v1/placements does (fleetapi.CheckBounds).
	r, err := fleetapi.ParsePlace(v)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	p, err := s.svc.Place(ctx, r)
	if err != nil {
		return nil, s.fail(ctx, req.Spec().Procedure, err)
	}
	return connect.NewResponse(fleetpb.Placements(p)), nil
}
