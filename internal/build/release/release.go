// Package release builds a fleetcast release's artifacts into a
// directory (make release VERSION=vX.Y.Z; internal/cmd/release):
//
//   - the CLI, fleetcast-VERSION-OS-ARCH (.exe on Windows), for linux,
//     darwin and windows on amd64 and arm64;
//   - the publisher, fleetcast-publisher-VERSION-linux-ARCH, the binary
//     its image holds (images are built by make image or Cloud Build);
//   - the publisher's chart, fleetcast-publisher-CHARTVERSION.tgz, and the
//     allocation service's, fleetcast-allocator-CHARTVERSION.tgz, with
//     version and appVersion set to the release (without the "v");
//   - the Cloud Functions' source zip, fleetcast-functions-VERSION.zip,
//     stamped so that the functions report the release;
//   - SHA256SUMS, in sha256sum's format, of every file above.
//
// Every program reports the same version and commit (package version).
package release

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/fleetcast/fleetcast/functions/source"
)

// Platform is a GOOS/GOARCH pair.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// CLIPlatforms are the platforms the CLI is released for.
var CLIPlatforms = []Platform{
	{"linux", "amd64"}, {"linux", "arm64"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

// PublisherPlatforms are the platforms of the publisher (its image's).
var PublisherPlatforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}}

// Options say what to build, from where, to where.
type Options struct {
	// Version is the release, vMAJOR.MINOR.PATCH (a pre-release suffix
	// allowed); Commit the commit it is built from.
	Version, Commit string
	// ModuleDir is the module's root; OutDir where the artifacts go
	// (created; refused if it holds files already).
	ModuleDir, OutDir string
	// Helm is the helm binary that packages the chart.
	Helm string
	// Go is the go command (default "go").
	Go string
	// Progress gets a line per step.
	Progress io.Writer
}

// Artifact is a file of the release.
type Artifact struct {
	Name   string // its file name in OutDir
	SHA256 string // hex
	Size   int64
}

// Names are the file names of the release's artifacts for version, in the
// order Build makes them (SHA256SUMS last).
func Names(version string) []string {
	var names []string
	for _, p := range CLIPlatforms {
		names = append(names, binaryName("fleetcast", version, p))
	}
	for _, p := range PublisherPlatforms {
		names = append(names, binaryName("fleetcast-publisher", version, p))
	}
	return append(names, ChartName(version), AllocatorChartName(version), FunctionsName(version), SumsName)
}

// SumsName is the checksums file.
const SumsName = "SHA256SUMS"

// ChartVersion is the chart's version (and appVersion, and the images'
// tag) for a release: SemVer without the "v".
func ChartVersion(version string) string { return strings.TrimPrefix(version, "v") }

// ChartName is the packaged chart's file name, as helm package names it.
func ChartName(version string) string {
	return "fleetcast-publisher-" + ChartVersion(version) + ".tgz"
}

// AllocatorChartName is fleetcast-allocator's packaged chart's file name.
func AllocatorChartName(version string) string {
	return "fleetcast-allocator-" + ChartVersion(version) + ".tgz"
}

// FunctionsName is the functions' source zip's file name.
func FunctionsName(version string) string { return "fleetcast-functions-" + version + ".zip" }

func binaryName(program, version string, p Platform) string {
	name := fmt.Sprintf("%s-%s-%s-%s", program, version, p.OS, p.Arch)
	if p.OS == "windows" {
		name += ".exe"
	}
	return name
}

// Check refuses a version that is not a release's.
func Check(version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("VERSION %q: want vMAJOR.MINOR.PATCH, e.g. v0.4.0 (a pre-release suffix such as -rc.1 allowed)", version)
	}
	return nil
}

// Build makes every artifact in o.OutDir and writes SHA256SUMS; it returns
// the artifacts, SHA256SUMS last.
func Build(ctx context.Context, o Options) ([]Artifact, error) {
	if err := Check(o.Version); err != nil {
		return nil, err
	}
	if o.Commit == "" {
		return nil, fmt.Errorf("no commit: a release names the commit it is built from")
	}
	var err error
	if o.OutDir, err = filepath.Abs(o.OutDir); err != nil {
		return nil, err
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	if entries, err := os.ReadDir(o.OutDir); err != nil || len(entries) > 0 {
		return nil, fmt.Errorf("%s: not an empty directory (%d entries, %v): a release is built afresh", o.OutDir, len(entries), err)
	}
	names := Names(o.Version)
	steps := []func(context.Context) error{}
	for _, p := range CLIPlatforms {
		steps = append(steps, o.goBuild("./cmd/fleetcast", binaryName("fleetcast", o.Version, p), p))
	}
	for _, p := range PublisherPlatforms {
		steps = append(steps, o.goBuild("./cmd/fleetcast-publisher", binaryName("fleetcast-publisher", o.Version, p), p))
	}
	steps = append(steps, o.chart(filepath.Join("publisher", "chart")), o.chart(filepath.Join("cmd", "fleetcast-allocator", "chart")), o.functions)
	for i, step := range steps {
		fmt.Fprintf(o.Progress, "release %s: [%d/%d] %s\n", o.Version, i+1, len(steps), names[i])
		if err := step(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", names[i], err)
		}
	}
	return o.sums(names[:len(names)-1])
}

// goBuild compiles pkg for p, statically, stamped with the version.
func (o Options) goBuild(pkg, name string, p Platform) func(context.Context) error {
	return func(ctx context.Context) error {
		ldflags := fmt.Sprintf("-s -w -X github.com/fleetcast/fleetcast/version.version=%s -X github.com/fleetcast/fleetcast/version.commit=%s", o.Version, o.Commit)
		return o.run(ctx, []string{"GOOS=" + p.OS, "GOARCH=" + p.Arch, "CGO_ENABLED=0"},
			o.Go, "build", "-trimpath", "-ldflags", ldflags, "-o", filepath.Join(o.OutDir, name), pkg)
	}
}

// chart packages the chart in dir (of ModuleDir) with the release's
// version and appVersion.
func (o Options) chart(dir string) func(context.Context) error {
	return func(ctx context.Context) error {
		v := ChartVersion(o.Version)
		return o.run(ctx, nil, o.Helm, "package", dir, "--version", v, "--app-version", v, "--destination", o.OutDir)
	}
}

// functions writes the stamped source zip.
func (o Options) functions(ctx context.Context) error {
	var buf bytes.Buffer
	if _, err := source.Build(ctx, o.ModuleDir, source.Stamp{Version: o.Version, Commit: o.Commit}, &buf); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.OutDir, FunctionsName(o.Version)), buf.Bytes(), 0o644)
}

// sums hashes each artifact and writes SHA256SUMS.
func (o Options) sums(names []string) ([]Artifact, error) {
	var out []Artifact
	var sums strings.Builder
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(o.OutDir, name))
		if err != nil {
			return nil, fmt.Errorf("%s was not made: %w", name, err)
		}
		sum := sha256.Sum256(b)
		a := Artifact{Name: name, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(b))}
		out = append(out, a)
		fmt.Fprintf(&sums, "%s  %s\n", a.SHA256, a.Name)
	}
	if err := os.WriteFile(filepath.Join(o.OutDir, SumsName), []byte(sums.String()), 0o644); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(sums.String()))
	out = append(out, Artifact{Name: SumsName, SHA256: hex.EncodeToString(sum[:]), Size: int64(sums.Len())})
	if extra := o.unexpected(); len(extra) > 0 {
		return nil, fmt.Errorf("%s holds files the release does not name: %q", o.OutDir, extra)
	}
	return out, nil
}

// unexpected lists OutDir's files that Names does not name (helm naming
// the chart otherwise, say).
func (o Options) unexpected() []string {
	entries, _ := os.ReadDir(o.OutDir)
	var extra []string
	for _, e := range entries {
		if !slices.Contains(Names(o.Version), e.Name()) {
			extra = append(extra, e.Name())
		}
	}
	return extra
}

// run runs a command in the module's directory, its output kept for the
// error.
func (o Options) run(ctx context.Context, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = o.ModuleDir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return nil
}
