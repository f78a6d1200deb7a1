package emulatortests

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/functions/source"
	"github.com/fleetcast/fleetcast/internal/build/buildpack"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

// TestSourceZipBuildsAndServesLikeTheBuildpack builds the deployable zip,
// checks it is deterministic and minimal, then builds it as the buildpack
// would and calls both functions on the emulators.
func TestSourceZipBuildsAndServesLikeTheBuildpack(t *testing.T) {
	fsHost := emulator.Host(t, emulator.FirestoreHostEnv)
	var first, second bytes.Buffer
	files, err := source.Build(t.Context(), "..", source.Stamp{}, &first)
	require.NoError(t, err)
	_, err = source.Build(t.Context(), "..", source.Stamp{}, &second)
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

	// Unpack as Cloud Build does and build each function with the main the
	// buildpack would generate for it.
	appRoot := t.TempDir()
	unzip(t, first.Bytes(), filepath.Join(appRoot, buildpack.SourceDir))
	bins := map[string]string{}
	for _, target := range []string{"IngestFleetEvents", "QueryFleets"} {
		bins[target] = filepath.Join(t.TempDir(), "server")
		tmpl, err := buildpack.Build(t.Context(), appRoot, target, bins[target])
		require.NoError(t, err, "the unpacked source must build as the buildpack builds it")
		assert.Equal(t, buildpack.Declarative, tmpl)
	}

	serve := func(target string) string {
		port, err := proc.FreePort()
		require.NoError(t, err)
		fn, err := proc.Start(target, bins[target], proc.Options{
			Env:    []string{"FUNCTION_TARGET=" + target, "PORT=" + port, "GOOGLE_CLOUD_PROJECT=" + project, emulator.FirestoreHostEnv + "=" + fsHost},
			Stderr: os.Stderr,
		})
		require.NoError(t, err)
		t.Cleanup(fn.Stop)
		require.NoError(t, fn.WaitReady(t.Context(), waitTimeout, proc.Listening("127.0.0.1:"+port)))
		return "http://127.0.0.1:" + port
	}

	// IngestFleetEvents, with a raw push body.
	p := newPipeline(t)
	ingestURL := serve("IngestFleetEvents")
	body := `{"message":{"data":"` + base64.StdEncoding.EncodeToString(mustEncode(t, p.upsert("from-zip", 1, 3))) +
		`","messageId":"zip-1"},"subscription":"projects/` + project + `/subscriptions/zip"}`
	resp, err := testhttp.Client.Post(ingestURL+"/"+pubsubtopic.TopicName(project, topicOf(p.cluster)), "application/json", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	d, _ := p.doc("from-zip")
	require.NotNil(t, d, "the zip's ingest function wrote the fleet")
	assert.Equal(t, int64(3), d.Status.ReadyReplicas)

	// QueryFleets reads it back.
	queryURL := serve("QueryFleets")
	resp, err = testhttp.Client.Get(queryURL + "/v1/fleets/" + p.cluster + "/default/from-zip")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Contains(t, string(b), `"readyReplicas":3`)
}

// TestWithoutTheFunctionsImportTheBuildpackBuildFails: the same zip with a
// root package that does not import the framework's functions package
// (the function packages imported for nothing, as before the root
// registered them) gets the buildpack's v1.1 template, which calls
// fleetcast.IngestFleetEvents, and fails to build — what Cloud Build did
// before the import was added.
func TestWithoutTheFunctionsImportTheBuildpackBuildFails(t *testing.T) {
	var zipped bytes.Buffer
	_, err := source.Build(t.Context(), "..", source.Stamp{}, &zipped)
	require.NoError(t, err)
	appRoot := t.TempDir()
	src := filepath.Join(appRoot, buildpack.SourceDir)
	unzip(t, zipped.Bytes(), src)
	root := filepath.Join(src, "functions.go")
	b, err := os.ReadFile(root)
	require.NoError(t, err)
	require.Contains(t, string(b), `"`+buildpack.FunctionsPackage+`"`, "the root imports the framework's functions package")
	stripped := "package fleetcast\n\nimport (\n\t_ \"github.com/fleetcast/fleetcast/functions/ingest\"\n\t_ \"github.com/fleetcast/fleetcast/functions/query\"\n)\n"
	require.NoError(t, os.WriteFile(root, []byte(stripped), 0o644))

	tmpl, err := buildpack.Build(t.Context(), appRoot, "IngestFleetEvents", filepath.Join(t.TempDir(), "server"))
	assert.Equal(t, buildpack.V1_1, tmpl)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "undefined: userfunction.IngestFleetEvents")
}

// unzip writes the zip's files under dir.
func unzip(tb testing.TB, b []byte, dir string) {
	tb.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	require.NoError(tb, err)
	for _, f := range zr.File {
		rc, err := f.Open()
		require.NoError(tb, err)
		content, err := io.ReadAll(rc)
		rc.Close()
		require.NoError(tb, err)
		path := filepath.Join(dir, filepath.FromSlash(f.Name))
		require.NoError(tb, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(tb, os.WriteFile(path, content, 0o644))
	}
}
