package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/version"
)

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errOut bytes.Buffer
		require.NoError(t, run(t.Context(), args, func(string) string { return "" }, &out, &errOut))
		assert.Equal(t, version.String("fleetcast-publisher")+"\n", out.String())
		assert.Empty(t, errOut.String())
	}
	err := run(t.Context(), []string{"version", "extra"}, func(string) string { return "" }, &bytes.Buffer{}, &bytes.Buffer{})
	assert.ErrorContains(t, err, "version takes no arguments")
}
