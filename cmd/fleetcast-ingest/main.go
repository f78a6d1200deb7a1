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
	"io"
	"net/http"

	"github.com/fleetcast/fleetcast/functions/fnruntime"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/internal/cli"
)

func main() { cli.Main("fleetcast-ingest", run) }

const usage = `Usage of fleetcast-ingest: serves the ingest function's handler (the push subscriptions' fleet
events into Firestore) over HTTP/1.1, configured by the environment: PORT (8080), HOST (every
interface), SHUTDOWN_GRACE (8s), GOOGLE_CLOUD_PROJECT, FIRESTORE_DATABASE and the ingest
function's variables (docs/operations.md). It takes no flags; "fleetcast-ingest version"
prints its version.`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return fnruntime.Service{
		Name: "fleetcast-ingest", Usage: usage,
		Check: func(getenv func(string) string) error { _, err := ingest.ConfigFromEnv(getenv); return err },
		New: func(ctx context.Context, getenv func(string) string, logs io.Writer) (http.Handler, error) {
			return ingest.New(ctx, getenv, logs)
		},
	}.Run(ctx, args, getenv, stdout, stderr)
}
