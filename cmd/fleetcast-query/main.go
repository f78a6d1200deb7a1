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
	"io"
	"net/http"

	"github.com/fleetcast/fleetcast/fleetapi/fleetrpc"
	"github.com/fleetcast/fleetcast/functions/fnruntime"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/cli"
)

func main() { cli.Main("fleetcast-query", run) }

const usage = `Usage of fleetcast-query: serves the query API (REST, Connect, gRPC-Web, gRPC, streams and the
dashboard) over HTTP/1.1 and cleartext HTTP/2 on one port, configured by the environment:
PORT (8080), HOST (every interface), SHUTDOWN_GRACE (8s), GOOGLE_CLOUD_PROJECT,
FIRESTORE_DATABASE and the query function's variables (docs/operations.md). It takes no
flags; "fleetcast-query version" prints its version.`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return fnruntime.Service{
		Name: "fleetcast-query", Usage: usage, H2C: true, EndStreams: fleetrpc.ErrShutdown,
		Check: func(getenv func(string) string) error { _, err := query.ConfigFromEnv(getenv); return err },
		New: func(ctx context.Context, getenv func(string) string, logs io.Writer) (http.Handler, error) {
			return query.New(ctx, getenv, logs)
		},
	}.Run(ctx, args, getenv, stdout, stderr)
}
