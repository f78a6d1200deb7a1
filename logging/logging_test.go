package logging_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

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

// TestTraceFields: a line logged in a span names its trace as Cloud
// Logging's LogEntry.trace wants it (projects/P/traces/ID), its span and
// whether it was sampled — unsampled too, since the IDs join the lines of
// one event whatever the sampling — and no line outside a span claims one.
func TestTraceFields(t *testing.T) {
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	for _, sampled := range []bool{true, false} {
		var flags trace.TraceFlags
		if sampled {
			flags = trace.FlagsSampled
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: flags})
		ctx := trace.ContextWithSpanContext(t.Context(), sc)
		var buf bytes.Buffer
		logging.New(&buf, slog.LevelInfo, logging.WithProject("studio")).With(logging.KeyCluster, "pc").InfoContext(ctx, "hello")
		line := decode(t, buf.Bytes())
		assert.Equal(t, "projects/studio/traces/4bf92f3577b34da6a3ce929d0e0e4736", line[logging.FieldTrace])
		assert.Equal(t, "00f067aa0ba902b7", line[logging.FieldSpanID])
		assert.Equal(t, sampled, line[logging.FieldTraceSampled])
		assert.Equal(t, "pc", line["cluster"])
	}

	var buf bytes.Buffer
	logging.New(&buf, slog.LevelInfo, logging.WithProject("studio")).InfoContext(t.Context(), "no span")
	line := decode(t, buf.Bytes())
	assert.NotContains(t, line, logging.FieldTrace)
	assert.NotContains(t, line, logging.FieldSpanID)
	assert.NotContains(t, line, logging.FieldTraceSampled)
}

// TestSourceLocation: every line says where it was written, as Cloud
// Logging's LogEntrySourceLocation (file, line, function), its file named
// as in the repository rather than as on the machine that built it.
func TestSourceLocation(t *testing.T) {
	var buf bytes.Buffer
	_, _, want, _ := runtime.Caller(0)
	logging.New(&buf, slog.LevelInfo).Info("here")
	line := decode(t, buf.Bytes())
	assert.NotContains(t, line, "source")
	loc, ok := line[logging.FieldSourceLocation].(map[string]any)
	require.True(t, ok, "%v", line)
	assert.Equal(t, "logging/logging_test.go", loc["file"])
	assert.Equal(t, strconv.Itoa(want+1), loc["line"])
	assert.Equal(t, "github.com/fleetcast/fleetcast/logging_test.TestSourceLocation", loc["function"])
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var line map[string]any
	require.NoError(t, json.Unmarshal(b, &line), "%s", b)
	return line
}
