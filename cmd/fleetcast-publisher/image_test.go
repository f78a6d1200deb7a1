package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// The rules of this Dockerfile, as Docker applies them: every base
// image pinned by digest; the compiler on the builder's platform,
// cross-compiling to the target's (TARGETOS and TARGETARCH exist in a
// stage only once it declares them); Go's minor version that of go.mod;
// and a .dockerignore that keeps out what no build reads but none of what
// the publisher's build does.

type stage struct {
	from  string   // the FROM line
	lines []string // the stage's instructions
}

func dockerfile(tb testing.TB) []stage {
	tb.Helper()
	f, err := os.Open("Dockerfile")
	require.NoError(tb, err)
	defer f.Close()
	var stages []stage
	var cont string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cont += s + " "
			continue
		}
		line, cont = cont+line, ""
		if strings.HasPrefix(line, "FROM ") {
			stages = append(stages, stage{from: line})
			continue
		}
		require.NotEmpty(tb, stages, "an instruction before the first FROM: %s", line)
		stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
	}
	require.NoError(tb, sc.Err())
	return stages
}

var digestRef = regexp.MustCompile(`^[a-z0-9.\-/]+:[A-Za-z0-9.\-_]+@sha256:[0-9a-f]{64}$`)

func TestImageIsMultiArchitectureAndPinned(t *testing.T) {
	stages := dockerfile(t)
	require.Len(t, stages, 2, "a build stage and the runtime")
	for _, s := range stages {
		fields := strings.Fields(s.from)
		ref := fields[1]
		if strings.HasPrefix(ref, "--platform=") {
			ref = fields[2]
		}
		assert.Regexp(t, digestRef, ref, "%s: pin the base image by tag and digest", s.from)
	}

	build := stages[0]
	assert.Contains(t, build.from, "--platform=$BUILDPLATFORM", "compile on the builder's platform, not under emulation")
	declared := map[string]bool{}
	var compiles bool
	for _, l := range build.lines {
		if a, ok := strings.CutPrefix(l, "ARG "); ok {
			declared[strings.SplitN(a, "=", 2)[0]] = true
		}
		if strings.Contains(l, "go build") {
			compiles = true
			assert.Contains(t, l, "GOOS=$TARGETOS GOARCH=$TARGETARCH", "cross-compile to the target platform")
			assert.True(t, declared["TARGETOS"] && declared["TARGETARCH"], "TARGETOS and TARGETARCH are empty in a stage that does not declare them")
			assert.Contains(t, l, "publisher.Version=${VERSION}", "the image's binary knows its version")
			assert.True(t, declared["VERSION"])
		}
	}
	assert.True(t, compiles)

	// The compiler's Go is go.mod's minor, at least its patch.
	b, err := os.ReadFile("../../go.mod")
	require.NoError(t, err)
	mod, err := modfile.ParseLax("go.mod", b, nil)
	require.NoError(t, err)
	tag := regexp.MustCompile(`golang:(\d+\.\d+(\.\d+)?)`).FindStringSubmatch(build.from)
	require.NotNil(t, tag, "the build stage is Go's official image")
	assert.Equal(t, semver.MajorMinor("v"+mod.Go.Version), semver.MajorMinor("v"+tag[1]), "the image's Go minor is go.mod's")
	assert.GreaterOrEqual(t, semver.Compare("v"+tag[1], "v"+mod.Go.Version), 0)

	runtime := stages[1]
	assert.Contains(t, runtime.from, "distroless/static")
	assert.Contains(t, runtime.from, ":nonroot@")
	assert.Contains(t, runtime.lines, "USER 65532:65532")
}

// ignored reports whether .dockerignore's patterns keep path (relative to
// the context, slash-separated) out of the build context: Docker matches
// each pattern (filepath.Match syntax, with ** for any number of
// directories) against the path and each of its parents.
func ignored(patterns []*regexp.Regexp, path string) bool {
	for p := path; p != "."; p = filepath.Dir(p) {
		for _, re := range patterns {
			if re.MatchString(p) {
				return true
			}
		}
	}
	return false
}

func dockerignore(tb testing.TB) []*regexp.Regexp {
	tb.Helper()
	b, err := os.ReadFile("../../.dockerignore")
	require.NoError(tb, err)
	var out []*regexp.Regexp
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		require.False(tb, strings.HasPrefix(line, "!"), "exceptions are not used here; keep the rules simple")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case line[i] == '*':
				re.WriteString("[^/]*")
			case line[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(line[i : i+1]))
			}
		}
		re.WriteString("$")
		out = append(out, regexp.MustCompile(re.String()))
	}
	return out
}

func TestDockerignoreKeepsWhatTheBuildReads(t *testing.T) {
	patterns := dockerignore(t)
	for _, p := range []string{".git/HEAD", "bin/fleetcast-demo", "terraform/modules/fleetcast/main.tf", "publisher/agent_test.go", "fleet/testdata/fuzz/x"} {
		assert.True(t, ignored(patterns, p), "%s is sent to the builder", p)
	}
	// Every file of the publisher's build: the module files, and the Go and
	// embedded files of each package of this module it imports.
	out, err := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}{{end}}`, ".").Output()
	require.NoError(t, err)
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	needed := []string{"go.mod", "go.sum", "cmd/fleetcast-publisher/Dockerfile"}
	for _, f := range bytes.Fields(out) {
		rel, err := filepath.Rel(root, string(f))
		require.NoError(t, err)
		needed = append(needed, filepath.ToSlash(rel))
	}
	require.Greater(t, len(needed), 20)
	for _, f := range needed {
		assert.False(t, ignored(patterns, f), "%s is needed by the build, but .dockerignore keeps it out", f)
	}
}
