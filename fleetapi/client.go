package fleetapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/oauth2"

	"github.com/fleetcast/fleetcast/fleet"
)

// Client calls the query API (the QueryFleets function) over HTTP.
type Client struct {
	base string
	http *http.Client
}

var _ API = (*Client)(nil)

// NewClient returns a client of the API at baseURL. Outside localhost it
// sends a Google-signed ID token for baseURL, as a function behind Cloud
// Functions IAM requires, from Application Default Credentials; hc, if
// not nil, is used as it is instead.
func NewClient(ctx context.Context, baseURL string, hc *http.Client) (*Client, error) {
	if hc != nil {
		u, err := checkURL(baseURL)
		if err != nil {
			return nil, err
		}
		return &Client{base: u.String(), http: hc}, nil
	}
	base, hc, err := HTTPClient(ctx, baseURL)
	if err != nil {
		return nil, err
	}
	return &Client{base: base, http: hc}, nil
}

// NewClientWith is NewClient with the ID tokens auth gets.
func NewClientWith(ctx context.Context, baseURL string, auth Auth) (*Client, error) {
	base, hc, err := HTTPClientWith(ctx, baseURL, auth)
	if err != nil {
		return nil, err
	}
	return &Client{base: base, http: hc}, nil
}

func checkURL(baseURL string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("query API %q: want an http(s) URL", baseURL)
	}
	return u, nil
}

// HTTPClient returns the query API's base URL, checked, and a client for
// it: over https, one that sends a Google-signed ID token for the URL's
// origin (the audience Cloud Run checks), as a function behind Cloud
// Functions IAM requires, from Application Default Credentials — to that
// origin only, never to a host a redirect names; to a loopback address
// (a local runner, gcloud run services proxy) or over plain http, a
// plain one: a token sent in the clear is a token given away. The
// generated InformationService client takes both.
func HTTPClient(ctx context.Context, baseURL string) (string, *http.Client, error) {
	return HTTPClientWith(ctx, baseURL, Auth{})
}

// HTTPClientWith is HTTPClient with the ID tokens auth gets.
func HTTPClientWith(ctx context.Context, baseURL string, auth Auth) (string, *http.Client, error) {
	u, err := checkURL(baseURL)
	if err != nil {
		return "", nil, err
	}
	if !SendsToken(u.String()) {
		return u.String(), http.DefaultClient, nil
	}
	origin := u.Scheme + "://" + u.Host
	// The tokens outlive the call: a stream refreshes them for hours.
	ctx = context.WithoutCancel(ctx)
	ts, err := auth.TokenSource(ctx, origin)
	if err != nil {
		return "", nil, fmt.Errorf("ID token for %s: %w", origin, err)
	}
	plain := http.DefaultTransport
	if c, ok := ctx.Value(oauth2.HTTPClient).(*http.Client); ok && c.Transport != nil {
		plain = c.Transport
	}
	return u.String(), &http.Client{Transport: &originOnly{origin: origin, authed: &oauth2.Transport{Source: ts, Base: plain}, plain: plain}}, nil
}

// SendsToken reports whether a client of the query API at baseURL sends
// an ID token: only over https, and not to a loopback address, which
// needs none.
func SendsToken(baseURL string) bool {
	u, err := checkURL(baseURL)
	return err == nil && u.Scheme == "https" && !IsLoopback(u.Hostname())
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
	resp, err := c.http.Do(req)
	if err != nil {
		return &Error{Code: Unavailable, Message: "the query API cannot be reached", Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return &Error{Code: Unavailable, Message: "reading the query API's answer failed", Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return errorOf(resp, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &Error{Code: Internal, Message: "the query API's answer is not what it documents", Err: err}
	}
	return nil
}

// errorOf decodes the API's error document; a body without one (a proxy's
// page, an IAM refusal) becomes an error naming the HTTP status.
func errorOf(resp *http.Response, body []byte) *Error {
	var e struct {
		Error struct {
			Status  Code   `json:"status"`
			Message string `json:"message"`
			Param   string `json:"param"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" && e.Error.Status != "" {
		return &Error{Code: e.Error.Status, Param: e.Error.Param, Message: e.Error.Message}
	}
	code := Internal
	switch {
	case resp.StatusCode == http.StatusNotFound:
		code = NotFound
	case resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusTooManyRequests,
		resp.StatusCode == http.StatusBadGateway, resp.StatusCode == http.StatusGatewayTimeout:
		code = Unavailable
	}
	return &Error{Code: code, Message: "query API: " + resp.Status}
}

// ListFleets answers one page of a fleet query.
func (c *Client) ListFleets(ctx context.Context, q Query) (FleetList, error) {
	var l FleetList
	err := c.get(ctx, "/v1/fleets?"+q.normalized().Values().Encode(), &l)
	return l, err
}

// GetFleet returns one live fleet.
func (c *Client) GetFleet(ctx context.Context, k fleet.Key) (Fleet, error) {
	if err := ValidateKey(k); err != nil {
		return Fleet{}, err
	}
	var f Fleet
	err := c.get(ctx, "/v1/fleets/"+url.PathEscape(k.Cluster)+"/"+url.PathEscape(k.Namespace)+"/"+url.PathEscape(k.Name), &f)
	return f, err
}

// ListClusters returns every cluster.
func (c *Client) ListClusters(ctx context.Context) (ClusterList, error) {
	var l ClusterList
	err := c.get(ctx, "/v1/clusters", &l)
	return l, err
}

// GetCluster returns one cluster.
func (c *Client) GetCluster(ctx context.Context, name string) (Cluster, error) {
	if err := ValidateClusterName(name); err != nil {
		return Cluster{}, err
	}
	var cl Cluster
	err := c.get(ctx, "/v1/clusters/"+url.PathEscape(name), &cl)
	return cl, err
}

// LabelValues sums the live fleets carrying label key by value.
func (c *Client) LabelValues(ctx context.Context, key string, includeStale bool) (LabelValues, error) {
	if err := ValidateLabelKey(key); err != nil {
		return LabelValues{}, err
	}
	var lv LabelValues
	err := c.get(ctx, "/v1/labels/"+url.PathEscape(key)+"?includeStale="+strconv.FormatBool(includeStale), &lv)
	return lv, err
}
