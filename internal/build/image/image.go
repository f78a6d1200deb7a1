// Package image holds the rules every image of fleetcast's programs
// follows, as Docker applies them, by which its test checks every
// program's Dockerfile (cmd/*/Dockerfile): every base image pinned by
// digest; the compiler on the builder's platform, cross-compiling to the
// target's (TARGETOS and TARGETARCH exist in a stage only once it declares
// them); Go's minor version that of go.mod; the binary told its version; a
// distroless, non-root runtime; and a .dockerignore that keeps out what no
// build reads but none of what the program's build does.
package image

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// A Stage is one FROM of a Dockerfile and its instructions, each joined
// across its continuation lines.
type Stage struct {
	From  string
	Lines []string
}

// ParseDockerfile reads a Dockerfile's stages.
func ParseDockerfile(path string) ([]Stage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var stages []Stage
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
			stages = append(stages, Stage{From: line})
			continue
		}
		if len(stages) == 0 {
			return nil, fmt.Errorf("%s: an instruction before the first FROM: %s", path, line)
		}
		stages[len(stages)-1].Lines = append(stages[len(stages)-1].Lines, line)
	}
	return stages, sc.Err()
}

var (
	digestRef = regexp.MustCompile(`^[a-z0-9.\-/]+:[A-Za-z0-9.\-_]+@sha256:[0-9a-f]{64}$`)
	goTag     = regexp.MustCompile(`golang:(\d+\.\d+(\.\d+)?)`)
	buildArg  = regexp.MustCompile(`\$\{([A-Z_]+)\}`)
)

// Problems lists what breaks the rules in a program's stages: a build
// stage and a runtime; goMod is the module's go.mod, versionFlag the -X
// flags that tell the binary its version (VersionFlags), each ${ARG} in
// them declared by the stage.
// VersionFlags are the linker flags that stamp fleetcast's version and
// commit (package version) from the build arguments VERSION and COMMIT.
const VersionFlags = "-X github.com/fleetcast/fleetcast/version.version=${VERSION} -X github.com/fleetcast/fleetcast/version.commit=${COMMIT}"

func Problems(stages []Stage, goMod []byte, versionFlag string) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if len(stages) != 2 {
		return []string{fmt.Sprintf("%d stages: want a build stage and the runtime", len(stages))}
	}
	for _, s := range stages {
		fields := strings.Fields(s.From)
		ref := fields[len(fields)-1]
		for _, f := range fields[1:] {
			if !strings.HasPrefix(f, "--") {
				ref = f
				break
			}
		}
		if !digestRef.MatchString(ref) {
			bad("%s: pin the base image by tag and digest", s.From)
		}
	}
	build := stages[0]
	if !strings.Contains(build.From, "--platform=$BUILDPLATFORM") {
		bad("the build stage must compile on the builder's platform (--platform=$BUILDPLATFORM), not under emulation")
	}
	declared := map[string]bool{}
	compiles := false
	for _, l := range build.Lines {
		if a, ok := strings.CutPrefix(l, "ARG "); ok {
			declared[strings.SplitN(a, "=", 2)[0]] = true
		}
		if !strings.Contains(l, "go build") {
			continue
		}
		compiles = true
		if !strings.Contains(l, "GOOS=$TARGETOS GOARCH=$TARGETARCH") {
			bad("go build must cross-compile to the target platform (GOOS=$TARGETOS GOARCH=$TARGETARCH)")
		}
		if !declared["TARGETOS"] || !declared["TARGETARCH"] {
			bad("TARGETOS and TARGETARCH are empty in a stage that does not declare them (ARG)")
		}
		undeclared := false
		for _, m := range buildArg.FindAllStringSubmatch(versionFlag, -1) {
			undeclared = undeclared || !declared[m[1]]
		}
		if !strings.Contains(l, versionFlag) || undeclared {
			bad("the binary must know its version: %s, with an ARG for each ${...}", versionFlag)
		}
	}
	if !compiles {
		bad("the build stage runs no go build")
	}
	mod, err := modfile.ParseLax("go.mod", goMod, nil)
	switch tag := goTag.FindStringSubmatch(build.From); {
	case err != nil || mod.Go == nil:
		bad("go.mod: no go version (%v)", err)
	case tag == nil:
		bad("the build stage is not Go's official image (golang:X.Y.Z)")
	case semver.MajorMinor("v"+mod.Go.Version) != semver.MajorMinor("v"+tag[1]):
		bad("the image's Go %s is not go.mod's minor, %s", tag[1], mod.Go.Version)
	case semver.Compare("v"+tag[1], "v"+mod.Go.Version) < 0:
		bad("the image's Go %s is older than go.mod's %s", tag[1], mod.Go.Version)
	}
	runtime := stages[1]
	if !strings.Contains(runtime.From, "distroless/static") || !strings.Contains(runtime.From, ":nonroot@") {
		bad("the runtime must be distroless/static's nonroot image: %s", runtime.From)
	}
	user := false
	for _, l := range runtime.Lines {
		user = user || l == "USER 65532:65532"
	}
	if !user {
		bad("the runtime must run as USER 65532:65532")
	}
	return out
}

// Ignore is a .dockerignore's patterns.
type Ignore []*regexp.Regexp

// ReadIgnore parses a .dockerignore: filepath.Match syntax, with ** for
// any number of directories; exceptions (!) are refused, to keep the rules
// simple.
func ReadIgnore(path string) (Ignore, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out Ignore
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			return nil, fmt.Errorf("%s: %s: exceptions are not used here; keep the rules simple", path, line)
		}
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
	return out, nil
}

// Ignored reports whether the patterns keep path (relative to the context,
// slash-separated) out of the build context: Docker matches each pattern
// against the path and each of its parents.
func (ig Ignore) Ignored(path string) bool {
	for p := path; p != "."; p = filepath.Dir(p) {
		for _, re := range ig {
			if re.MatchString(p) {
				return true
			}
		}
	}
	return false
}

// BuildFiles lists, relative to the module's root, every file the build
// of the package in dir reads: go.mod, go.sum, and the Go and embedded
// files of each package of the module it imports.
func BuildFiles(dir, root string) ([]string, error) {
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}{{end}}`, ".")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps: %w", err)
	}
	root, err = filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	files := []string{"go.mod", "go.sum"}
	for _, f := range bytes.Fields(out) {
		rel, err := filepath.Rel(root, string(f))
		if err != nil {
			return nil, err
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files, nil
}
