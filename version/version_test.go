package version

import (
	"go/parser"
	"go/token"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCommitOf(t *testing.T) {
	assert.Equal(t, "unknown", commitOf(nil))
	assert.Equal(t, "abc", commitOf([]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}))
	assert.Equal(t, "abc-dirty", commitOf([]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "abc"}}))
}

func TestStamped(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v1.2.3", "0123abc"
	assert.Equal(t, "v1.2.3", Version())
	assert.Equal(t, "0123abc", Commit())
	assert.Regexp(t, `^fleetcast v1\.2\.3 \(commit 0123abc, go[^,]+, [a-z0-9]+/[a-z0-9]+\)$`, String("fleetcast"))
}

func TestStampFileIsThisPackage(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), StampPath, StampFile(`v1.2.3"; x`, "c"), 0)
	require.NoError(t, err, "a version with a quote stays one string literal")
	assert.Equal(t, "version", f.Name.Name)
}
