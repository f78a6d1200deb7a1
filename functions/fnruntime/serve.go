package fnruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/fleetcast/fleetcast/version"
)

// ServeOptions are how Serve serves a function's handler as a Cloud Run
// service's container (cmd/fleetcast-query, cmd/fleetcast-ingest).
type ServeOptions struct {
	// Name is the program's, in its lines.
	Name string
	// Grace is how long requests in flight may run on after the stop
	// (Cloud Run kills the container 10 s after SIGTERM).
	Grace time.Duration
	// H2C serves cleartext HTTP/2 beside HTTP/1.1 on the port.
	H2C bool
	// EndStreams, when set, is the cause every request's context is
	// cancelled with at the stop, before the wait: streams end for their
	// clients to resume elsewhere. Unset, requests in flight finish as
	// they would (a push is answered, so not delivered again).
	EndStreams error
}

// Serve serves h on ln until ctx ends, then stops taking requests and waits
// at most o.Grace for those in flight before it closes their connections.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, o ServeOptions, stderr io.Writer) error {
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
		fmt.Fprintf(stderr, "%s: stopping: streams end for their clients to resume; waiting at most %v for requests in flight\n", o.Name, o.Grace)
		stop(o.EndStreams)
	} else {
		fmt.Fprintf(stderr, "%s: stopping: waiting at most %v for requests in flight\n", o.Name, o.Grace)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.Grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(stderr, "%s: requests still in flight after %v: closing their connections\n", o.Name, o.Grace)
		err = srv.Close()
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
