// Package fleetclient is the Go client of fleetcast's query API (the
// QueryFleets function's /v1 REST API), answering with the read model's
// types (package fleetapi), and the http.Client that authenticates to it
// with Google-signed ID tokens.
//
// Authentication is the http.Client's business, as in connect-go: New takes
// any client; NewHTTPClient makes one that sends an ID token for the
// function's URL, as Cloud Functions IAM requires, from Application Default
// Credentials or an impersonated service account, to that origin only and
// never in the clear.
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
	"strconv"
	"strings"

	"golang.org/x/oauth2"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
)

// Client calls the query API over HTTP. It is a fleetapi.API: what the
// CLI and the demo ask of Firestore through the read model, they ask of
// the API through it.
type Client struct {
	base      string
	http      *http.Client
	userAgent string
}

var _ fleetapi.API = (*Client)(nil)

// ErrInvalidURL: the query API's URL is not an http(s) URL.
var ErrInvalidURL = errors.New("want an http(s) URL")

// An Option configures a Client.
type Option func(*Client)

// WithUserAgent sets the User-Agent of every request, for the function's
// request logs.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

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
	c := &Client{base: base, http: httpClient}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

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

// get reads path into v; an answer other than 200 becomes an *Error.
func (c *Client) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &fleetapi.Error{Code: fleetapi.Unavailable, Message: "the query API cannot be reached", Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return &fleetapi.Error{Code: fleetapi.Unavailable, Message: "reading the query API's answer failed", Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return errorOf(resp, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &fleetapi.Error{Code: fleetapi.Internal, Message: "the query API's answer is not what it documents", Err: err}
	}
	return nil
}

// errorOf decodes the API's error document; a body without one (a proxy's
// page, an IAM refusal) becomes an error naming the HTTP status.
func errorOf(resp *http.Response, body []byte) *fleetapi.Error {
	var e struct {
		Error struct {
			Status  fleetapi.Code `json:"status"`
			Message string        `json:"message"`
			Param   string        `json:"param"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" && e.Error.Status != "" {
		return &fleetapi.Error{Code: e.Error.Status, Param: e.Error.Param, Message: e.Error.Message}
	}
	code, ok := statusCode[resp.StatusCode]
	if !ok {
		code = fleetapi.Internal
	}
	return &fleetapi.Error{Code: code, Message: "query API: " + resp.Status}
}

// statusCode classifies an HTTP status without the API's error document.
var statusCode = map[int]fleetapi.Code{
	http.StatusBadRequest:         fleetapi.InvalidArgument,
	http.StatusUnauthorized:       fleetapi.PermissionDenied, // IAM: no or a bad ID token
	http.StatusForbidden:          fleetapi.PermissionDenied, // IAM: not an invoker
	http.StatusNotFound:           fleetapi.NotFound,
	http.StatusTooManyRequests:    fleetapi.Unavailable,
	http.StatusBadGateway:         fleetapi.Unavailable,
	http.StatusServiceUnavailable: fleetapi.Unavailable,
	http.StatusGatewayTimeout:     fleetapi.Unavailable,
}

// ListFleets answers one page of a fleet query.
func (c *Client) ListFleets(ctx context.Context, q fleetapi.Query) (fleetapi.FleetList, error) {
	var l fleetapi.FleetList
	q.PageSize = min(q.PageSize, fleetapi.MaxPageSize)
	err := c.get(ctx, "/v1/fleets?"+q.Values().Encode(), &l)
	return l, err
}

// GetFleet returns one live fleet.
func (c *Client) GetFleet(ctx context.Context, k fleet.Key) (fleetapi.Fleet, error) {
	if err := fleetapi.ValidateKey(k); err != nil {
		return fleetapi.Fleet{}, err
	}
	var f fleetapi.Fleet
	err := c.get(ctx, "/v1/fleets/"+url.PathEscape(k.Cluster)+"/"+url.PathEscape(k.Namespace)+"/"+url.PathEscape(k.Name), &f)
	return f, err
}

// ListClusters returns every cluster.
func (c *Client) ListClusters(ctx context.Context) (fleetapi.ClusterList, error) {
	var l fleetapi.ClusterList
	err := c.get(ctx, "/v1/clusters", &l)
	return l, err
}

// GetCluster returns one cluster.
func (c *Client) GetCluster(ctx context.Context, name string) (fleetapi.Cluster, error) {
	if err := fleetapi.ValidateClusterName(name); err != nil {
		return fleetapi.Cluster{}, err
	}
	var cl fleetapi.Cluster
	err := c.get(ctx, "/v1/clusters/"+url.PathEscape(name), &cl)
	return cl, err
}

// LabelValues sums the live fleets carrying label key by value.
func (c *Client) LabelValues(ctx context.Context, key string, includeStale bool) (fleetapi.LabelValues, error) {
	if err := fleetapi.ValidateLabelKey(key); err != nil {
		return fleetapi.LabelValues{}, err
	}
	var lv fleetapi.LabelValues
	err := c.get(ctx, "/v1/labels/"+url.PathEscape(key)+"?includeStale="+strconv.FormatBool(includeStale), &lv)
	return lv, err
}
