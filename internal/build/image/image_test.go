package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const good = `# syntax=docker/dockerfile:1
FROM --platform=$BUILDPLATFORM golang:1.26.6-bookworm@sha256:116d58cbd88c1297624acc6e967a060012422bacf9930927e23fb719189c6f36 AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG COMMIT=unknown
RUN GOOS=$TARGETOS GOARCH=$TARGETARCH go build \
      -ldflags="-X p.v=${VERSION} -X p.c=${COMMIT}" -o /out/p ./cmd/p
FROM gcr.io/distroless/static-debian12:nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639
COPY --from=build /out/p /p
USER 65532:65532
`

func problems(t *testing.T, dockerfile, goVersion string) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "Dockerfile")
	require.NoError(t, os.WriteFile(path, []byte(dockerfile), 0o644))
	stages, err := ParseDockerfile(path)
	require.NoError(t, err)
	return Problems(stages, []byte("module m\n\ngo "+goVersion+"\n"), "-X p.v=${VERSION} -X p.c=${COMMIT}")
}

// TestEachRuleFailsItsBreach: the good file passes, and each breach is
// named.
func TestEachRuleFailsItsBreach(t *testing.T) {
	assert.Empty(t, problems(t, good, "1.26.6"))
	for _, tt := range []struct{ what, old, new, goVersion, want string }{
		{"a tag without digest", "nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639", "nonroot", "1.26.6", "pin the base image"},
		{"compiled under emulation", "--platform=$BUILDPLATFORM ", "", "1.26.6", "builder's platform"},
		{"TARGETOS undeclared", "ARG TARGETOS\n", "", "1.26.6", "TARGETOS and TARGETARCH are empty"},
		{"not cross-compiled", "GOOS=$TARGETOS GOARCH=$TARGETARCH ", "", "1.26.6", "cross-compile"},
		{"no version", "-X p.v=${VERSION} -X p.c=${COMMIT}", "", "1.26.6", "know its version"},
		{"no commit", "-X p.c=${COMMIT}", "", "1.26.6", "know its version"},
		{"a flag's argument undeclared", "ARG COMMIT=unknown\n", "", "1.26.6", "an ARG for each"},
		{"another Go minor", "", "", "1.27.0", "not go.mod's minor"},
		{"an older Go patch", "", "", "1.26.8", "older than go.mod's"},
		{"as root", "USER 65532:65532\n", "", "1.26.6", "USER 65532:65532"},
		{"a full base image", "distroless/static-debian12:nonroot", "distroless/base-debian12:nonroot", "1.26.6", "distroless/static"},
	} {
		f := good
		if tt.old != "" {
			require.Contains(t, f, tt.old, tt.what)
			f = strings.Replace(f, tt.old, tt.new, 1)
		}
		got := strings.Join(problems(t, f, tt.goVersion), "\n")
		assert.Contains(t, got, tt.want, tt.what)
	}
}

func TestIgnoreMatchesAsDockerDoes(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".dockerignore")
	require.NoError(t, os.WriteFile(path, []byte("# c\n.git\n**/testdata\n**/*_test.go\nbin\n"), 0o644))
	ig, err := ReadIgnore(path)
	require.NoError(t, err)
	for p, want := range map[string]bool{".git/HEAD": true, "a/b/testdata/x": true, "testdata/x": true, "a/x_test.go": true,
		"bin/p": true, "a/x.go": false, "binary/x": false, "go.mod": false} {
		assert.Equal(t, want, ig.Ignored(p), p)
	}
	require.NoError(t, os.WriteFile(path, []byte("!keep\n"), 0o644))
	_, err = ReadIgnore(path)
	assert.ErrorContains(t, err, "exceptions")
}
