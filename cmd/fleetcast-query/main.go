// Command fleetcast-query serves the query side as one process — the /v1
// REST API, fleetcast.v1.InformationService over Connect, gRPC-Web and
// native gRPC, the server-sent event and gRPC streams, and the dashboard —
// the same handler as the QueryFleets function, configured by the same
// environment (docs/operations.md). Unlike the Functions Framework, which
// serves HTTP/1.1 only, it serves HTTP/1.1 and cleartext HTTP/2 (h2c) on
// one port, so that a matchmaker's plain gRPC stubs can call it; on Cloud
// Run, HTTP/2 end to end (the port named h2c) carries them.
//
// It listens on PORT (8080) of HOST (every interface), and on SIGTERM
// ends its streams with UNAVAILABLE, which clients answer by resuming on
// another instance, then stops within SHUTDOWN_GRACE (8s: Cloud Run
// allows 10 s).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/fleetcast/fleetcast/fleetapi/fleetrpc"
	"github.com/fleetcast/fleetcast/functions/fnruntime"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/cli"
	"github.com/fleetcast/fleetcast/version"
)

func main() { cli.Main("fleetcast-query", run) }

const usage = `Usage of fleetcast-query: serves the query API (REST, Connect, gRPC-Web, gRPC, streams and the
dashboard) over HTTP/1.1 and cleartext HTTP/2 on one port, configured by the environment:
PORT (8080), HOST (every interface), SHUTDOWN_GRACE (8s), GOOGLE_CLOUD_PROJECT,
FIRESTORE_DATABASE and the query function's variables (docs/operations.md). It takes no
flags; "fleetcast-query version" prints its version.`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleetcast-query", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 1 && fs.Arg(0) == "version":
		fmt.Fprintln(stdout, version.String("fleetcast-query"))
		return nil
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q: configure with the environment (fleetcast-query -h)", fs.Args())
	}
	var port string
	var grace time.Duration
	env := fnruntime.NewEnv(getenv)
	env.String(&port, "PORT", "8080")
	env.Duration(&grace, "SHUTDOWN_GRACE", 8*time.Second)
	// Every bad variable at once: the program's and the query API's.
	_, queryErr := query.ConfigFromEnv(getenv)
	if err := errors.Join(env.Err(), queryErr); err != nil {
		return err
	}
	h, err := query.New(ctx, getenv, stdout)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(getenv("HOST"), port))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	err = fnruntime.Serve(ctx, ln, h, fnruntime.ServeOptions{Name: "fleetcast-query", Grace: grace, H2C: true, EndStreams: fleetrpc.ErrShutdown}, stderr)
	// The spans of the last requests, within what Cloud Run allows.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if ferr := fnruntime.FlushTracing(fctx); ferr != nil {
		fmt.Fprintf(stderr, "fleetcast-query: exporting the last spans: %v\n", ferr)
	}
	return err
}
