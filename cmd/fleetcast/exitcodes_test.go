package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
	"github.com/fleetcast/fleetcast/logging"
)

// TestEveryDocumentedExitCode runs the built binary as a script would, in
// an environment of the test's making (no Application Default
// Credentials), once for each exit code docs/cli.md documents, and each
// way a code comes about: its code is what the doc says, and its one line
// on stderr says what to do.
func TestEveryDocumentedExitCode(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fleetcast")
	require.NoError(t, proc.Build(t.Context(), "", "github.com/fleetcast/fleetcast/cmd/fleetcast", bin))
	project, store := world(t)
	api := httptest.NewServer(query.NewHandler(fleetapi.NewService(store, fleetapi.Options{}), logging.New(io.Discard, logging.LevelWarning)))
	t.Cleanup(api.Close)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>Error: Server Error</html>", http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>Error: Forbidden</html>", http.StatusForbidden)
	}))
	t.Cleanup(forbidden.Close)
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read first: the server notices a client gone (and ends the
		// context) only once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	}))
	t.Cleanup(silent.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := "http://" + l.Addr().String()
	require.NoError(t, l.Close())

	home := t.TempDir() // no gcloud login in it
	emulatorEnv := emulator.FirestoreHostEnv + "=" + os.Getenv(emulator.FirestoreHostEnv)
	for _, c := range []struct {
		name   string
		code   int
		env    []string
		args   []string
		stderr string
	}{
		{"done", 0, []string{emulatorEnv}, []string{"get", "fleets"}, ""},
		{"done, through the API", 0, nil, []string{"--api", api.URL, "get", "clusters"}, ""},
		{"failed", 1, nil, []string{"--api", failing.URL, "get", "fleets"}, "500"},
		{"a mistyped command", 2, nil, []string{"get", "flets"}, "did you mean fleets?"},
		{"a bad selector", 2, []string{emulatorEnv}, []string{"get", "fleets", "-l", "a=(b"}, "-l:"},
		{"not found", 3, []string{emulatorEnv}, []string{"get", "fleet", "pc/games/nope"}, "not found"},
		{"not found, through the API", 3, nil, []string{"--api", api.URL, "get", "cluster", "nope"}, "not found"},
		{"refused", 4, nil, []string{"--api", refused, "get", "fleets"}, "cannot answer now: check it is reachable, then retry"},
		{"timed out", 4, nil, []string{"--api", silent.URL, "--request-timeout", "500ms", "get", "fleets"},
			"within --request-timeout 500ms: check it is reachable, then retry or raise --request-timeout"},
		{"not allowed", 5, nil, []string{"--api", forbidden.URL, "get", "fleets"}, "check the credentials"},
		{"no credentials for the API", 5, nil, []string{"--api", "https://fleetcast.invalid", "get", "fleets"},
			"run gcloud auth application-default login, or set GOOGLE_APPLICATION_CREDENTIALS"},
		{"no credentials for Firestore", 5, nil, []string{"get", "fleets"},
			"run gcloud auth application-default login, or set GOOGLE_APPLICATION_CREDENTIALS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), bin, c.args...)
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GOOGLE_CLOUD_PROJECT=" + project}, c.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := errors.AsType[*exec.ExitError](err); ok {
				code = ee.ExitCode()
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, c.code, code, "stderr: %s", stderr.String())
			if c.code == 0 {
				assert.NotEmpty(t, stdout.String())
				return
			}
			line := strings.TrimSuffix(stderr.String(), "\n")
			assert.Contains(t, line, c.stderr)
			assert.NotContains(t, line, "\n", "one line")
			if c.code != 4 || c.name == "refused" {
				assert.NotContains(t, line, "within --request-timeout", "only a request the timeout ended says so")
			}
		})
	}

	// The codes the doc lists are the ones tested here, and the help's.
	doc, err := os.ReadFile("../../docs/cli.md")
	require.NoError(t, err)
	listed := regexp.MustCompile(`Exit codes: ((?:\d [a-z ]+(?:, |\.))+)`).FindSubmatch(doc)
	require.NotNil(t, listed, "docs/cli.md lists no exit codes")
	var codes []int
	for _, m := range regexp.MustCompile(`(\d) `).FindAllSubmatch(listed[1], -1) {
		n, _ := strconv.Atoi(string(m[1]))
		codes = append(codes, n)
	}
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5}, codes, "docs/cli.md's exit codes")
}
