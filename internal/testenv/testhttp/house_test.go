package testhttp

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryTestCallHasADeadline: the module's tests, benchmarks and test
// harnesses (internal/testenv, internal/demo) make HTTP calls through
// Client or New, never through what has no deadline: http.Get, Head, Post
// and PostForm, http.DefaultClient, or an http.Client literal without a
// Timeout. (A make bench once hung 15 minutes on one such http.Post.)
// Examples are left as a user would write them.
func TestEveryTestCallHasADeadline(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case "gen", "examples", "tools", "bin", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Dir(rel) == filepath.Join("internal", "testenv", "testhttp") {
			return nil // where the deadline is given
		}
		harness := strings.HasPrefix(rel, filepath.Join("internal", "testenv")) || strings.HasPrefix(rel, filepath.Join("internal", "demo"))
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "example_test.go") ||
			!(strings.HasSuffix(rel, "_test.go") || harness) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		for _, where := range deadlineless(f) {
			t.Errorf("%s: %s has no deadline: use testhttp.Client or testhttp.New", fset.Position(where.pos), where.what)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, files, 100, "the walk reached the module's tests")
}

type finding struct {
	pos  token.Pos
	what string
}

// deadlineless finds the deadline-less HTTP calls and clients of f; an
// http.DefaultClient that is only compared (an argument of assert or
// require) is none.
func deadlineless(f *ast.File) []finding {
	var out []finding
	compared := map[ast.Node]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok && (pkg.Name == "assert" || pkg.Name == "require") {
					for _, a := range n.Args {
						compared[a] = true
					}
				}
			}
		case *ast.SelectorExpr:
			pkg, ok := n.X.(*ast.Ident)
			if !ok || pkg.Name != "http" {
				return true
			}
			switch n.Sel.Name {
			case "Get", "Head", "Post", "PostForm":
				out = append(out, finding{n.Pos(), "http." + n.Sel.Name})
			case "DefaultClient":
				if !compared[n] {
					out = append(out, finding{n.Pos(), "http.DefaultClient"})
				}
			}
		case *ast.CompositeLit:
			if sel, ok := n.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Client" {
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "http" && !hasKey(n, "Timeout") {
					out = append(out, finding{n.Pos(), "an http.Client without a Timeout"})
				}
			}
		}
		return true
	})
	return out
}

func hasKey(lit *ast.CompositeLit, key string) bool {
	for _, e := range lit.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if id, ok := kv.Key.(*ast.Ident); ok && id.Name == key {
				return true
			}
		}
	}
	return false
}

// TestTheHouseRuleFindsWhatHasNoDeadline: the rule's own check, on code
// that breaks it and code that keeps it.
func TestTheHouseRuleFindsWhatHasNoDeadline(t *testing.T) {
	src := `package x
func f() {
	http.Get(u)
	http.Post(u, "", nil)
	http.DefaultClient.Do(r)
	_ = &http.Client{Transport: tr}
	_ = &http.Client{Transport: tr, Timeout: time.Second}
	assert.Same(t, http.DefaultClient, c)
	testhttp.Client.Get(u)
}`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	require.NoError(t, err)
	var what []string
	for _, fd := range deadlineless(f) {
		what = append(what, fd.what)
	}
	assert.Equal(t, []string{"http.Get", "http.Post", "http.DefaultClient", "an http.Client without a Timeout"}, what)
}
