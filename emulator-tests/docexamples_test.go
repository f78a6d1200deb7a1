package emulatortests

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/internal/demo"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// notRun marks a shell block of the docs that cannot run against the
// demo, on the line before it, with the reason: <!-- not run: REASON -->.
var notRun = regexp.MustCompile(`^\s*<!-- not run: (.+) -->$`)

// demoPrograms are the programs a doc's example may run against the demo;
// an example of any other is to be marked notRun, and is never run here
// (a doc's terraform apply or make release is not the test's to run).
var demoPrograms = map[string]bool{"fleetcast": true, "curl": true, "source": true}

// example is one command of the docs or of the CLI's help.
type example struct {
	where string // file:line, or the command whose help shows it
	cmd   string
}

// docExamples returns the commands of every sh block of the repository's
// Markdown (README.md, docs/, the other READMEs; not testdata), but those
// of a block marked notRun: a block continues a line that ends with a
// backslash, and comment lines are output shown, not commands. A marked
// block must say why.
func docExamples(tb testing.TB, root string) []example {
	tb.Helper()
	var out []example
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			fence := strings.TrimSpace(lines[i])
			if fence != "```sh" && fence != "```bash" && fence != "```shell" {
				continue
			}
			skip := i > 0 && notRun.MatchString(lines[i-1])
			if i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), "<!-- not run") && !skip {
				tb.Errorf("%s:%d: a block not run says why: <!-- not run: REASON -->", rel, i)
			}
			cmd, start := "", 0
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				line := lines[i]
				if cmd == "" {
					if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
						continue
					}
					start = i + 1
				}
				if cont, ok := strings.CutSuffix(line, `\`); ok {
					cmd += cont
					continue
				}
				cmd += line
				if !skip {
					out = append(out, example{where: fmt.Sprintf("%s:%d", rel, start), cmd: strings.TrimSpace(cmd)})
				}
				cmd = ""
			}
		}
		return nil
	})
	require.NoError(tb, err)
	return out
}

// helpExamples returns the examples the CLI's help shows, of every
// command (fleetcast COMMAND --help, "Examples:").
func helpExamples(tb testing.TB, bin string) []example {
	tb.Helper()
	var out []example
	for _, command := range [][]string{{"get", "fleets"}, {"get", "clusters"}, {"labels"}, {"place"}, {"watch"}, {"version"}} {
		help, err := exec.Command(bin, append(command, "--help")...).Output()
		require.NoError(tb, err, "%s --help", command)
		_, examples, ok := strings.Cut(string(help), "\nExamples:\n")
		if !ok {
			continue
		}
		examples, _, _ = strings.Cut(examples, "\n\n")
		for line := range strings.SplitSeq(examples, "\n") {
			if cmd := strings.TrimSpace(line); strings.HasPrefix(cmd, "fleetcast ") {
				out = append(out, example{where: "fleetcast " + strings.Join(command, " ") + " --help", cmd: cmd})
			}
		}
	}
	return out
}

// runExamples runs each example with bash against the demo: the fleetcast
// binary on the PATH, Firestore's emulator and the demo's project for the
// commands that read Firestore, and URL the demo's query API for those
// that ask it. gcloud answers print-identity-token with a token nobody
// checks (the demo's query API asks for none); curl fails on an HTTP error
// (~/.curlrc). A command that follows changes (a watch) runs until it
// has printed, then is stopped; it fails if it ends first. Any other passes if it exits 0; one that printed nothing fails,
// but `source`.
func runExamples(t *testing.T, bin, queryURL string, examples []example) {
	home, shims := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(home, ".curlrc"), []byte("fail\nsilent\nshow-error\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(shims, "gcloud"), []byte(`#!/bin/sh
[ "$1 $2" = "auth print-identity-token" ] && { echo demo-token; exit 0; }
echo "gcloud $*: not in the demo" >&2; exit 2
`), 0o755))
	require.NoError(t, os.Symlink(bin, filepath.Join(shims, "fleetcast")))
	env := []string{"PATH=" + shims + ":" + os.Getenv("PATH"), "HOME=" + home, "URL=" + queryURL,
		"GOOGLE_CLOUD_PROJECT=" + demo.Project, emulator.FirestoreHostEnv + "=" + os.Getenv(emulator.FirestoreHostEnv)}
	follows := regexp.MustCompile(`\bwatch\b| -w\b|curl -N`)
	for _, ex := range examples {
		t.Run(ex.where, func(t *testing.T) {
			if program := strings.Fields(ex.cmd)[0]; !demoPrograms[program] {
				t.Fatalf("%s: %s runs against no demo: make it fleetcast or curl, or mark its block <!-- not run: REASON -->", ex.cmd, program)
			}
			ctx, cancel := context.WithTimeout(t.Context(), testhttp.Deadline)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", ex.cmd)
			cmd.Env = env
			var stdout syncbuf.Buffer
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			if follows.MatchString(ex.cmd) {
				// It runs until stopped: once it has printed, it is.
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for stdout.String() == "" {
					select {
					case err := <-done:
						t.Fatalf("%s ended (%v) before printing anything; stderr: %s", ex.cmd, err, stderr.String())
					case <-ctx.Done():
						t.Fatalf("%s printed nothing in %s; stderr: %s", ex.cmd, testhttp.Deadline, stderr.String())
					case <-tick.C:
					}
				}
				cancel()
				<-done
				return
			}
			err := <-done
			require.NoError(t, err, "%s\nstdout: %s\nstderr: %s", ex.cmd, stdout.String(), stderr.String())
			if !strings.HasPrefix(ex.cmd, "source ") {
				assert.NotEmpty(t, strings.TrimSpace(stdout.String()), "%s printed nothing; stderr: %s", ex.cmd, stderr.String())
			}
		})
	}
}

// TestDocExamplesAreFound: the extraction of the docs' examples sees what
// a reader sees (this package's own check of docExamples).
func TestDocExamplesAreFound(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.md"), []byte("text\n\n```sh\n# output\nfleetcast get fleets \\\n  -l platform=pc   # comment\n\nfleetcast labels version\n```\n\n<!-- not run: needs a cluster -->\n```sh\nhelm install x\n```\n```go\nnot shell\n```\n1. a step:\n   <!-- not run: needs a project -->\n   ```sh\n   terraform apply\n   ```\n"), 0o644))
	got := docExamples(t, dir)
	assert.Equal(t, []example{
		{where: "a.md:5", cmd: "fleetcast get fleets   -l platform=pc   # comment"},
		{where: "a.md:8", cmd: "fleetcast labels version"},
	}, got)
	assert.False(t, notRun.MatchString("<!-- not run -->"), "a mark without a reason is no mark")
}
