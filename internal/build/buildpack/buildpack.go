// Package buildpack does to fleetcast's function source what Google's Go
// functions buildpack (GoogleCloudPlatform/buildpacks,
// cmd/go/functions_framework) does before it compiles a Cloud Function, so
// that a test builds the deployable zip the way Cloud Build will and fails
// where Cloud Build would:
//
//  1. The upload is moved into serverless_function_source_code/.
//  2. The get_package converter parses every *.go file at the root of the
//     upload: one package name, and the union of their imports.
//  3. The main package's template is chosen: the declarative one (a blank
//     import of the function package, whose init() registers the functions)
//     only when those imports include the Functions Framework's functions
//     package; otherwise the v1.1 template (framework ≥ v1.1.0) or the v0
//     one, both of which call userfunction.<FUNCTION_TARGET> and so need an
//     exported function of that name in the root package.
//  4. The main is written to functions.local/app/main.go inside the
//     function's module, `go mod tidy` runs, and `go build` builds it.
package buildpack

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/template"
)

// Module paths the buildpack looks for.
const (
	FrameworkModule  = "github.com/GoogleCloudPlatform/functions-framework-go"
	FunctionsPackage = FrameworkModule + "/functions"
	// SourceDir is where the buildpack moves the uploaded source.
	SourceDir = "serverless_function_source_code"
	// appDir is where it writes the generated main, inside the source.
	appDir = "functions.local/app"
)

// Template is one of the buildpack's main-package templates.
type Template string

// The buildpack's templates (lib/template_*.go).
const (
	Declarative Template = "declarative"
	V0          Template = "v0"
	V1_1        Template = "v1_1"
)

// Package is what the get_package converter reports of the uploaded
// source's root: its package name and every path its files import.
type Package struct {
	Name    string
	Imports []string
}

// ImportsPath reports whether the package imports path.
func (p Package) ImportsPath(path string) bool {
	return slices.Contains(p.Imports, path)
}

// ParseFiles parses Go files as the get_package converter does: only the
// package clause and imports, all files in one package.
func ParseFiles(files map[string][]byte) (Package, error) {
	var pkg Package
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	fset := token.NewFileSet()
	for _, name := range names {
		f, err := parser.ParseFile(fset, name, files[name], parser.ImportsOnly)
		if err != nil {
			return Package{}, fmt.Errorf("parse %s: %w", name, err)
		}
		if pkg.Name == "" {
			pkg.Name = f.Name.Name
		} else if pkg.Name != f.Name.Name {
			return Package{}, fmt.Errorf("multiple packages in the function source's root: %s and %s (%s)", pkg.Name, f.Name.Name, name)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return Package{}, fmt.Errorf("parse %s: import %s: %w", name, imp.Path.Value, err)
			}
			pkg.Imports = append(pkg.Imports, path)
		}
	}
	if pkg.Name == "" {
		return Package{}, fmt.Errorf("no Go file at the function source's root")
	}
	slices.Sort(pkg.Imports)
	pkg.Imports = slices.Compact(pkg.Imports)
	return pkg, nil
}

// ParseDir parses every *.go file directly in dir, as the converter does
// with the uploaded source (tests included: the upload should hold none).
func ParseDir(dir string) (Package, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return Package{}, err
	}
	files := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return Package{}, err
		}
		files[filepath.Base(p)] = b
	}
	return ParseFiles(files)
}

// Choose picks the template as the buildpack's createMainGoFile does, for
// the framework version the function's go.mod requires.
func Choose(pkg Package, frameworkVersion string) (Template, error) {
	if pkg.ImportsPath(FunctionsPackage) {
		return Declarative, nil
	}
	major, minor, err := majorMinor(frameworkVersion)
	if err != nil {
		return "", err
	}
	if major > 1 || (major == 1 && minor >= 1) {
		return V1_1, nil
	}
	return V0, nil
}

func majorMinor(v string) (int, int, error) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, fmt.Errorf("framework version %q: not a semantic version", v)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("framework version %q: not a semantic version", v)
	}
	return major, minor, nil
}

// The generated mains, in substance (templates/*.go.tmpl): the declarative
// one imports the function package for its init(); the older ones call the
// target by name. They are programs of their own, never compiled here.
//
//go:embed templates/*.go.tmpl
var templateFiles embed.FS

var templates = template.Must(template.ParseFS(templateFiles, "templates/*.go.tmpl"))

// Main renders the main package the buildpack would write.
func Main(t Template, pkgPath, target string) ([]byte, error) {
	tmpl := templates.Lookup(string(t) + ".go.tmpl")
	if tmpl == nil {
		return nil, fmt.Errorf("unknown template %q", t)
	}
	var b bytes.Buffer
	err := tmpl.Execute(&b, struct{ Package, Target string }{pkgPath, target})
	return b.Bytes(), err
}

// Build builds the function source unpacked in appRoot/serverless_function_source_code
// into out as the buildpack would for FUNCTION_TARGET target, and returns
// the template it chose. A failed step's error carries the go command's
// output.
func Build(ctx context.Context, appRoot, target, out string) (Template, error) {
	src := filepath.Join(appRoot, SourceDir)
	pkg, err := ParseDir(src)
	if err != nil {
		return "", fmt.Errorf("error extracting package name: %w", err)
	}
	module, err := goOutput(ctx, src, "list", "-m")
	if err != nil {
		return "", err
	}
	// The package is the module's root unless a directory named like the
	// package sits at the application root (moduleAndPackageNames).
	pkgPath := module
	if _, err := os.Stat(filepath.Join(appRoot, pkg.Name)); err == nil {
		pkgPath = module + "/" + pkg.Name
	}
	version, err := goOutput(ctx, src, "list", "-m", "-f", "{{.Version}}", FrameworkModule)
	if err != nil {
		return "", fmt.Errorf("the function's go.mod must require %s: %w", FrameworkModule, err)
	}
	tmpl, err := Choose(pkg, version)
	if err != nil {
		return "", err
	}
	main, err := Main(tmpl, pkgPath, target)
	if err != nil {
		return tmpl, err
	}
	if err := os.MkdirAll(filepath.Join(src, appDir), 0o755); err != nil {
		return tmpl, err
	}
	if err := os.WriteFile(filepath.Join(src, appDir, "main.go"), main, 0o644); err != nil {
		return tmpl, err
	}
	if _, err := goOutput(ctx, src, "mod", "tidy"); err != nil {
		return tmpl, err
	}
	if _, err := goOutput(ctx, src, "build", "-o", out, "./"+appDir); err != nil {
		return tmpl, fmt.Errorf("%s template: %w", tmpl, err)
	}
	return tmpl, nil
}

func goOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	// The buildpack's go.mod is writable and tidied, never vendored.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}
