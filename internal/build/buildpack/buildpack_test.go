package buildpack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFilesLikeTheConverter(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		want    Package
		wantErr string
	}{
		{
			name: "imports of every file",
			files: map[string]string{
				"a.go": "package fn\n\nimport (\n\t\"context\"\n\t_ \"github.com/GoogleCloudPlatform/functions-framework-go/functions\"\n)\n",
				"b.go": "package fn\n\nimport \"log\"\n",
			},
			want: Package{Name: "fn", Imports: []string{"context", FunctionsPackage, "log"}},
		},
		{
			name:  "no imports",
			files: map[string]string{"a.go": "package fn\n"},
			want:  Package{Name: "fn"},
		},
		{
			name:    "two packages",
			files:   map[string]string{"a.go": "package a\n", "b.go": "package b\n"},
			wantErr: "multiple packages",
		},
		{
			name:    "not Go",
			files:   map[string]string{"a.go": "not a go file"},
			wantErr: "parse a.go",
		},
		{
			name:    "nothing",
			files:   map[string]string{},
			wantErr: "no Go file",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string][]byte{}
			for n, s := range tt.files {
				files[n] = []byte(s)
			}
			got, err := ParseFiles(files)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestChooseLikeTheBuildpack(t *testing.T) {
	declarative := Package{Name: "fn", Imports: []string{FunctionsPackage}}
	named := Package{Name: "fn", Imports: []string{FrameworkModule + "/funcframework"}}
	tests := []struct {
		pkg     Package
		version string
		want    Template
	}{
		{declarative, "v1.9.2", Declarative},
		{declarative, "v1.0.0", Declarative},
		{named, "v1.9.2", V1_1},
		{named, "v1.1.0", V1_1},
		{named, "v1.0.0", V0},
		{named, "v2.0.0", V1_1},
	}
	for _, tt := range tests {
		got, err := Choose(tt.pkg, tt.version)
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, "%v at %s", tt.pkg.Imports, tt.version)
	}
	_, err := Choose(named, "latest")
	assert.ErrorContains(t, err, "not a semantic version")
}

// TestTheRootPackageQualifiesForTheDeclarativeTemplate: the module's root
// package, the one the buildpack builds, must import the framework's
// functions package, or Cloud Build generates a main that calls
// fleetcast.IngestFleetEvents and fails.
func TestTheRootPackageQualifiesForTheDeclarativeTemplate(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	paths, err := filepath.Glob(filepath.Join(root, "*.go"))
	require.NoError(t, err)
	files := map[string][]byte{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue // not uploaded (functions/source)
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		files[filepath.Base(p)] = b
	}
	pkg, err := ParseFiles(files)
	require.NoError(t, err)
	tmpl, err := Choose(pkg, "v1.9.2")
	require.NoError(t, err)
	assert.Equal(t, Declarative, tmpl, "the root package must import %s", FunctionsPackage)
}

func TestMainRendersTheTarget(t *testing.T) {
	b, err := Main(V1_1, "example.com/fn", "Ingest")
	require.NoError(t, err)
	assert.Contains(t, string(b), "userfunction.Ingest")
	assert.Contains(t, string(b), `userfunction "example.com/fn"`)
	b, err = Main(Declarative, "example.com/fn", "Ingest")
	require.NoError(t, err)
	assert.Contains(t, string(b), `_ "example.com/fn"`)
	assert.NotContains(t, string(b), "Ingest")
	_, err = Main("v9", "example.com/fn", "Ingest")
	assert.Error(t, err)
}
