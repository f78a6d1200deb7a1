// Package logging configures log/slog for Cloud Logging: JSON lines whose
// "severity", "message" and "time" fields Cloud Logging's agent and Cloud
// Functions' runtime parse into structured entries. It also holds the
// attribute keys every fleetcast component logs with, so that one query
// finds a message or a fleet across the publisher and the functions.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/trace"
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
	// KeyPartition names a query partition (its URL) and KeyRequest what
	// it was asked (fleets, fleet, clusters, cluster, labels,
	// placements, watch).
	KeyPartition = "partition"
	KeyRequest   = "request"
)

// LevelWarning is slog's Warn, named as Cloud Logging names it.
const LevelWarning = slog.LevelWarn

// Fields Cloud Logging lifts out of a JSON line into the LogEntry
// (cloud.google.com/logging/docs/structured-logging): the trace and span a
// line was written in, whether that trace was sampled, and the line's
// source location, by which the Logs Explorer joins lines to traces and
// to code.
const (
	FieldTrace          = "logging.googleapis.com/trace"
	FieldSpanID         = "logging.googleapis.com/spanId"
	FieldTraceSampled   = "logging.googleapis.com/trace_sampled"
	FieldSourceLocation = "logging.googleapis.com/sourceLocation"
)

// Option changes what New's logger writes.
type Option func(*handler)

// WithProject names the Google Cloud project whose Cloud Trace holds the
// traces: a line written in a span says
// "logging.googleapis.com/trace": "projects/<project>/traces/<trace ID>".
// Without it, lines carry only their span ID and sampling decision.
func WithProject(project string) Option {
	return func(h *handler) { h.project = project }
}

// New returns a JSON logger writing to w at the given minimum level. A line
// logged with a context holding an OpenTelemetry span carries its trace,
// span ID and sampling decision (sampled or not: the IDs join the lines of
// one event either way); every line carries its source location.
func New(w io.Writer, level slog.Leveler, opts ...Option) *slog.Logger {
	h := &handler{Handler: slog.NewJSONHandler(w, &slog.HandlerOptions{
		AddSource:   true,
		Level:       level,
		ReplaceAttr: replaceAttr,
	})}
	for _, o := range opts {
		o(h)
	}
	return slog.New(h)
}

// handler adds the trace fields of the record's context.
type handler struct {
	slog.Handler
	project string
	// grouped: attributes added now would land in a group, where Cloud
	// Logging would not find them; such a logger writes no trace fields.
	grouped bool
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && !h.grouped {
		r = r.Clone()
		if h.project != "" {
			r.AddAttrs(slog.String(FieldTrace, "projects/"+h.project+"/traces/"+sc.TraceID().String()))
		}
		r.AddAttrs(slog.String(FieldSpanID, sc.SpanID().String()), slog.Bool(FieldTraceSampled, sc.IsSampled()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{Handler: h.Handler.WithAttrs(attrs), project: h.project, grouped: h.grouped}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{Handler: h.Handler.WithGroup(name), project: h.project, grouped: true}
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
	case slog.SourceKey:
		src, ok := a.Value.Any().(*slog.Source)
		if !ok {
			return a
		}
		a = slog.Group(FieldSourceLocation,
			slog.String("file", sourceFile(src)),
			slog.String("line", strconv.Itoa(src.Line)),
			slog.String("function", src.Function))
	}
	return a
}

// module is the path every fleetcast package's import path starts with.
const module = "github.com/fleetcast/fleetcast/"

// sourceFile is a source file's path in the repository
// (functions/ingest/ingest.go), whatever directory it was built in: its
// package's import path without the module, and its name.
func sourceFile(src *slog.Source) string {
	name := path.Base(filepath.ToSlash(src.File))
	fn := src.Function // github.com/fleetcast/fleetcast/functions/ingest.(*Handler).Handle
	slash := strings.LastIndex(fn, "/")
	pkg := fn
	if dot := strings.Index(fn[slash+1:], "."); dot >= 0 {
		pkg = fn[:slash+1+dot]
	}
	// An external test package (logging_test) lives in its package's
	// directory.
	pkg = strings.TrimSuffix(pkg, "_test")
	rel, ok := strings.CutPrefix(pkg, module)
	if !ok {
		if pkg == strings.TrimSuffix(module, "/") {
			return name
		}
		return path.Join(pkg, name)
	}
	return path.Join(rel, name)
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
