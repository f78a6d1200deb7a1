package fleetapi

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Code classifies an Error by what the caller can do about it; the names
// are the query API's error statuses. It is the one vocabulary of
// failures: each edge maps it once — to an HTTP status (functions/query),
// a Connect code (functions/query, fleetwatch), a CLI exit code
// (cmd/fleetcast) — and CodeOf classifies any error into it.
type Code string

// Codes of the query API's errors.
const (
	// InvalidArgument: a parameter is wrong (Error.Param names it).
	InvalidArgument Code = "INVALID_ARGUMENT"
	// NotFound: no such fleet or cluster.
	NotFound Code = "NOT_FOUND"
	// Unavailable: the store cannot answer now; retry.
	Unavailable Code = "UNAVAILABLE"
	// ResourceExhausted: this instance serves its most streams, or is
	// busy with other heavy reads (Service.Admit); retry (shortly:
	// another instance may take it).
	ResourceExhausted Code = "RESOURCE_EXHAUSTED"
	// PermissionDenied: the caller's credentials are missing, wrong or
	// not allowed; retrying will not help until they change.
	PermissionDenied Code = "PERMISSION_DENIED"
	// Internal: a fault a retry will not fix.
	Internal Code = "INTERNAL"
)

// Error is every error the read model returns: its Code says what the
// caller can do about it, Param names the bad parameter of an
// InvalidArgument, Message is for the caller, Err the cause (for logs).
type Error struct {
	Code    Code
	Param   string
	Message string
	Err     error
}

func (e *Error) Error() string {
	switch {
	case e.Param != "":
		return fmt.Sprintf("parameter %s: %s", e.Param, e.Message)
	case e.Err != nil:
		return fmt.Sprintf("%s: %v", e.Message, e.Err)
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf classifies err: an *Error's Code; a context that ended, or a
// gRPC status from a store or a server, by what it means; Internal for
// anything else.
func CodeOf(err error) Code {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return Unavailable
	}
	if c, ok := grpcCodes[status.Code(err)]; ok {
		return c
	}
	return Internal
}

// grpcCodes classify the gRPC statuses Firestore and gRPC servers answer.
var grpcCodes = map[codes.Code]Code{
	codes.InvalidArgument:   InvalidArgument,
	codes.NotFound:          NotFound,
	codes.Unavailable:       Unavailable,
	codes.DeadlineExceeded:  Unavailable,
	codes.Aborted:           Unavailable,
	codes.Canceled:          Unavailable,
	codes.ResourceExhausted: Unavailable, // a quota: retry later
	codes.PermissionDenied:  PermissionDenied,
	codes.Unauthenticated:   PermissionDenied,
}

func paramErr(param, format string, args ...any) *Error {
	return &Error{Code: InvalidArgument, Param: param, Message: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *Error {
	return &Error{Code: NotFound, Message: fmt.Sprintf(format, args...)}
}

// storeErr classifies a failed read of the store: Unavailable when
// Firestore cannot answer now but may later, or the caller went away (no
// fault to log as one); Internal otherwise.
func storeErr(err error) *Error {
	if CodeOf(err) == Unavailable {
		return &Error{Code: Unavailable, Message: "the fleet store is unavailable; retry", Err: err}
	}
	return &Error{Code: Internal, Message: "reading the fleet store failed", Err: err}
}
