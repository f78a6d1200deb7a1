// Command source builds the Cloud Functions' deployable source zip (see
// package functions/source), the function_source_zip Terraform uploads:
//
//	go run ./internal/cmd/source -o functions.zip
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/fleetcast/fleetcast/functions/source"
	"github.com/fleetcast/fleetcast/internal/cli"
)

func main() { cli.Main("source", run) }

func run(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("source", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "functions.zip", "where to write the zip")
	dir := fs.String("C", ".", "the module's root directory")
	var stamp source.Stamp
	fs.StringVar(&stamp.Version, "version", "", "the release the functions report (vMAJOR.MINOR.PATCH); empty: dev")
	fs.StringVar(&stamp.Commit, "commit", "", "the commit the functions report (with -version)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var buf bytes.Buffer
	if stamp.Commit != "" && stamp.Version == "" {
		return fmt.Errorf("-commit needs -version")
	}
	files, err := source.Build(ctx, *dir, stamp, &buf)
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
