// Package house tests the tree's own rules: the README's development map
// names every package and every directory it names exists, and benchmarks
// live in *_bench_test.go files.
package house

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const root = "../.."

// mapEntries are the paths the README's development map describes: the
// first word of each line of its code block that starts at the margin.
func mapEntries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	readme := string(b)
	start := strings.Index(readme, "## Development\n\n```\n")
	require.GreaterOrEqual(t, start, 0, "the README has a development map")
	block := readme[start+len("## Development\n\n```\n"):]
	block = block[:strings.Index(block, "```")]
	path := regexp.MustCompile(`^([a-z][a-z0-9_./-]*(/|\.go))\s`)
	var out []string
	for _, line := range strings.Split(block, "\n") {
		if m := path.FindStringSubmatch(line); m != nil {
			out = append(out, strings.TrimSuffix(m[1], "/"))
		}
	}
	require.Greater(t, len(out), 30)
	return out
}

func TestTheDevelopmentMapMatchesTheTree(t *testing.T) {
	entries := mapEntries(t)
	for _, e := range entries {
		_, err := os.Stat(filepath.Join(root, e))
		assert.NoError(t, err, "the map names %s, which does not exist", e)
	}
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", root+"/...").Output()
	require.NoError(t, err)
	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(abs, dir)
		require.NoError(t, err)
		rel = filepath.ToSlash(rel)
		switch {
		case rel == ".":
			rel = "functions.go" // the root package is its one file
		case strings.HasPrefix(rel, "gen/"):
			rel = "gen" // generated, described as a whole
		}
		assert.Contains(t, entries, rel, "package %s is missing from the README's development map", rel)
	}
	top, err := os.ReadDir(root)
	require.NoError(t, err)
	for _, d := range top {
		if d.IsDir() && !strings.HasPrefix(d.Name(), ".") && d.Name() != "bin" {
			assert.True(t, covered(entries, d.Name()), "directory %s/ is missing from the README's development map", d.Name())
		}
	}
}

// covered: the map names dir or something in it.
func covered(entries []string, dir string) bool {
	for _, e := range entries {
		if e == dir || strings.HasPrefix(e, dir+"/") {
			return true
		}
	}
	return false
}

// TestBenchmarksLiveInBenchFiles: every benchmark of the module is in a
// file named *_bench_test.go, and every such file holds one.
func TestBenchmarksLiveInBenchFiles(t *testing.T) {
	fset := token.NewFileSet()
	benchFiles := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "bin" || d.Name() == "tools") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		has := false
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Benchmark") {
				has = true
				assert.True(t, strings.HasSuffix(path, "_bench_test.go"), "%s: %s belongs in a *_bench_test.go file", path, fn.Name.Name)
			}
		}
		if strings.HasSuffix(path, "_bench_test.go") {
			benchFiles++
			if !has && !strings.HasSuffix(path, "stats_bench_test.go") {
				assert.Fail(t, "a *_bench_test.go file without a benchmark", path)
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, benchFiles, 5)
}

// TestNoProgramLinksTesting: a harness a program links (make demo's
// control plane, emulators, browser) takes the test's testing.TB as a
// testenv.TB and never imports testing, whose flags and globals would
// come with it.
func TestNoProgramLinksTesting(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, root+"/...").Output()
	require.NoError(t, err)
	mains := strings.Fields(string(out))
	require.Greater(t, len(mains), 5)
	for _, m := range mains {
		deps, err := exec.Command("go", "list", "-deps", m).Output()
		require.NoError(t, err)
		assert.NotContains(t, strings.Fields(string(deps)), "testing", "%s links testing", m)
	}
}

// TestEveryExampleBuildsAsAModuleOfItsOwn copies each example out of the
// tree, as a studio would, into a module that requires fleetcast (replaced
// by this checkout): an example that used an internal package, or
// anything else a studio cannot import, does not build there.
func TestEveryExampleBuildsAsAModuleOfItsOwn(t *testing.T) {
	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	examples, err := os.ReadDir(filepath.Join(root, "examples"))
	require.NoError(t, err)
	require.NotEmpty(t, examples)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	for _, e := range examples {
		if !e.IsDir() {
			continue
		}
		t.Run(e.Name(), func(t *testing.T) {
			dir := t.TempDir()
			files, err := filepath.Glob(filepath.Join(root, "examples", e.Name(), "*.go"))
			require.NoError(t, err)
			for _, f := range files {
				if strings.HasSuffix(f, "_test.go") {
					continue // its tests run in the tree, on the emulators
				}
				b, err := os.ReadFile(f)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644))
			}
			require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/"+e.Name()+"\n\ngo 1.26.0\n\n"+
				"require github.com/fleetcast/fleetcast v0.0.0\n\nreplace github.com/fleetcast/fleetcast => "+abs+"\n"), 0o644))
			for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", os.DevNull, "."}} {
				cmd := exec.Command("go", args...)
				cmd.Dir = dir
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "go %s in a module of its own:\n%s", strings.Join(args, " "), out)
			}
		})
	}
}
