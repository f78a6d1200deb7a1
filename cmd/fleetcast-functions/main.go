// Command fleetcast-functions serves fleetcast's Cloud Functions on this machine with the
// Functions Framework, as the Cloud Functions runtime would: the function
// named by FUNCTION_TARGET at "/", or every function at "/<Name>" when it
// is unset, on PORT (default 8080) of HOST (default 127.0.0.1).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	// The module's root package registers the functions in its init, as
	// the buildpack's main imports it.
	_ "github.com/fleetcast/fleetcast"

	"github.com/fleetcast/fleetcast/functions/fnruntime"
	"github.com/fleetcast/fleetcast/internal/cli"
)

func main() { cli.Main("fleetcast-functions", run) }

func run(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleetcast-functions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `Usage of fleetcast-functions: serves the Cloud Functions with the Functions Framework, configured
by the environment: FUNCTION_TARGET (IngestFleetEvents or QueryFleets; every function
at /<Name> when unset), PORT (8080), HOST (127.0.0.1), and each function's variables
(docs/operations.md). It takes no flags.`)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: configure with FUNCTION_TARGET, PORT and HOST", fs.Args())
	}
	host, port := getenv("HOST"), getenv("PORT")
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "8080"
	}
	target := getenv("FUNCTION_TARGET")
	if target == "" {
		target = "every function at /<Name>"
	}
	fmt.Fprintf(stderr, "serving %s on http://%s:%s\n", target, host, port)
	errc := make(chan error, 1)
	go func() { errc <- funcframework.StartHostPort(host, port) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		// The framework has no graceful shutdown; in-flight events are
		// redelivered by Pub/Sub since they were never acknowledged.
		// The spans held are exported.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := fnruntime.FlushTracing(fctx); err != nil {
			fmt.Fprintf(stderr, "fleetcast-functions: exporting the last spans: %v\n", err)
		}
		return nil
	}
}
