// Package source builds the deployable source of fleetcast's Cloud
// Functions: a zip of the module's root package (which registers every
// function) and of the module's packages it imports, with go.mod and
// go.sum — nothing else (no publisher, no Terraform, no tests). The zip
// is deterministic: the same sources give the same bytes, so an unchanged
// source, named by its hash in Terraform, never redeploys.
package source

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/semver"

	"github.com/fleetcast/fleetcast/internal/build/buildpack"
	"github.com/fleetcast/fleetcast/version"
)

// epoch is every entry's modification time: zip's earliest, for
// reproducible bytes.
var epoch = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// Stamp is the release a zip's functions report (package version): the
// Go buildpack takes no linker flags from the zip, so Build adds a file
// to package version that sets them. The zero Stamp adds none (version
// "dev").
type Stamp struct {
	Version, Commit string
}

// Build writes the zip of the module in moduleDir, stamped with stamp, to
// w and returns the paths it holds, sorted.
func Build(ctx context.Context, moduleDir string, stamp Stamp, w io.Writer) ([]string, error) {
	files, err := sourceFiles(ctx, moduleDir)
	if err != nil {
		return nil, err
	}
	contents := make(map[string][]byte, len(files)+1)
	if stamp != (Stamp{}) {
		if !semver.IsValid(stamp.Version) || semver.Canonical(stamp.Version) != stamp.Version {
			return nil, fmt.Errorf("stamp %q: want a release version, vMAJOR.MINOR.PATCH", stamp.Version)
		}
		if !slices.ContainsFunc(files, func(f string) bool { return path.Dir(f) == path.Dir(version.StampPath) }) {
			return nil, fmt.Errorf("stamp %s: the functions do not import package version, so nothing would report it", stamp.Version)
		}
		if slices.Contains(files, version.StampPath) {
			return nil, fmt.Errorf("stamp %s: %s exists in the source; remove it (the builder writes it)", stamp.Version, version.StampPath)
		}
		files = append(files, version.StampPath)
		slices.Sort(files)
		contents[version.StampPath] = version.StampFile(stamp.Version, stamp.Commit)
	}
	root := map[string][]byte{}
	for _, name := range files {
		if _, ok := contents[name]; ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(moduleDir, filepath.FromSlash(name)))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		contents[name] = b
		if !strings.Contains(name, "/") && strings.HasSuffix(name, ".go") {
			root[name] = b
		}
	}
	if err := checkDeclarative(root); err != nil {
		return nil, err
	}
	zw := zip.NewWriter(w)
	for _, name := range files {
		b := contents[name]
		h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: epoch}
		h.SetMode(0o644)
		f, err := zw.CreateHeader(h)
		if err != nil {
			return nil, fmt.Errorf("zip %s: %w", name, err)
		}
		if _, err := f.Write(b); err != nil {
			return nil, fmt.Errorf("zip %s: %w", name, err)
		}
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("zip: %w", err)
	}
	return files, nil
}

// checkDeclarative refuses a root package for which Google's buildpack
// would generate a main that calls the function by name (see
// internal/build/buildpack): that build fails in Cloud Build, after the upload.
func checkDeclarative(root map[string][]byte) error {
	pkg, err := buildpack.ParseFiles(root)
	if err != nil {
		return fmt.Errorf("the root package, as the buildpack reads it: %w", err)
	}
	if !pkg.ImportsPath(buildpack.FunctionsPackage) {
		return fmt.Errorf("the root package must import %q (a blank import will do): without it the Cloud Functions buildpack generates a main that calls %s.<FUNCTION_TARGET> and the build fails", buildpack.FunctionsPackage, pkg.Name)
	}
	return nil
}

// sourceFiles lists go.mod, go.sum and the Go and embedded files of the
// module's packages the root package depends on.
func sourceFiles(ctx context.Context, moduleDir string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-json=ImportPath,Dir,GoFiles,EmbedFiles,Module,Standard", ".")
	cmd.Dir = moduleDir
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go list in %s: %w: %s", moduleDir, err, stderr.String())
	}
	var root string
	files := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(&out)
	for dec.More() {
		var p struct {
			ImportPath string
			Dir        string
			GoFiles    []string
			EmbedFiles []string
			Standard   bool
			Module     *struct {
				Path, Dir string
				Main      bool
			}
		}
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		if p.Standard || p.Module == nil || !p.Module.Main {
			continue // the standard library and dependencies come from go.sum
		}
		root = p.Module.Dir
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			return nil, err
		}
		for _, f := range slices.Concat(p.GoFiles, p.EmbedFiles) {
			files = append(files, filepath.ToSlash(filepath.Join(rel, f)))
		}
	}
	if root == "" {
		return nil, fmt.Errorf("%s: not the root of a Go module with a package", moduleDir)
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}
