package fleetclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"
	"golang.org/x/oauth2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetpb"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/version"
)

// Client calls the query API's InformationService (over Connect unless
// an Option says gRPC or gRPC-Web) and answers with the read model's
// types. It is a fleetapi.API: what the CLI and the demo ask of Firestore
// through the read model, they ask of the API through it, and a watch of
// the same client follows the same service's stream.
type Client struct {
	rpc  fleetcastv1connect.InformationServiceClient
	http *http.Client
	base string
}

var _ fleetapi.API = (*Client)(nil)

// ErrInvalidURL: the query API's URL is not an http(s) URL.
var ErrInvalidURL = errors.New("want an http(s) URL")

// An Option configures a Client.
type Option func(*options)

type options struct{ connect []connect.ClientOption }

// WithClientOptions passes options to the Connect client: the protocol
// (connect.WithGRPC, connect.WithGRPCWeb), interceptors, compression.
func WithClientOptions(opts ...connect.ClientOption) Option {
	return func(o *options) { o.connect = append(o.connect, opts...) }
}

// New returns a client of the query API at baseURL (a function's URL, or
// a local runner's), sending its requests through httpClient —
// http.DefaultClient when nil, NewHTTPClient's to send ID tokens. The
// error wraps ErrInvalidURL when baseURL is not an http(s) URL.
func New(httpClient *http.Client, baseURL string, opts ...Option) (*Client, error) {
	base, err := ParseBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return &Client{rpc: fleetcastv1connect.NewInformationServiceClient(httpClient, base, o.connect...), http: httpClient, base: base}, nil
}

// InformationService is the generated client the Client calls, for what
// the read model's API does not ask: fleetwatch.WatchAPI follows its
// WatchFleets stream.
func (c *Client) InformationService() fleetcastv1connect.InformationServiceClient { return c.rpc }

// ParseBaseURL checks a query API's URL and returns it without a trailing
// slash, the base the generated InformationService client also takes. The
// error wraps ErrInvalidURL.
func ParseBaseURL(baseURL string) (string, error) {
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("query API %q: %w", baseURL, ErrInvalidURL)
	}
	return u.String(), nil
}

// NewHTTPClient returns the http.Client for the query API at baseURL: over
// https, one that sends a Google-signed ID token for the URL's origin (the
// audience Cloud Run checks), as a function behind Cloud Functions IAM
// requires, with the credentials auth says — to that origin only, never
// to a host a redirect names; to a loopback address (a local runner,
// gcloud run services proxy) or over plain http, http.DefaultClient: a
// token sent in the clear is a token given away. The error wraps
// ErrInvalidURL for a bad URL.
func NewHTTPClient(ctx context.Context, baseURL string, auth Auth) (*http.Client, error) {
	base, err := ParseBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	if !SendsToken(base) {
		return http.DefaultClient, nil
	}
	u, _ := url.Parse(base)
	origin := u.Scheme + "://" + u.Host
	// The tokens outlive the call: a stream refreshes them for hours.
	ctx = context.WithoutCancel(ctx)
	ts, err := auth.TokenSource(ctx, origin)
	if err != nil {
		return nil, fmt.Errorf("ID token for %s: %w", origin, err)
	}
	plain := http.DefaultTransport
	if c, ok := ctx.Value(oauth2.HTTPClient).(*http.Client); ok && c.Transport != nil {
		plain = c.Transport
	}
	return &http.Client{Transport: &originOnly{origin: origin, authed: &oauth2.Transport{Source: ts, Base: plain}, plain: plain}}, nil
}

// SendsToken reports whether a client of the query API at baseURL sends
// an ID token: only over https, and not to a loopback address, which
// needs none.
func SendsToken(baseURL string) bool {
	base, err := ParseBaseURL(baseURL)
	if err != nil {
		return false
	}
	u, _ := url.Parse(base)
	return u.Scheme == "https" && !IsLoopback(u.Hostname())
}

// IsLoopback reports whether host is this machine: localhost, or a
// loopback address (127.0.0.0/8, ::1).
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// originOnly sends requests to origin through authed (which adds the ID
// token) and every other request, such as one a redirect made, through
// plain.
type originOnly struct {
	origin        string
	authed, plain http.RoundTripper
}

func (t *originOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme+"://"+r.URL.Host == t.origin {
		return t.authed.RoundTrip(r)
	}
	return t.plain.RoundTrip(r)
}

// ErrorOf is a Connect error of the InformationService as the read
// model's: the one vocabulary callers map to their own edge. A bad
// argument names its /v1 parameter (Param) and says what is wrong with it
// (Message), from the error's details; nil stays nil.
func ErrorOf(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*CredentialsError](err); ok {
		return &fleetapi.Error{Code: fleetapi.PermissionDenied, Message: "credentials", Err: err}
	}
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return &fleetapi.Error{Code: fleetapi.CodeOf(err), Message: "the query API", Err: err}
	}
	code, ok := apiCode[ce.Code()]
	if !ok {
		code = fleetapi.Internal
	}
	e := &fleetapi.Error{Code: code, Message: ce.Message()}
	if code == fleetapi.InvalidArgument {
		for _, d := range ce.Details() {
			switch v, _ := d.Value(); v := v.(type) {
			case *errdetails.ErrorInfo:
				e.Param = v.GetMetadata()["param"]
			case *errdetails.BadRequest:
				if fv := v.GetFieldViolations(); len(fv) == 1 {
					e.Message = fv[0].GetDescription()
				}
			}
		}
	}
	return e
}

// apiCode maps Connect's codes to the read model's.
var apiCode = map[connect.Code]fleetapi.Code{
	connect.CodeInvalidArgument:   fleetapi.InvalidArgument,
	connect.CodeNotFound:          fleetapi.NotFound,
	connect.CodeUnavailable:       fleetapi.Unavailable,
	connect.CodeDeadlineExceeded:  fleetapi.Unavailable,
	connect.CodeResourceExhausted: fleetapi.ResourceExhausted,
	connect.CodePermissionDenied:  fleetapi.PermissionDenied,
	connect.CodeUnauthenticated:   fleetapi.PermissionDenied,
}

// ListFleets answers one page of a fleet query (Inform).
func (c *Client) ListFleets(ctx context.Context, q fleetapi.Query) (fleetapi.FleetList, error) {
	req := &fleetcastv1.InformRequest{Filter: fleetpb.Filter(q), PageSize: int32(min(q.PageSize, fleetapi.MaxPageSize)),
		PageToken: q.Values().Get("pageToken")}
	switch q.OrderBy {
	case fleetapi.OrderByReady:
		req.OrderBy = fleetcastv1.OrderBy_ORDER_BY_READY
	case fleetapi.OrderByAvailable:
		req.OrderBy = fleetcastv1.OrderBy_ORDER_BY_AVAILABLE
	}
	resp, err := c.rpc.Inform(ctx, connect.NewRequest(req))
	if err != nil {
		return fleetapi.FleetList{}, ErrorOf(err)
	}
	l := fleetapi.FleetList{Items: []fleetapi.Fleet{}, NextPageToken: resp.Msg.GetNextPageToken(), TotalSize: int(resp.Msg.GetTotalSize()),
		UnavailableClusters: resp.Msg.GetUnavailableClusters()}
	for _, f := range resp.Msg.GetFleetInformation() {
		l.Items = append(l.Items, fleetpb.FromFleet(f))
	}
	return l, nil
}

// GetFleet returns one live fleet.
func (c *Client) GetFleet(ctx context.Context, k fleet.Key) (fleetapi.Fleet, error) {
	if err := fleetapi.ValidateKey(k); err != nil {
		return fleetapi.Fleet{}, err
	}
	resp, err := c.rpc.GetFleet(ctx, connect.NewRequest(&fleetcastv1.GetFleetRequest{ClusterName: k.Cluster, Namespace: k.Namespace, FleetName: k.Name}))
	if err != nil {
		return fleetapi.Fleet{}, ErrorOf(err)
	}
	return fleetpb.FromFleet(resp.Msg.GetFleetInformation()), nil
}

// ListClusters returns every cluster.
func (c *Client) ListClusters(ctx context.Context) (fleetapi.ClusterList, error) {
	resp, err := c.rpc.ListClusters(ctx, connect.NewRequest(&fleetcastv1.ListClustersRequest{}))
	if err != nil {
		return fleetapi.ClusterList{}, ErrorOf(err)
	}
	l := fleetapi.ClusterList{Items: []fleetapi.Cluster{}}
	for _, cl := range resp.Msg.GetClusters() {
		l.Items = append(l.Items, fleetpb.FromCluster(cl))
	}
	return l, nil
}

// GetCluster returns one cluster.
func (c *Client) GetCluster(ctx context.Context, name string) (fleetapi.Cluster, error) {
	if err := fleetapi.ValidateClusterName(name); err != nil {
		return fleetapi.Cluster{}, err
	}
	resp, err := c.rpc.GetCluster(ctx, connect.NewRequest(&fleetcastv1.GetClusterRequest{ClusterName: name}))
	if err != nil {
		return fleetapi.Cluster{}, ErrorOf(err)
	}
	return fleetpb.FromCluster(resp.Msg.GetCluster()), nil
}

// LabelValues sums the live fleets carrying label key by value.
func (c *Client) LabelValues(ctx context.Context, key string, includeStale bool) (fleetapi.LabelValues, error) {
	if err := fleetapi.ValidateLabelKey(key); err != nil {
		return fleetapi.LabelValues{}, err
	}
	resp, err := c.rpc.LabelValues(ctx, connect.NewRequest(&fleetcastv1.LabelValuesRequest{Key: key, IncludeStale: includeStale}))
	if err != nil {
		return fleetapi.LabelValues{}, ErrorOf(err)
	}
	lv := fleetapi.LabelValues{Key: resp.Msg.GetKey(), Values: []fleetapi.LabelValue{}, UnavailableClusters: resp.Msg.GetUnavailableClusters()}
	for _, v := range resp.Msg.GetValues() {
		lv.Values = append(lv.Values, fleetapi.LabelValue{Value: v.GetValue(), Fleets: v.GetFleets(), ReadyReplicas: v.GetReadyGameservers(),
			AllocatedReplicas: v.GetAllocatedGameservers(), Clusters: v.GetClusters()})
	}
	return lv, nil
}

// Place answers where a match can go now (Place): the candidates, best
// first, and why other fleets cannot take it.
func (c *Client) Place(ctx context.Context, req fleetapi.PlaceRequest) (fleetapi.Placements, error) {
	resp, err := c.rpc.Place(ctx, connect.NewRequest(fleetpb.PlaceRequest(req)))
	if err != nil {
		return fleetapi.Placements{}, ErrorOf(err)
	}
	return fleetpb.FromPlacements(resp.Msg), nil
}

// ServerVersion returns the query API's build (GET /v1/version). An API
// older than that path is NotFound.
func (c *Client) ServerVersion(ctx context.Context) (version.Info, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/version", nil)
	if err != nil {
		return version.Info{}, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if _, ok := errors.AsType[*CredentialsError](err); ok {
			return version.Info{}, ErrorOf(err)
		}
		return version.Info{}, &fleetapi.Error{Code: fleetapi.Unavailable, Message: "the query API", Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return version.Info{}, &fleetapi.Error{Code: fleetapi.Unavailable, Message: "the query API", Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		code, ok := httpCode[resp.StatusCode]
		if !ok {
			code = fleetapi.Internal
		}
		msg := fmt.Sprintf("GET /v1/version: %s", resp.Status)
		if resp.StatusCode == http.StatusNotFound {
			msg += " (a query API older than this client does not say its version)"
		}
		return version.Info{}, &fleetapi.Error{Code: code, Message: msg}
	}
	var v version.Info
	if err := json.Unmarshal(body, &v); err != nil {
		return version.Info{}, &fleetapi.Error{Code: fleetapi.Internal, Message: "GET /v1/version: not a version", Err: err}
	}
	return v, nil
}

// httpCode maps the query API's HTTP statuses to the read model's codes.
var httpCode = map[int]fleetapi.Code{
	http.StatusBadRequest:         fleetapi.InvalidArgument,
	http.StatusUnauthorized:       fleetapi.PermissionDenied,
	http.StatusForbidden:          fleetapi.PermissionDenied,
	http.StatusNotFound:           fleetapi.NotFound,
	http.StatusTooManyRequests:    fleetapi.ResourceExhausted,
	http.StatusServiceUnavailable: fleetapi.Unavailable,
	http.StatusGatewayTimeout:     fleetapi.Unavailable,
}

var _ fleetapi.Watcher = (*Client)(nil)

// Watch follows the service's WatchFleets stream of q from resumeToken,
// handing send each event, until ctx ends (nil), send fails (its error),
// or the stream ends: nil when the server ended it (at its deadline:
// resume with the last event's token), else its error (ErrorOf). Events
// of a newer server that this version does not know are skipped.
func (c *Client) Watch(ctx context.Context, q fleetapi.Query, resumeToken string, send func(fleetapi.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.rpc.WatchFleets(ctx, connect.NewRequest(&fleetcastv1.WatchFleetsRequest{Filter: fleetpb.Filter(q), ResumeToken: resumeToken}))
	if err != nil {
		return ErrorOf(err)
	}
	defer st.Close()
	for st.Receive() {
		e, ok := fleetpb.FromEvent(st.Msg())
		if !ok {
			continue
		}
		if err := send(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := st.Err(); err != nil {
		return ErrorOf(err)
	}
	return nil
}
