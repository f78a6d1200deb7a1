// Command fleetcast shows what every Agones fleet in every cluster can
// serve: it reads Firestore directly (honouring FIRESTORE_EMULATOR_HOST) or
// the QueryFleets HTTP API (--api). Run fleetcast --help.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g, err := runWith(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetcast: "+message(err, g))
		stop()
		os.Exit(exitCode(err))
	}
}
