// Package house tests the tree's own rules: where programs live and what
// they link, what examples may import, that every package says what it is,
// that the documents' links resolve, and that benchmarks live in
// *_bench_test.go files.
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
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const root = "../.."

// TestEveryPackageSaysWhatItIs: the package map lives in package
// comments (go doc), not in a second copy that drifts: every package of
// the module has one, except generated code.
func TestEveryPackageSaysWhatItIs(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{if .GoFiles}}{{.ImportPath}} {{.Doc}}\n{{end}}", root+"/...").Output()
	require.NoError(t, err)
	lines := strings.Fields(strings.ReplaceAll(string(out), " ", "\x00"))
	require.Greater(t, len(lines), 30)
	for _, l := range lines {
		pkg, doc, _ := strings.Cut(strings.ReplaceAll(l, "\x00", " "), " ")
		if strings.Contains(pkg, "/gen/") {
			continue
		}
		assert.NotEmpty(t, doc, "package %s has no package comment", pkg)
	}
}

// TestTheREADMEIsShortAndTheDocsAreThere: the README is what fleetcast is,
// the quickstart, deploying, integrating and links, at most 12 KB;
// everything else is a document of docs/.
func TestTheREADMEIsShortAndTheDocsAreThere(t *testing.T) {
	info, err := os.Stat(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	assert.LessOrEqual(t, info.Size(), int64(12<<10), "README.md is at most 12 KB")
	for _, doc := range []string{"architecture.md", "api.md", "cli.md", "operations.md", "security.md", "publisher.md", "development.md"} {
		assert.FileExists(t, filepath.Join(root, "docs", doc))
	}
}

// link is a Markdown link or image: [text](target).
var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// TestEveryRelativeLinkResolves: every relative link of every Markdown
// file names a file or directory of the tree, and its #fragment, if any, a
// heading of that file (GitHub's anchors).
func TestEveryRelativeLinkResolves(t *testing.T) {
	var files []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			files = append(files, rel)
			return err
		}
		return nil
	}))
	require.Greater(t, len(files), 8)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(withoutCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, fragment, _ := strings.Cut(target, "#")
			dest := filepath.Join(root, f)
			if path != "" {
				dest = filepath.Join(filepath.Dir(filepath.Join(root, f)), path)
				if _, err := os.Stat(dest); err != nil {
					assert.Fail(t, "a link to nothing", "%s links to %s, which does not exist", f, target)
					continue
				}
			}
			if fragment != "" {
				b, err := os.ReadFile(dest)
				require.NoError(t, err)
				assert.Contains(t, anchors(string(b)), fragment, "%s links to %s, which has no such heading", f, target)
			}
		}
	}
	assert.Greater(t, checked, 20)
}

// withoutCode is a Markdown text without its fenced code blocks.
func withoutCode(s string) string {
	var out []string
	fenced := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// anchors are the fragments GitHub gives a Markdown text's headings:
// lowercased, spaces to hyphens, punctuation other than - and _ dropped.
func anchors(s string) []string {
	var out []string
	for _, l := range strings.Split(withoutCode(s), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var a strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		out = append(out, a.String())
	}
	return out
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
			if _, err := os.Stat(filepath.Join(root, "examples", e.Name(), "go.mod")); err == nil {
				// Already a module of its own: it builds, and its go.mod
				// and go.sum are what go mod tidy makes. Its programs are
				// written outside the tree: go build ./... of one main
				// package writes it into the example's directory.
				for _, args := range [][]string{{"mod", "tidy", "-diff"}, {"build", "-o", t.TempDir() + string(filepath.Separator), "./..."}} {
					cmd := exec.Command("go", args...)
					cmd.Dir = filepath.Join(root, "examples", e.Name())
					out, err := cmd.CombinedOutput()
					require.NoError(t, err, "go %s in examples/%s:\n%s", strings.Join(args, " "), e.Name(), out)
				}
				return
			}
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

// TestTheReadModelLinksNoCredentials: a program that wants fleetapi.Fleet
// links the read model, not an HTTP client with Google's credentials
// (package fleetclient has them).
func TestTheReadModelLinksNoCredentials(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", root+"/fleetapi").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	for _, banned := range []string{"golang.org/x/oauth2/google", "google.golang.org/api/idtoken", "github.com/fleetcast/fleetcast/fleetclient"} {
		assert.NotContains(t, deps, banned)
	}
	assert.Less(t, len(deps), 250, "the read model's dependencies")
}

// TestTheCLIReadsLikeKubectls: one file per command, none over 300 lines
// (tests aside), as kubectl's commands are kept.
func TestTheCLIReadsLikeKubectls(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "cmd", "fleetcast", "*.go"))
	require.NoError(t, err)
	require.Greater(t, len(files), 5)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.LessOrEqual(t, strings.Count(string(b), "\n"), 300, "%s is over 300 lines", f)
	}
}

// layers are the house's floors, from the ground up: a package imports
// only packages of its own floor or below (its tests aside), so no import
// runs upward and no cycle can form across floors. A package no prefix
// names fails the test: a new room is placed on purpose.
var layers = [][]string{
	{"fleet", "logging", "telemetry", "schemas", "gen/", "version"},                         // the domain, the contracts, telemetry and the release
	{"firestoredb", "fleetview", "fleetfeed", "fleetapi", "pubsubtopic", "publisher"},       // adapters, the view engine, the change feed, the read model, the agent
	{"fleetclient", "fleetwatch", "functions/", "allocator", ".", "internal/build/"},        // clients, the functions, the allocation service, build checks
	{"internal/testenv", "internal/cli", "internal/demo"},                                   // what programs and tests run on
	{"cmd/", "internal/cmd/", "examples/", "emulator-tests", "internal/house", "terraform"}, // programs, and tests of the whole
}

func layerOf(rel string) int {
	best, at := -1, -1
	for i, prefixes := range layers {
		for _, p := range prefixes {
			if (rel == strings.TrimSuffix(p, "/") || strings.HasPrefix(rel, strings.TrimSuffix(p, "/")+"/")) && len(p) > best {
				best, at = len(p), i
			}
		}
	}
	return at
}

func TestNoImportRunsUpward(t *testing.T) {
	const module = "github.com/fleetcast/fleetcast"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, root+"/...").Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Greater(t, len(lines), 30)
	for _, l := range lines {
		f := strings.Fields(l)
		rel := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		if rel == "" {
			rel = "."
		}
		from := layerOf(rel)
		if !assert.GreaterOrEqual(t, from, 0, "package %s is on no floor of the house test's layers", rel) {
			continue
		}
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := strings.TrimPrefix(imp, module+"/")
			assert.LessOrEqual(t, layerOf(to), from, "%s (floor %d) imports %s (floor %d): an import runs upward", rel, from+1, to, layerOf(to)+1)
		}
	}
}
