// Command source builds the Cloud Functions' deployable source zip (see
// package functions/source), the function_source_zip Terraform uploads:
//
//	go run ./functions/cmd/source -o functions.zip
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fleetcast/fleetcast/functions/source"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "source:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("source", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "functions.zip", "where to write the zip")
	dir := fs.String("C", ".", "the module's root directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var buf bytes.Buffer
	files, err := source.Build(ctx, *dir, &buf)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	sum := sha256.Sum256(buf.Bytes())
	fmt.Fprintf(stdout, "%s: %d files, %d bytes, sha256 %s\n", *out, len(files), buf.Len(), hex.EncodeToString(sum[:]))
	return nil
}
