// Command fleetcast-ingest serves the ingest side as one process: the
// handler of the IngestFleetEvents function (Pub/Sub pushes of the
// clusters' fleet events → Firestore), configured by the same environment
// (docs/operations.md), for Terraform's ingest_mode = "service": a Cloud
// Run service whose instances are billed by the second while they run
// (instance-based billing) rather than per request.
//
// It listens on PORT (8080) of HOST (every interface). On SIGTERM it stops
// taking pushes and lets those in flight finish within SHUTDOWN_GRACE (8s:
// Cloud Run allows 10 s); a push cut off past it is not acknowledged, so
// Pub/Sub delivers it again, to another instance.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/fleetcast/fleetcast/functions/fnruntime"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/internal/cli"
	"github.com/fleetcast/fleetcast/version"
)

func main() { cli.Main("fleetcast-ingest", run) }

const usage = `Usage of fleetcast-ingest: serves the ingest function's handler (the push subscriptions' fleet
events into Firestore) over HTTP/1.1, configured by the environment: PORT (8080), HOST (every
interface), SHUTDOWN_GRACE (8s), GOOGLE_CLOUD_PROJECT, FIRESTORE_DATABASE and the ingest
function's variables (docs/operations.md). It takes no flags; "fleetcast-ingest version"
prints its version.`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleetcast-ingest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 1 && fs.Arg(0) == "version":
		fmt.Fprintln(stdout, version.String("fleetcast-ingest"))
		return nil
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q: configure with the environment (fleetcast-ingest -h)", fs.Args())
	}
	var port string
	var grace time.Duration
	env := fnruntime.NewEnv(getenv)
	env.String(&port, "PORT", "8080")
	env.Duration(&grace, "SHUTDOWN_GRACE", 8*time.Second)
	// Every bad variable at once: the program's and the ingest's.
	_, ingestErr := ingest.ConfigFromEnv(getenv)
	if err := errors.Join(env.Err(), ingestErr); err != nil {
		return err
	}
	// Made before the port opens: a revision that cannot reach its
	// store or its feed fails to start instead of refusing every push.
	h, err := ingest.New(ctx, getenv, stdout)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(getenv("HOST"), port))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	err = fnruntime.Serve(ctx, ln, h, fnruntime.ServeOptions{Name: "fleetcast-ingest", Grace: grace}, stderr)
	// The spans of the last pushes, within what Cloud Run allows.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if ferr := fnruntime.FlushTracing(fctx); ferr != nil {
		fmt.Fprintf(stderr, "fleetcast-ingest: exporting the last spans: %v\n", ferr)
	}
	return err
}
