// Package fleetrpc serves fleetcast.v1.InformationService
// (schemas/fleetcast/v1/information.proto) over a fleetapi.Service, with
// connect-go: one handler speaks the Connect protocol, gRPC-Web and gRPC,
// and its answers are the /v1 HTTP API's, in protobuf. Its filters are
// parsed and checked by the read model itself (fleetapi.ParseQuery), so
// that every edge refuses the same requests in the same words.
//
// Three servers mount it. The query function serves it beside /v1 over
// HTTP/1.1, where Connect and gRPC-Web work; cmd/fleetcast-query serves it
// over HTTP/1.1 and cleartext HTTP/2 on one port, where plain gRPC works
// too; and the publisher serves it over TLS (mutual, with a client CA)
// from its own informer cache, for one cluster (single-cluster mode).
//
// Its streams are bounded by Streams: each message must be written within
// a timeout, so that a client that stops reading is dropped rather than
// holding memory, and a stream ends, as UNAVAILABLE, shortly before its
// request's deadline, which a client answers by resuming.
package fleetrpc

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/fleetcast/fleetcast/fleetapi"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/logging"
)

// MaxRequestBytes bounds what a reader may send: a request's body as it
// arrives, and a request message once decompressed (a gzip of 64 KiB may
// inflate to 64 MiB). A filter is a few hundred bytes; past the bound,
// Connect and gRPC answer resource_exhausted and plain HTTP 413, before
// anything larger is held.
const MaxRequestBytes = 64 << 10

// DefaultStreamWriteTimeout bounds how long one message of a stream may
// take to write: a client that reads nothing for that long is dropped (it
// resumes with its last resume token), and holds nothing meanwhile.
const DefaultStreamWriteTimeout = 10 * time.Second

// Streams is the edge of a server's streams: the write timeout of each
// message, and the count of the streams dropped because their client
// stopped reading. One Streams may serve several handlers (the query API's
// server-sent events share the InformationService's).
type Streams struct {
	log          *slog.Logger
	writeTimeout time.Duration
	stalled      atomic.Int64
}

// NewStreams returns a stream edge logging to log; a writeTimeout of zero
// or less is DefaultStreamWriteTimeout.
func NewStreams(log *slog.Logger, writeTimeout time.Duration) *Streams {
	if writeTimeout <= 0 {
		writeTimeout = DefaultStreamWriteTimeout
	}
	return &Streams{log: log, writeTimeout: writeTimeout}
}

type responseKey struct{}

// Bind returns w and r for a handler whose streams Arm their response: w
// gives each write of an armed response the write timeout as the write
// starts. A response bound already (a handler within another) keeps its
// binding.
func (s *Streams) Bind(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	if _, ok := w.(*streamWriter); ok {
		return w, r
	}
	sw := &streamWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.writeTimeout}
	return sw, r.WithContext(context.WithValue(r.Context(), responseKey{}, sw))
}

// Arm gives every later write of ctx's response, and its flushes, the
// write timeout to complete, counted from the moment each starts: a client
// that stopped reading fails the write instead of holding the stream open,
// while a stream that was quiet, or a server that was busy, before a write
// costs that write none of its time. (A deadline set once per message
// would count the message's making, and a stream's last message after a
// quiet spell would find its deadline past.) It does nothing for a request
// Bind did not bind.
func (s *Streams) Arm(ctx context.Context) {
	if w, ok := ctx.Value(responseKey{}).(*streamWriter); ok {
		w.armed.Store(true)
	}
}

// streamWriter is a bound response: once armed, each Write and Flush first
// sets the connection's write deadline (per stream over HTTP/2).
type streamWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	armed   atomic.Bool
}

func (w *streamWriter) deadline() {
	if w.armed.Load() {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.deadline()
	return w.ResponseWriter.Write(p)
}

// Flush is http.Flusher's, for connect-go.
func (w *streamWriter) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls: the flush's
// error, which is how a write past its deadline ends a stream.
func (w *streamWriter) FlushError() error {
	w.deadline()
	return w.rc.Flush()
}

// Unwrap gives http.ResponseController the response beneath.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Stalled reports whether a stream's error is a write that missed its
// deadline, and logs it: the client stopped reading, and the stream is
// dropped (the client resumes). Not a fault.
func (s *Streams) Stalled(ctx context.Context, path string, err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	s.log.WarnContext(ctx, "stream dropped: its client read nothing for the stream write timeout; it may resume with its last resume token",
		"path", path, "writeTimeoutSeconds", s.writeTimeout.Seconds(), "stalledStreamsTotal", s.stalled.Add(1))
	return true
}

// ErrStreamDeadline ends a stream before the platform's request timeout
// cuts it, so that the client learns why and resumes.
var ErrStreamDeadline = errors.New("the stream reached the server's request timeout; resume with the last resume token")

// ErrShutdown ends the streams of a server that is stopping (on Cloud Run,
// SIGTERM before a revision's instance goes): as for ErrStreamDeadline, a
// client resumes, on another instance. A server ends its streams with it
// by cancelling their base context with it as the cause.
var ErrShutdown = errors.New("the server is shutting down; resume with the last resume token")

// EndedByServer is the cause of a stream context's end when the server
// ended it, so that the stream tells its client to resume:
// ErrStreamDeadline or ErrShutdown; nil otherwise.
func EndedByServer(ctx context.Context) error {
	if c := context.Cause(ctx); c == ErrStreamDeadline || c == ErrShutdown {
		return c
	}
	return nil
}

// streamMargin is how long before the request's deadline a stream ends.
const streamMargin = 2 * time.Second

// StreamContext ends streamMargin before ctx's deadline (on Cloud Run,
// the request timeout's), with ErrStreamDeadline as its cause; without a
// deadline it ends with ctx.
func StreamContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadlineCause(ctx, d.Add(-streamMargin), ErrStreamDeadline)
}

// LogFault returns err as the read model's error (Internal when it is not
// one) and logs it when it is a fault: the store unavailable (WARNING; not
// when the caller went away) or anything else a retry will not fix
// (ERROR). What the caller did wrong is not logged.
func LogFault(ctx context.Context, log *slog.Logger, path string, err error) *fleetapi.Error {
	e, ok := errors.AsType[*fleetapi.Error](err)
	if !ok {
		e = &fleetapi.Error{Code: fleetapi.Internal, Message: internalMessage, Err: err}
	}
	switch {
	case e.Code == fleetapi.Unavailable && ctx.Err() == nil:
		log.WarnContext(ctx, "query failed: the store is unavailable", "path", path, logging.KeyError, errText(e))
	case e.Code == fleetapi.ResourceExhausted:
		log.WarnContext(ctx, "stream refused: the instance serves its most streams (MAX_STREAMS)", "path", path)
	case e.Code == fleetapi.Internal:
		log.ErrorContext(ctx, "query failed", "path", path, logging.KeyError, errText(e))
	}
	return e
}

// internalMessage is what a caller hears of a fault: the detail is in the
// server's logs, not in the answer.
const internalMessage = "the query failed; see the server's logs"

func errText(e *fleetapi.Error) string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return e.Message
}

// An Option configures NewHandler.
type Option func(*information)

// WithStreams makes the handler's streams share s (by default it has its
// own, with DefaultStreamWriteTimeout).
func WithStreams(s *Streams) Option {
	return func(i *information) { i.streams = s }
}

// Procedures are the paths of InformationService's methods
// ("/fleetcast.v1.InformationService/Inform", …), as the service's
// descriptor lists them: a fixed set, by which spans and logs may name a
// call without taking names from what a caller sends.
func Procedures() []string {
	sd := fleetcastv1.File_fleetcast_v1_information_proto.Services().ByName("InformationService")
	methods := sd.Methods()
	out := make([]string, methods.Len())
	for i := range out {
		out[i] = "/" + string(sd.FullName()) + "/" + string(methods.Get(i).Name())
	}
	return out
}

// CompressMinBytes is the smallest answer message the handler compresses
// when the client accepts it: a stream's events are a few hundred bytes,
// which gzip hardly shrinks, while each compression costs a compressor's
// state (about 800 KiB, pooled) and most of a fan-out's CPU.
const CompressMinBytes = 1 << 10

// NewHandler returns the path to mount InformationService at, and its
// handler answering from svc: every request's body is bounded by
// MaxRequestBytes as it arrives and its message once decompressed.
func NewHandler(svc Backend, log *slog.Logger, opts ...Option) (string, http.Handler) {
	i := &information{svc: svc, log: log}
	for _, o := range opts {
		o(i)
	}
	if i.streams == nil {
		i.streams = NewStreams(log, 0)
	}
	path, h := fleetcastv1connect.NewInformationServiceHandler(i, connect.WithReadMaxBytes(MaxRequestBytes),
		connect.WithCompressMinBytes(CompressMinBytes))
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
		}
		h.ServeHTTP(i.streams.Bind(w, r))
	})
}
