package cli_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/internal/cli"
)

func TestCode(t *testing.T) {
	assert.Equal(t, 0, cli.Code(nil))
	assert.Equal(t, 0, cli.Code(flag.ErrHelp))
	assert.Equal(t, 0, cli.Code(fmt.Errorf("parse: %w", flag.ErrHelp)))
	assert.Equal(t, 1, cli.Code(errors.New("boom")))
}

// mains lists every program of the module (package main), by import path
// relative to the module.
func mains(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "../../...").Output()
	require.NoError(t, err)
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(p, "github.com/fleetcast/fleetcast/"))
	}
	require.GreaterOrEqual(t, len(pkgs), 7)
	return pkgs
}

// TestEveryProgramLivesWhereTheRuleSays: a program is cmd/NAME, a
// development tool internal/cmd/NAME, an example examples/NAME.
func TestEveryProgramLivesWhereTheRuleSays(t *testing.T) {
	for _, p := range mains(t) {
		assert.Contains(t, []string{"cmd", "internal/cmd", "examples"}, path.Dir(p), "%s: a program outside cmd/, internal/cmd/ and examples/", p)
	}
}

// TestEveryProgramAnswersHelpAlike builds every program and runs it with
// -h and with --help: exit status 0, and a usage that lists its flags on
// standard error (or, for the cobra CLI, standard output).
func TestEveryProgramAnswersHelpAlike(t *testing.T) {
	dir := t.TempDir()
	pkgs := mains(t)
	var full []string
	for _, p := range pkgs {
		full = append(full, "github.com/fleetcast/fleetcast/"+p)
	}
	build := exec.Command("go", append([]string{"build", "-o", dir + "/"}, full...)...)
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, p := range pkgs {
		for _, help := range []string{"-h", "--help"} {
			t.Run(p+" "+help, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				cmd := exec.Command(filepath.Join(dir, filepath.Base(p)), help)
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				cmd.Env = append(os.Environ(), "FLEETCAST_CLUSTER=", "GOOGLE_CLOUD_PROJECT=")
				require.NoError(t, cmd.Run(), "exit status 0; stderr: %s", stderr.String())
				usage := stderr.String() + stdout.String()
				assert.Regexp(t, `(?i)usage`, usage)
				assert.NotContains(t, usage, "flag: help requested", "help is not an error")
			})
		}
	}
}
