// Package cli is how fleetcast's programs start and end: each main is
// cli.Main(name, run), so that every one answers -h and --help alike (its
// usage and every flag on standard error, exit status 0), stops on SIGINT
// or SIGTERM through run's context, and ends a failure with one line
// "name: error" and exit status 1. (The fleetcast CLI, with its own exit
// codes, keeps -h and --help the same through cobra.)
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Run is a program: its arguments (without the program's name), its
// environment, and where it writes.
type Run func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Main runs run with the process's arguments, environment and streams, and
// exits with Code of its error.
func Main(name string, run Run) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if code := Code(err); code != 0 {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(code)
	}
}

// Code is the exit status of run's error: 0 for none and for a help
// request (flag.ErrHelp: the usage is already out), 1 otherwise.
func Code(err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 1
}
