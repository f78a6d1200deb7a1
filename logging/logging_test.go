package logging_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/logging"
)

func TestCloudLoggingFieldNames(t *testing.T) {
	tests := []struct {
		level slog.Level
		want  string
	}{
		{slog.LevelDebug, "DEBUG"},
		{slog.LevelInfo, "INFO"},
		{slog.LevelWarn, "WARNING"},
		{slog.LevelError, "ERROR"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			var buf bytes.Buffer
			logging.New(&buf, slog.LevelDebug).Log(t.Context(), tt.level, "hello", logging.KeyCluster, "pc")
			var line map[string]any
			require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
			assert.Equal(t, tt.want, line["severity"])
			assert.Equal(t, "hello", line["message"])
			assert.Equal(t, "pc", line["cluster"])
			assert.Contains(t, line, "time")
			assert.NotContains(t, line, "level")
			assert.NotContains(t, line, "msg")
		})
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{"": slog.LevelInfo, "debug": slog.LevelDebug, "WARNING": slog.LevelWarn, "warn": slog.LevelWarn, "Error": slog.LevelError} {
		got, err := logging.ParseLevel(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := logging.ParseLevel("loud")
	assert.ErrorContains(t, err, `"loud"`)
}
