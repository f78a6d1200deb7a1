// Command fleetcast shows what every Agones fleet in every cluster can
// serve: it reads Firestore directly (honouring FIRESTORE_EMULATOR_HOST) or
// the QueryFleets HTTP API (--api).
//
//	fleetcast get fleets [-l selector] [--cluster c] [-n namespace] [-o table|wide|json|yaml]
//	fleetcast get clusters [-o table|json|yaml]
//	fleetcast labels KEY [-o table|json|yaml]
//	fleetcast watch [-l selector] [--cluster c]
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
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if err != errUsage {
			fmt.Fprintln(os.Stderr, "fleetcast:", err)
		}
		os.Exit(1)
	}
}
