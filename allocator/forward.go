package allocator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
)

// Defaults of a Forwarder (ForwarderOptions).
const (
	// DefaultConnectTimeout is how long a cluster's allocator has to
	// accept a connection before the cluster is skipped.
	DefaultConnectTimeout = time.Second
	// DefaultMinTry is the least time a try is started with: a request
	// with less left than a cluster's tries have taken is not forwarded
	// there.
	DefaultMinTry = 50 * time.Millisecond
	// DefaultMaxTries is how many candidates one request tries at most.
	DefaultMaxTries = 5
)

// ForwarderOptions configure a Forwarder.
type ForwarderOptions struct {
	// TLS returns the client credentials for a policy's cluster
	// (LoadTLS).
	TLS func(*Policy) (*tls.Config, error)
	// ConnectTimeout, MinTry and MaxTries: see their defaults.
	ConnectTimeout time.Duration
	MinTry         time.Duration
	MaxTries       int
	// Log is where skipped clusters are said, at INFO.
	Log *slog.Logger
	// DialOptions are added to every connection's (tests).
	DialOptions []grpc.DialOption
	// Now is the clock tries are timed by, and deadlines read against
	// (time.Now when nil).
	Now func() time.Time
}

// Forwarder sends allocation requests to the clusters' allocators over
// mutual TLS, one long-lived connection per cluster and endpoint.
type Forwarder struct {
	opts  ForwarderOptions
	mu    sync.Mutex
	conns map[string]*conn
}

// conn is one connection to an allocator, and what its tries took.
type conn struct {
	cc    *grpc.ClientConn
	addr  string
	tls   *tls.Config
	creds *watchedTLS
	mu    sync.Mutex
	took  time.Duration // an average of its tries' durations, 0 before any
}

// NewForwarder returns a Forwarder.
func NewForwarder(opts ForwarderOptions) *Forwarder {
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.MinTry <= 0 {
		opts.MinTry = DefaultMinTry
	}
	if opts.MaxTries <= 0 {
		opts.MaxTries = DefaultMaxTries
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Forwarder{opts: opts, conns: map[string]*conn{}}
}

// Close closes every connection.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for k, c := range f.conns {
		errs = append(errs, c.cc.Close())
		delete(f.conns, k)
	}
	return errors.Join(errs...)
}

// Outcomes of a try.
const (
	// Allocated: the cluster allocated a game server.
	Allocated = "allocated"
	// Exhausted: the cluster had no game server for the request
	// (RESOURCE_EXHAUSTED), or refused it (a status that says it did not
	// allocate, such as INVALID_ARGUMENT or PERMISSION_DENIED).
	Exhausted = "exhausted"
	Refused   = "refused"
	// Unreachable: no connection within the connect timeout, or it broke.
	Unreachable = "unreachable"
	// CertificateRefused: the TLS handshake failed on a certificate.
	CertificateRefused = "certificate_refused"
	// NoEndpoint: neither the policy nor the cluster names its allocator.
	NoEndpoint = "no_endpoint"
	// Failed: the call failed in a way that does not say whether the
	// cluster allocated (a deadline, a broken stream, INTERNAL): no other
	// cluster is tried, so that one request never allocates twice.
	Failed = "failed"
)

// Try is one try of a request.
type Try struct {
	Cluster, Namespace, Fleet string
	// Endpoint is the allocator's HOST:PORT, empty with NoEndpoint.
	Endpoint string
	Outcome  string
	// Err says why it did not allocate.
	Err  error
	Took time.Duration
}

// Allocate forwards in to the candidates' allocators in turn, each try
// narrowed to its candidate's fleet (Narrow), until one allocates; at
// most MaxTries of them. It goes on to the next candidate only when a try
// surely allocated nothing: the cluster had no game server or refused the
// request, its allocator was unreachable, or a certificate was refused.
// A try that may have allocated (a deadline, a broken stream, an internal
// error) ends the request with its status. It starts no try that the
// caller's deadline leaves too little time for: less than what the
// cluster's tries have taken, and never less than MinTry.
//
// advertised is the allocator endpoint a cluster advertises, for a
// policy that names none. The error is a status with Agones' codes:
// RESOURCE_EXHAUSTED when no candidate had room, UNAVAILABLE when none
// could be reached, DEADLINE_EXCEEDED when time ran out first.
func (f *Forwarder) Allocate(ctx context.Context, in *pb.AllocationRequest, cands []Candidate, advertised func(cluster string) string) (*pb.AllocationResponse, []Try, error) {
	var tries []Try
	for _, c := range cands {
		if len(tries) >= f.opts.MaxTries {
			break
		}
		try := Try{Cluster: c.Policy.Cluster, Namespace: c.Namespace, Fleet: c.Fleet}
		endpoints := c.Policy.Endpoints
		if len(endpoints) == 0 {
			if e := advertised(c.Policy.Cluster); e != "" {
				endpoints = []string{e}
			}
		}
		if len(endpoints) == 0 {
			try.Outcome, try.Err = NoEndpoint, fmt.Errorf("policy %q names no allocationEndpoints and cluster %s advertises none", c.Policy.Name, c.Policy.Cluster)
			tries = append(tries, f.skipped(ctx, try))
			continue
		}
		resp, done, err := f.tryEndpoints(ctx, in, c, endpoints, &try)
		tries = append(tries, try)
		if done {
			return resp, tries, err
		}
	}
	return nil, tries, f.noneAllocated(ctx, tries)
}

// tryEndpoints tries a candidate at each of its endpoints until one is
// reached; done says the request ends with resp and err.
func (f *Forwarder) tryEndpoints(ctx context.Context, in *pb.AllocationRequest, c Candidate, endpoints []string, try *Try) (resp *pb.AllocationResponse, done bool, err error) {
	for _, e := range endpoints {
		addr, err := EndpointAddress(e)
		if err != nil {
			try.Endpoint, try.Outcome, try.Err = e, NoEndpoint, err
			f.skipped(ctx, *try)
			continue
		}
		try.Endpoint = addr
		cn, err := f.conn(c.Policy, addr)
		if err != nil {
			try.Outcome, try.Err = CertificateRefused, err
			f.skipped(ctx, *try)
			continue
		}
		start := f.opts.Now()
		connectFor, err := f.timeLeft(ctx, cn, c.Policy.Cluster)
		if err == nil {
			err = f.ready(ctx, cn, connectFor)
			if err != nil && !refusedCertificate(err) {
				err = diagnose(ctx, cn, err)
			}
			if err != nil {
				try.Took, try.Outcome, try.Err = f.opts.Now().Sub(start), Unreachable, err
				if refusedCertificate(err) {
					try.Outcome = CertificateRefused
				}
				f.skipped(ctx, *try)
				continue
			}
			_, err = f.timeLeft(ctx, cn, c.Policy.Cluster) // connecting took some of it
		}
		if err != nil {
			try.Took, try.Outcome, try.Err = f.opts.Now().Sub(start), Failed, err
			return nil, true, err
		}
		resp, err := pb.NewAllocationServiceClient(cn.cc).Allocate(ctx, Narrow(in, c))
		try.Took = f.opts.Now().Sub(start)
		switch code := status.Code(err); {
		case err == nil:
			cn.observe(try.Took)
			try.Outcome = Allocated
			if resp.GetSource() == "" || resp.GetSource() == "local" {
				resp.Source = addr // as Agones' multi-cluster allocation names a remote cluster's
			}
			return resp, true, nil
		case notAllocated[code]:
			cn.observe(try.Took)
			try.Outcome, try.Err = Refused, err
			if code == codes.ResourceExhausted {
				try.Outcome = Exhausted
			}
			f.skipped(ctx, *try)
			return nil, false, nil
		default:
			try.Outcome, try.Err = Failed, err
			return nil, true, status.Errorf(code, "cluster %s's allocator (%s) may have allocated, so no other cluster is tried: %s", c.Policy.Cluster, addr, status.Convert(err).Message())
		}
	}
	return nil, false, nil
}

// notAllocated are the statuses of an Allocate that allocated nothing.
var notAllocated = map[codes.Code]bool{
	codes.ResourceExhausted: true, codes.InvalidArgument: true, codes.NotFound: true, codes.FailedPrecondition: true,
	codes.PermissionDenied: true, codes.Unauthenticated: true, codes.Unimplemented: true, codes.AlreadyExists: true,
}

// noneAllocated is the status of a request no try allocated.
func (f *Forwarder) noneAllocated(ctx context.Context, tries []Try) error {
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	if len(tries) == 0 {
		return status.Error(codes.ResourceExhausted, "no cluster has a fleet whose game servers can satisfy the request")
	}
	var why []string
	exhausted := false
	for _, t := range tries {
		why = append(why, fmt.Sprintf("%s/%s/%s: %s", t.Cluster, t.Namespace, t.Fleet, t.Reason()))
		exhausted = exhausted || t.Outcome == Exhausted || t.Outcome == Refused
	}
	code := codes.Unavailable
	if exhausted {
		code = codes.ResourceExhausted
	}
	return status.Errorf(code, "no cluster allocated (%d tried): %s", len(tries), strings.Join(why, "; "))
}

// Reason says why t did not allocate: its outcome, and its error's
// message (a status's own, without its code).
func (t Try) Reason() string {
	if t.Err == nil {
		return t.Outcome
	}
	if s, ok := status.FromError(t.Err); ok {
		return t.Outcome + ": " + s.Message()
	}
	return t.Outcome + ": " + t.Err.Error()
}

// skipped logs a try that allocated nothing, and returns it.
func (f *Forwarder) skipped(ctx context.Context, t Try) Try {
	f.opts.Log.InfoContext(ctx, "allocation: cluster skipped", "cluster", t.Cluster, "namespace", t.Namespace, "fleet", t.Fleet,
		"endpoint", t.Endpoint, "outcome", t.Outcome, "reason", t.Reason())
	return t
}

// conn returns the connection to a policy's allocator at addr, made on
// first use; it connects in the background.
func (f *Forwarder) conn(p *Policy, addr string) (*conn, error) {
	key := p.Name + "\x00" + addr
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.conns[key]; ok {
		return c, nil
	}
	if f.opts.TLS == nil {
		return nil, fmt.Errorf("no client credentials configured")
	}
	cfg, err := f.opts.TLS(p)
	if err != nil {
		return nil, err
	}
	creds := newWatchedTLS(cfg)
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// A span per try, a child of the request's; its trace context
		// goes to the cluster's allocator.
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			creds.record(err)
			return c, err
		}),
		// A cluster that was down is tried again within seconds, not
		// after gRPC's default backoff of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: f.opts.ConnectTimeout}),
	}, f.opts.DialOptions...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("allocator %s: %w", addr, err)
	}
	c := &conn{cc: cc, addr: addr, tls: cfg, creds: creds}
	f.conns[key] = c
	return c, nil
}

// timeLeft returns how long a try at c may wait for its connection: the
// connect timeout, or less, so that the try still has what c's tries take
// before the caller's deadline; an error when it does not have that.
func (f *Forwarder) timeLeft(ctx context.Context, c *conn, cluster string) (time.Duration, error) {
	left, ok := ctx.Deadline()
	if !ok {
		return f.opts.ConnectTimeout, nil
	}
	need := c.expected(f.opts.MinTry)
	until := left.Sub(f.opts.Now())
	if spare := until - need; spare > 0 {
		return min(f.opts.ConnectTimeout, spare), nil
	}
	return 0, status.Errorf(codes.DeadlineExceeded, "%v left: too little to try cluster %s, whose tries take about %v",
		max(0, until).Round(time.Millisecond), cluster, need)
}

// ready waits up to timeout for the connection to be ready; one that is
// failing is not waited for.
func (f *Forwarder) ready(ctx context.Context, c *conn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c.cc.Connect()
	for {
		st := c.cc.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			if err := c.creds.lastError(); err != nil {
				return fmt.Errorf("connection failing: %w", err)
			}
			return fmt.Errorf("connection failing")
		}
		if !c.cc.WaitForStateChange(ctx, st) {
			if err := c.creds.lastError(); err != nil {
				return fmt.Errorf("no connection within %v: %w", timeout.Round(time.Millisecond), err)
			}
			return fmt.Errorf("no connection within %v", timeout.Round(time.Millisecond))
		}
	}
}

// diagnose tells a connection that failed with err for want of a
// certificate from one that failed for the network: gRPC may see a
// server's refusal of the client's certificate (a TLS 1.3 alert, sent
// after the handshake completed on the client's side) only as a broken
// connection. It makes one TLS connection of its own, as the failed one
// was made, and reads what the server says first: an alert is the reason,
// returned wrapped with err; anything else leaves err as it was.
func diagnose(ctx context.Context, c *conn, err error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	d := tls.Dialer{Config: c.tls.Clone()}
	raw, derr := d.DialContext(ctx, "tcp", c.addr)
	if derr == nil {
		defer raw.Close()
		if dl, ok := ctx.Deadline(); ok {
			_ = raw.SetReadDeadline(dl)
		}
		_, derr = raw.Read(make([]byte, 1))
	}
	if derr != nil && refusedCertificate(derr) {
		return fmt.Errorf("%w (%w)", derr, err)
	}
	return err
}

// expected is about what a try at this allocator takes, never less than
// least.
func (c *conn) expected(least time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(least, c.took)
}

// observe averages a try's duration in, the newest weighing a fifth.
func (c *conn) observe(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.took == 0 {
		c.took = d
		return
	}
	c.took += (d - c.took) / 5
}
