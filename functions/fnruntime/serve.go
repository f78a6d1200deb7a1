package fnruntime

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/fleetcast/fleetcast/version"
)

// Service is a function's handler served as a Cloud Run service's
// container, configured by the environment (cmd/fleetcast-query,
// cmd/fleetcast-ingest).
type Service struct {
	// Name is the program's, in its lines and its version.
	Name string
	// Usage is what -h prints.
	Usage string
	// Check reads the handler's variables, and returns every bad one.
	Check func(getenv func(string) string) error
	// New makes the handler, its log lines to logs.
	New func(ctx context.Context, getenv func(string) string, logs io.Writer) (http.Handler, error)
	// H2C serves cleartext HTTP/2 beside HTTP/1.1 on the port.
	H2C bool
	// EndStreams, when set, is the cause every request's context is
	// cancelled with at the stop, before the wait: streams end for their
	// clients to resume elsewhere. Unset, requests in flight finish as
	// they would (a push is answered, so not delivered again).
	EndStreams error
}

// Run runs the service as its program: "version" prints its version, no
// other argument or flag is taken. It checks every variable (PORT, 8080;
// SHUTDOWN_GRACE, 8s; and the handler's) at once, makes the handler
// before its port opens, serves on HOST:PORT until ctx ends, and exports
// the last spans.
func (o Service) Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(o.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, o.Usage) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 1 && fs.Arg(0) == "version":
		fmt.Fprintln(stdout, version.String(o.Name))
		return nil
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q: configure with the environment (%s -h)", fs.Args(), o.Name)
	}
	var port string
	var grace time.Duration
	env := NewEnv(getenv)
	env.String(&port, "PORT", "8080")
	env.Duration(&grace, "SHUTDOWN_GRACE", 8*time.Second)
	if err := errors.Join(env.Err(), o.Check(getenv)); err != nil {
		return err
	}
	// Made before the port opens: a revision that cannot make its
	// clients fails to start instead of refusing every request.
	h, err := o.New(ctx, getenv, stdout)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(getenv("HOST"), port))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	err = o.serve(ctx, ln, h, grace, stderr)
	// The spans of the last requests, within what Cloud Run allows.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if ferr := FlushTracing(fctx); ferr != nil {
		fmt.Fprintf(stderr, "%s: exporting the last spans: %v\n", o.Name, ferr)
	}
	return err
}

// serve serves h on ln until ctx ends, then stops taking requests and waits
// at most grace for those in flight before it closes their connections.
func (o Service) serve(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration, stderr io.Writer) error {
	base, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	srv := &http.Server{
		Handler:           h,
		Protocols:         new(http.Protocols),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	srv.Protocols.SetHTTP1(true)
	protocols := "HTTP/1.1"
	if o.H2C {
		srv.Protocols.SetUnencryptedHTTP2(true)
		protocols = "HTTP/1.1 and h2c"
	}
	fmt.Fprintf(stderr, "%s %s: serving on http://%s (%s)\n", o.Name, version.Version(), ln.Addr(), protocols)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	if o.EndStreams != nil {
		fmt.Fprintf(stderr, "%s: stopping: streams end for their clients to resume; waiting at most %v for requests in flight\n", o.Name, grace)
		stop(o.EndStreams)
	} else {
		fmt.Fprintf(stderr, "%s: stopping: waiting at most %v for requests in flight\n", o.Name, grace)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(stderr, "%s: requests still in flight after %v: closing their connections\n", o.Name, grace)
		err = srv.Close()
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
