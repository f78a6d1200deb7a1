// Command chartdoc rewrites the values table in a chart's README.md from
// its values.yaml's comments (package internal/build/chartdoc):
//
//	go run ./internal/cmd/chartdoc publisher/chart
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/fleetcast/fleetcast/internal/build/chartdoc"
	"github.com/fleetcast/fleetcast/internal/cli"
)

func main() { cli.Main("chartdoc", run) }

func run(_ context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chartdoc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("want one argument, the chart's directory")
	}
	dir := fs.Arg(0)
	values, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := chartdoc.Update(readme, values)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: values table written\n", path)
	return nil
}
