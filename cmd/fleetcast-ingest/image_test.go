package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/internal/build/image"
)

// The ingest image follows the rules of every image of the project
// (internal/build/image), from the same base images as the publisher's.

func TestImageIsMultiArchitectureAndPinned(t *testing.T) {
	stages, err := image.ParseDockerfile("Dockerfile")
	require.NoError(t, err)
	goMod, err := os.ReadFile("../../go.mod")
	require.NoError(t, err)
	assert.Empty(t, image.Problems(stages, goMod, image.VersionFlags))
	publisher, err := image.ParseDockerfile("../fleetcast-publisher/Dockerfile")
	require.NoError(t, err)
	for i := range stages {
		assert.Equal(t, publisher[i].From, stages[i].From, "the images share their base images, updated together")
	}
}

func TestDockerignoreKeepsWhatTheBuildReads(t *testing.T) {
	ig, err := image.ReadIgnore("../../.dockerignore")
	require.NoError(t, err)
	files, err := image.BuildFiles(".", "../..")
	require.NoError(t, err)
	require.Greater(t, len(files), 20)
	for _, f := range append(files, "cmd/fleetcast-ingest/Dockerfile") {
		assert.False(t, ig.Ignored(f), "%s is needed by the build, but .dockerignore keeps it out", f)
	}
}
