// Package logging configures log/slog for Cloud Logging: JSON lines whose
// "severity", "message" and "time" fields Cloud Logging's agent and Cloud
// Functions' runtime parse into structured entries. It also holds the
// attribute keys every fleetcast component logs with, so that one query
// finds a message or a fleet across the publisher and the functions.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Keys of the attributes fleetcast logs. Stable: dashboards and log-based
// metrics select on them.
const (
	KeyMessageID = "messageId"
	KeyCluster   = "cluster"
	KeyFleet     = "fleet"
	KeyKind      = "kind"
	KeyVersion   = "version"
	KeyOutcome   = "outcome"
	KeyReason    = "reason"
	KeyError     = "error"
	KeyLagMillis = "lagMillis"
	KeyWrites    = "writes"
	// KeyTopic names the Pub/Sub topic a message came through.
	KeyTopic = "topic"
	// KeyReasonCode is a dropped message's reason as a stable code.
	KeyReasonCode = "reasonCode"
	// KeyDropped counts the messages an instance dropped so far.
	KeyDropped = "droppedTotal"
)

// LevelWarning is slog's Warn, named as Cloud Logging names it.
const LevelWarning = slog.LevelWarn

// New returns a JSON logger writing to w at the given minimum level.
func New(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level:       level,
		ReplaceAttr: replaceAttr,
	}))
}

// ParseLevel reads DEBUG, INFO, WARNING (or WARN) and ERROR, in any case.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "", "INFO":
		return slog.LevelInfo, nil
	case "DEBUG":
		return slog.LevelDebug, nil
	case "WARNING", "WARN":
		return slog.LevelWarn, nil
	case "ERROR":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log level %q: want DEBUG, INFO, WARNING or ERROR", s)
}

func replaceAttr(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.MessageKey:
		a.Key = "message"
	case slog.LevelKey:
		a.Key = "severity"
		a.Value = slog.StringValue(severity(a.Value.Any().(slog.Level)))
	}
	return a
}

// severity maps slog levels onto Cloud Logging's LogSeverity names.
func severity(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "ERROR"
	case l >= slog.LevelWarn:
		return "WARNING"
	case l >= slog.LevelInfo:
		return "INFO"
	default:
		return "DEBUG"
	}
}
