package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/internal/build/image"
)

// The publisher's image follows the rules of every image of the project
// (internal/build/image).

func TestImageIsMultiArchitectureAndPinned(t *testing.T) {
	stages, err := image.ParseDockerfile("Dockerfile")
	require.NoError(t, err)
	goMod, err := os.ReadFile("../../go.mod")
	require.NoError(t, err)
	assert.Empty(t, image.Problems(stages, goMod, image.VersionFlags))
}

func TestDockerignoreKeepsWhatTheBuildReads(t *testing.T) {
	ig, err := image.ReadIgnore("../../.dockerignore")
	require.NoError(t, err)
	for _, p := range []string{".git/HEAD", "bin/fleetcast-demo", "terraform/modules/fleetcast/main.tf", "publisher/agent_test.go", "fleet/testdata/fuzz/x"} {
		assert.True(t, ig.Ignored(p), "%s is sent to the builder", p)
	}
	files, err := image.BuildFiles(".", "../..")
	require.NoError(t, err)
	require.Greater(t, len(files), 20)
	for _, f := range append(files, filepath.ToSlash("cmd/fleetcast-publisher/Dockerfile")) {
		assert.False(t, ig.Ignored(f), "%s is needed by the build, but .dockerignore keeps it out", f)
	}
}
