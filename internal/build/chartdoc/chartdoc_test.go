package chartdoc

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRows(t *testing.T) {
	rows, err := Rows([]byte(`# The cluster's name.
cluster: ""
replicas: 2 # How many.
# Intervals.
intervals:
  min: 1s
  # Between snapshots.
  snapshot: 30s
image:
  # The image.
  repository: r
# Labels.
labels: {a: b}
# A list.
list: []
`))
	require.NoError(t, err)
	assert.Equal(t, []Row{
		{"cluster", "string", `""`, "The cluster's name."},
		{"replicas", "int", "2", "How many."},
		{"intervals", "object", "", "Intervals."},
		{"intervals.min", "string", `"1s"`, "See `intervals`."},
		{"intervals.snapshot", "string", `"30s"`, "Between snapshots."},
		{"image.repository", "string", `"r"`, "The image."},
		{"labels", "object", `{"a":"b"}`, "Labels."},
		{"list", "list", "[]", "A list."},
	}, rows)

	_, err = Rows([]byte("# A.\na: 1\nb: {}\nc:\n  d: 1\n"))
	assert.ErrorContains(t, err, "no comment above b, c.d", "every value is described")
}

func TestUpdateKeepsTheProse(t *testing.T) {
	readme := []byte("# Chart\n\nProse.\n\n" + Begin + "\nold\n" + End + "\n\nMore prose.\n")
	out, err := Update(readme, []byte("# The cluster.\ncluster: \"\"\n"))
	require.NoError(t, err)
	assert.Equal(t, "# Chart\n\nProse.\n\n"+Begin+"\n\n| Key | Type | Default | Description |\n|---|---|---|---|\n| `cluster` | string | `\"\"` | The cluster. |\n\n"+End+"\n\nMore prose.\n", string(out))
	_, err = Update([]byte("no markers"), []byte("# c.\nc: 1\n"))
	assert.ErrorContains(t, err, "markers")
}

// TestTheChartsREADMEsAreCurrent: each chart's README holds the table its
// values.yaml makes.
func TestTheChartsREADMEsAreCurrent(t *testing.T) {
	for _, chart := range []string{"publisher/chart", "cmd/fleetcast-allocator/chart"} {
		values, err := os.ReadFile("../../../" + chart + "/values.yaml")
		require.NoError(t, err)
		readme, err := os.ReadFile("../../../" + chart + "/README.md")
		require.NoError(t, err)
		want, err := Update(readme, values)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(readme), "%s/README.md is stale: run make chart-docs", chart)
	}
}
