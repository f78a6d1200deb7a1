package emulatortests

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/functions/source"
	"github.com/fleetcast/fleetcast/internal/emulator"
)

// buildpackMain is the kind of main the Cloud Functions Go buildpack
// generates: it blank-imports the package at the root of the upload and
// starts the Functions Framework, which serves FUNCTION_TARGET.
const buildpackMain = `package main

import (
	"log"
	"os"

	_ "github.com/fleetcast/fleetcast"
	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	if err := funcframework.Start(port); err != nil {
		log.Fatalf("funcframework.Start: %v", err)
	}
}
`

// TestSourceZipBuildsAndServesLikeTheBuildpack builds the deployable zip,
// checks it is deterministic and minimal, then builds it as the buildpack
// would and calls both functions on the emulators.
func TestSourceZipBuildsAndServesLikeTheBuildpack(t *testing.T) {
	fsHost := emulator.Host(t, emulator.FirestoreHostEnv)
	var first, second bytes.Buffer
	files, err := source.Build(t.Context(), "..", &first)
	require.NoError(t, err)
	_, err = source.Build(t.Context(), "..", &second)
	require.NoError(t, err)
	assert.Equal(t, first.Bytes(), second.Bytes(), "the same source gives the same bytes")
	for _, f := range files {
		for _, never := range []string{"publisher/", "terraform/", "cmd/", "emulator-tests/", "_test.go", "internal/"} {
			assert.NotContains(t, f, never, "only what the functions import")
		}
	}
	assert.Contains(t, files, "functions.go")
	assert.Contains(t, files, "functions/ingest/ingest.go")
	assert.Contains(t, files, "functions/query/query.go")

	// Unpack, add the generated main, build.
	dir := t.TempDir()
	zr, err := zip.NewReader(bytes.NewReader(first.Bytes()), int64(first.Len()))
	require.NoError(t, err)
	for _, f := range zr.File {
		rc, err := f.Open()
		require.NoError(t, err)
		b, err := io.ReadAll(rc)
		rc.Close()
		require.NoError(t, err)
		path := filepath.Join(dir, filepath.FromSlash(f.Name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, b, 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "serverless_function_source_code"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "serverless_function_source_code", "main.go"), []byte(buildpackMain), 0o644))
	bin := filepath.Join(t.TempDir(), "server")
	build := exec.Command("go", "build", "-mod=readonly", "-o", bin, "./serverless_function_source_code")
	build.Dir = dir
	out, err := build.CombinedOutput()
	require.NoError(t, err, "the unpacked source must build on its own:\n%s", out)

	serve := func(target string) string {
		port, err := freePort()
		require.NoError(t, err)
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "FUNCTION_TARGET="+target, "PORT="+port, "GOOGLE_CLOUD_PROJECT="+project, emulator.FirestoreHostEnv+"="+fsHost)
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		url := "http://127.0.0.1:" + port
		eventually(t, target+" listening", func() bool {
			resp, err := http.Get(url + "/healthz-probe")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil
		})
		return url
	}

	// IngestFleetEvents, with a raw push body.
	p := newPipeline(t)
	ingestURL := serve("IngestFleetEvents")
	body := `{"message":{"data":"` + base64.StdEncoding.EncodeToString(mustEncode(t, p.upsert("from-zip", 1, 3))) +
		`","messageId":"zip-1"},"subscription":"projects/` + project + `/subscriptions/zip"}`
	resp, err := http.Post(ingestURL+"/projects/"+project+"/topics/fleet-events", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	d, _ := p.doc("from-zip")
	require.NotNil(t, d, "the zip's ingest function wrote the fleet")
	assert.Equal(t, int64(3), d.Status.ReadyReplicas)

	// QueryFleets reads it back.
	queryURL := serve("QueryFleets")
	resp, err = http.Get(queryURL + "/v1/fleets/" + p.cluster + "/default/from-zip")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Contains(t, string(b), `"readyReplicas":3`)
}
