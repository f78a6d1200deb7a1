package image_test

import (
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/internal/build/image"
)

// root is the module's root, from this package's directory.
const root = "../../.."

// TestEveryProgramsImageFollowsTheRules checks each program's Dockerfile
// (cmd/*/Dockerfile) by the rules of every image: multi-architecture and
// pinned, from the same base images as the publisher's (updated
// together), and a .dockerignore that keeps in every file its build reads.
func TestEveryProgramsImageFollowsTheRules(t *testing.T) {
	dockerfiles, err := filepath.Glob(filepath.Join(root, "cmd", "*", "Dockerfile"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(dockerfiles), 4, "the publisher's, the query's, the ingest's and the allocator's")
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	publisher, err := image.ParseDockerfile(filepath.Join(root, "cmd", "fleetcast-publisher", "Dockerfile"))
	require.NoError(t, err)
	ig, err := image.ReadIgnore(filepath.Join(root, ".dockerignore"))
	require.NoError(t, err)
	for _, p := range []string{".git/HEAD", "bin/fleetcast-demo", "terraform/modules/fleetcast/main.tf", "publisher/agent_test.go", "fleet/testdata/fuzz/x"} {
		assert.True(t, ig.Ignored(p), "%s is sent to the builder", p)
	}
	for _, dockerfile := range dockerfiles {
		program := filepath.Base(filepath.Dir(dockerfile))
		t.Run(program, func(t *testing.T) {
			stages, err := image.ParseDockerfile(dockerfile)
			require.NoError(t, err)
			assert.Empty(t, image.Problems(stages, goMod, image.VersionFlags))
			require.Len(t, stages, len(publisher))
			for i := range stages {
				assert.Equal(t, publisher[i].From, stages[i].From, "the images share their base images, updated together")
			}
			files, err := image.BuildFiles(filepath.Dir(dockerfile), root)
			require.NoError(t, err)
			require.Greater(t, len(files), 20)
			for _, f := range append(files, path.Join("cmd", program, "Dockerfile")) {
				assert.False(t, ig.Ignored(f), "%s is needed by the build, but .dockerignore keeps it out", f)
			}
		})
	}
}
