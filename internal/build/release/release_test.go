package release_test

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/fleetcast/fleetcast/internal/build/release"
	"github.com/fleetcast/fleetcast/internal/testenv"
)

const (
	testVersion = "v9.8.7-rc.1"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
)

// TestReleaseArtifacts builds a whole release into a temporary directory
// and checks every artifact: its name, its checksum, and the version and
// commit it reports — the same for the CLI, the publisher and the
// functions.
func TestReleaseArtifacts(t *testing.T) {
	out := t.TempDir()
	progress := &logged{t: t}
	artifacts, err := release.Build(t.Context(), release.Options{
		Version: testVersion, Commit: testCommit, ModuleDir: "../../..", OutDir: out, Helm: testenv.Helm(t), Progress: progress,
	})
	require.NoError(t, err)
	names := release.Names(testVersion)
	assert.Contains(t, progress.String(), "[1/11] fleetcast-"+testVersion+"-linux-amd64", "a line per step")
	assert.Contains(t, progress.String(), "[11/11] "+release.FunctionsName(testVersion))

	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	var made []string
	for _, e := range entries {
		made = append(made, e.Name())
	}
	assert.ElementsMatch(t, names, made, "exactly the release's files")
	require.Len(t, artifacts, len(names))
	assert.Equal(t, release.SumsName, artifacts[len(artifacts)-1].Name)

	t.Run("SHA256SUMS", func(t *testing.T) { checkSums(t, out, names) })
	t.Run("binaries", func(t *testing.T) {
		for _, p := range release.CLIPlatforms {
			checkBinary(t, filepath.Join(out, "fleetcast-"+testVersion+"-"+p.OS+"-"+p.Arch+exe(p)), p)
		}
		for _, p := range release.PublisherPlatforms {
			checkBinary(t, filepath.Join(out, "fleetcast-publisher-"+testVersion+"-"+p.OS+"-"+p.Arch), p)
		}
	})
	t.Run("every program reports the release", func(t *testing.T) {
		if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
			t.Fatalf("runs the linux binaries: %s/%s is not a release platform of both", runtime.GOOS, runtime.GOARCH)
		}
		suffix := " " + testVersion + " (commit " + testCommit + ", "
		cli := runBinary(t, filepath.Join(out, "fleetcast-"+testVersion+"-linux-"+runtime.GOARCH), "version")
		assert.True(t, strings.HasPrefix(cli, "fleetcast"+suffix), cli)
		var v struct {
			Client struct{ Version, Commit string } `json:"clientVersion"`
		}
		require.NoError(t, json.Unmarshal([]byte(runBinary(t, filepath.Join(out, "fleetcast-"+testVersion+"-linux-"+runtime.GOARCH), "version", "-o", "json")), &v))
		assert.Equal(t, testVersion, v.Client.Version, "fleetcast version -o json")
		assert.Equal(t, testCommit, v.Client.Commit)
		pub := runBinary(t, filepath.Join(out, "fleetcast-publisher-"+testVersion+"-linux-"+runtime.GOARCH), "version")
		assert.True(t, strings.HasPrefix(pub, "fleetcast-publisher"+suffix), pub)
		fn := functionsVersion(t, filepath.Join(out, release.FunctionsName(testVersion)))
		assert.Equal(t, testVersion+" "+testCommit, fn, "the functions built from the zip")
	})
	t.Run("charts", func(t *testing.T) {
		for name, tgz := range map[string]string{"fleetcast-publisher": release.ChartName(testVersion), "fleetcast-allocator": release.AllocatorChartName(testVersion)} {
			chart := chartYAML(t, filepath.Join(out, tgz), name)
			assert.Equal(t, "9.8.7-rc.1", chart["version"], name)
			assert.Equal(t, "9.8.7-rc.1", chart["appVersion"], "%s: the images' default tag", name)
		}
	})
}

// logged keeps the progress lines and logs each (go test -v shows the
// builds as they go: eight cross-compilations, minutes on a cold cache).
type logged struct {
	t   *testing.T
	buf bytes.Buffer
}

func (l *logged) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return l.buf.Write(p)
}

func (l *logged) String() string { return l.buf.String() }

func exe(p release.Platform) string {
	if p.OS == "windows" {
		return ".exe"
	}
	return ""
}

func checkSums(t *testing.T, dir string, names []string) {
	f, err := os.Open(filepath.Join(dir, release.SumsName))
	require.NoError(t, err)
	defer f.Close()
	listed := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		require.True(t, ok, "sha256sum's format, two spaces: %q", sc.Text())
		listed[name] = sum
	}
	require.Len(t, listed, len(names)-1, "every artifact but SHA256SUMS itself")
	for name, want := range listed {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		got := sha256.Sum256(b)
		assert.Equal(t, want, hex.EncodeToString(got[:]), name)
	}
}

// checkBinary checks an executable's format and architecture, and that
// the version and commit are stamped into it.
func checkBinary(t *testing.T, path string, p release.Platform) {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	r := bytes.NewReader(b)
	var arch string
	switch p.OS {
	case "linux":
		f, err := elf.NewFile(r)
		require.NoError(t, err, path)
		arch = map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
	case "darwin":
		f, err := macho.NewFile(r)
		require.NoError(t, err, path)
		arch = map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[f.Cpu]
	case "windows":
		f, err := pe.NewFile(r)
		require.NoError(t, err, path)
		arch = map[uint16]string{pe.IMAGE_FILE_MACHINE_AMD64: "amd64", pe.IMAGE_FILE_MACHINE_ARM64: "arm64"}[f.Machine]
	}
	assert.Equal(t, p.Arch, arch, path)
	assert.True(t, bytes.Contains(b, []byte(testVersion)) && bytes.Contains(b, []byte(testCommit)), "%s: version and commit stamped", path)
}

func runBinary(t *testing.T, path string, args ...string) string {
	out, err := exec.CommandContext(t.Context(), path, args...).CombinedOutput()
	require.NoError(t, err, "%s: %s", path, out)
	return string(out)
}

// functionsVersion unpacks the functions' zip, as the buildpack receives
// it, and builds and runs, against the zip's own packages, a program that
// prints what package version reports there.
func functionsVersion(t *testing.T, zipPath string) string {
	dir := t.TempDir()
	zr, err := zip.OpenReader(zipPath)
	require.NoError(t, err)
	defer zr.Close()
	for _, f := range zr.File {
		rc, err := f.Open()
		require.NoError(t, err)
		b, err := io.ReadAll(rc)
		rc.Close()
		require.NoError(t, err)
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	main := "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/fleetcast/fleetcast/version\"\n)\n\nfunc main() { fmt.Print(version.Version(), \" \", version.Commit()) }\n"
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "zzreport"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "zzreport", "main.go"), []byte(main), 0o644))
	cmd := exec.CommandContext(t.Context(), "go", "run", "./zzreport")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// chartYAML is the Chart.yaml of chart name, packaged in tgz.
func chartYAML(t *testing.T, tgz, name string) map[string]any {
	f, err := os.Open(tgz)
	require.NoError(t, err)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		require.NoError(t, err, "no Chart.yaml in %s", tgz)
		if h.Name == name+"/Chart.yaml" {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, yaml.Unmarshal(b, &m))
			return m
		}
	}
}

// TestRefusals: what a release will not be built from.
func TestRefusals(t *testing.T) {
	for _, v := range []string{"", "0.4.0", "v0.4", "v0.4.0+build.1", "latest"} {
		assert.ErrorContains(t, release.Check(v), "want vMAJOR.MINOR.PATCH", v)
	}
	assert.NoError(t, release.Check("v0.4.0"))
	_, err := release.Build(t.Context(), release.Options{Version: "v0.4.0", OutDir: t.TempDir()})
	assert.ErrorContains(t, err, "no commit")
	full := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(full, "old"), nil, 0o644))
	_, err = release.Build(t.Context(), release.Options{Version: "v0.4.0", Commit: "c", OutDir: full})
	assert.ErrorContains(t, err, "not an empty directory")
}

// TestTheSourcesSayOneVersion: the tree releases the chart's version — the
// chart, the kustomization and the changelog agree — and CheckSources
// names each file that says another.
func TestTheSourcesSayOneVersion(t *testing.T) {
	const root = "../../.."
	b, err := os.ReadFile(filepath.Join(root, release.ChartFile))
	require.NoError(t, err)
	var chart struct{ Version string }
	require.NoError(t, yaml.Unmarshal(b, &chart))
	require.NoError(t, release.CheckSources(root, "v"+chart.Version), "this tree's next make release is of its chart's version")

	err = release.CheckSources(root, "v"+chart.Version+"-rc.9")
	require.Error(t, err)
	for _, file := range []string{release.ChartFile, release.KustomizationFile, release.ChangelogFile} {
		assert.Contains(t, err.Error(), file, "each file that says another version")
	}
	assert.Error(t, release.CheckSources(root, chart.Version), "a release is vX.Y.Z")

	// How a studio gets each artifact names this version, no other.
	for file, section := range map[string]string{"README.md": "## Getting a release", "publisher/chart/README.md": "## Install"} {
		b, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		_, text, ok := strings.Cut(string(b), "\n"+section+"\n")
		require.True(t, ok, "%s: no %q", file, section)
		text, _, _ = strings.Cut(text, "\n## ")
		versions := regexp.MustCompile(`\b\d+\.\d+\.\d+\b`).FindAllString(text, -1)
		require.NotEmpty(t, versions, "%s %q names the version", file, section)
		for _, v := range versions {
			assert.Equal(t, chart.Version, v, "%s %q", file, section)
		}
	}
}
