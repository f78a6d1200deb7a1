// Command release builds a release's artifacts (package
// internal/build/release) from a clean checkout of the commit it names:
//
//	go run ./internal/cmd/release -version v0.4.0 -helm "$(scripts/helm.sh path)" -o bin/release/v0.4.0
//
// make release VERSION=v0.4.0 runs it. The commit is HEAD's, and a tree
// with uncommitted changes is refused: a release is one commit's.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/fleetcast/fleetcast/internal/build/release"
	"github.com/fleetcast/fleetcast/internal/cli"
)

func main() { cli.Main("release", run) }

func run(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := release.Options{ModuleDir: ".", Progress: stdout}
	fs.StringVar(&o.Version, "version", "", "the release, vMAJOR.MINOR.PATCH (required)")
	fs.StringVar(&o.OutDir, "o", "", "where the artifacts go, an empty or new directory (default bin/release/VERSION)")
	fs.StringVar(&o.Helm, "helm", "helm", "the helm binary that packages the chart")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := release.CheckSources(o.ModuleDir, o.Version); err != nil {
		return err
	}
	if o.OutDir == "" {
		o.OutDir = filepath.Join("bin", "release", o.Version)
	}
	commit, err := cleanHead(ctx)
	if err != nil {
		return err
	}
	o.Commit = commit
	artifacts, err := release.Build(ctx, o)
	if err != nil {
		return err
	}
	for _, a := range artifacts {
		fmt.Fprintf(stdout, "%s  %s  %d bytes\n", a.SHA256, filepath.Join(o.OutDir, a.Name), a.Size)
	}
	fmt.Fprintf(stdout, "release %s of %s: %d artifacts in %s\n", o.Version, commit, len(artifacts), o.OutDir)
	return nil
}

// cleanHead is HEAD's commit, refused when the tree has changes.
func cleanHead(ctx context.Context) (string, error) {
	status, err := git(ctx, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return "", err
	}
	if status != "" {
		return "", fmt.Errorf("the tree has uncommitted changes; commit or stash them, a release is built from one commit:\n%s", status)
	}
	return git(ctx, "rev-parse", "HEAD")
}

func git(ctx context.Context, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, errOut.String())
	}
	return strings.TrimSpace(out.String()), nil
}
