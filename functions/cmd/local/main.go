// Command local serves fleetcast's Cloud Functions on this machine with the
// Functions Framework, as the Cloud Functions runtime would: the function
// named by FUNCTION_TARGET at "/", or every function at "/<Name>" when it
// is unset, on PORT (default 8080) of HOST (default 127.0.0.1).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	// The functions register themselves in init.
	_ "github.com/fleetcast/fleetcast/functions/ingest"
	_ "github.com/fleetcast/fleetcast/functions/query"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: configure with FUNCTION_TARGET, PORT and HOST", args)
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
		return nil
	}
}
