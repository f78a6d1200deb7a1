package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/allocator"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetclient"
)

// Exit codes: what a script can tell apart.
const (
	exitError       = 1 // anything else
	exitUsage       = 2 // bad input: a command, flag, argument or parameter
	exitNotFound    = 3 // the fleet or cluster asked for does not exist
	exitUnavailable = 4 // Firestore or the API cannot answer now, or not within --request-timeout
	exitPermission  = 5 // the credentials are missing, wrong or not allowed
)

// usageError is bad input: exit code 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitCode says how err ends the process.
func exitCode(err error) int {
	if _, ok := errors.AsType[usageError](err); ok {
		return exitUsage
	}
	if e, ok := errors.AsType[allocationError](err); ok {
		if code, ok := exitCodes[e.code]; ok {
			return code
		}
		return exitError
	}
	if code, ok := exitCodes[fleetapi.CodeOf(err)]; ok {
		return code
	}
	return exitError
}

// exitCodes map the read model's error codes to the CLI's.
var exitCodes = map[fleetapi.Code]int{
	fleetapi.InvalidArgument:   exitUsage,
	fleetapi.NotFound:          exitNotFound,
	fleetapi.Unavailable:       exitUnavailable,
	fleetapi.ResourceExhausted: exitUnavailable,
	fleetapi.PermissionDenied:  exitPermission,
}

// message is err as the one line the CLI prints, with what to do.
func message(err error, g *global) string {
	msg := err.Error()
	if _, ok := errors.AsType[allocationError](err); ok {
		return msg // says what to do already
	}
	switch exitCode(err) {
	case exitUnavailable:
		where := "Firestore (project " + g.project + ")"
		if g.api != "" {
			where = g.api
		}
		if _, ok := errors.AsType[timedOut](err); ok || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Sprintf("%s (no answer from %s within --request-timeout %s: check it is reachable, then retry or raise --request-timeout)",
				msg, where, g.requestTimeout)
		}
		return fmt.Sprintf("%s (%s cannot answer now: check it is reachable, then retry)", msg, where)
	case exitPermission:
		if strings.Contains(msg, "gcloud auth application-default login") {
			return msg // says what to do already
		}
		return msg + " (check the credentials: gcloud auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS)"
	}
	return msg
}

// flagNames name the flag behind each query parameter.
var flagNames = map[string]string{
	"selector": "-l", "namespace": "-n", "cluster": "--cluster", "key": "KEY", "minReady": "--min-ready",
	"counter": "--counter", "minAvailable": "--min-available", "list": "--list", "minListAvailable": "--min-list-available",
	"orderBy": "--sort-by", "includeStale": "--include-stale", "rolloutComplete": "--rollout-complete",
}

// flagError names the flag behind a bad query parameter.
func flagError(err error) error {
	if e, ok := errors.AsType[*fleetapi.Error](err); ok && e.Code == fleetapi.InvalidArgument {
		if name := flagNames[e.Param]; name != "" {
			return usagef("%s: %s", name, e.Message)
		}
		return usageError{err}
	}
	return err
}

// apiError is a failure to set up the --api client: a bad URL is bad
// input; credentials that cannot get an ID token are not allowed (exit
// 5).
func apiError(err error) error {
	if errors.Is(err, fleetclient.ErrInvalidURL) {
		return usagef("--api: %w", err)
	}
	if _, ok := errors.AsType[*fleetclient.CredentialsError](err); ok {
		return &fleetapi.Error{Code: fleetapi.PermissionDenied, Message: "--api", Err: err}
	}
	return fmt.Errorf("--api: %w", err)
}

// allocationFailed is the error of an allocation no cluster made, coded
// for the exit code: every cluster full (3), none reachable (4), every
// one refusing the certificates (5), one that may have allocated (1).
func allocationFailed(err error, tries []allocator.Try) error {
	st := status.Convert(err)
	code := fleetapi.Internal
	switch st.Code() {
	case codes.ResourceExhausted:
		code = fleetapi.NotFound
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		code = fleetapi.Unavailable
		refused := len(tries) > 0
		for _, t := range tries {
			refused = refused && t.Outcome == allocator.CertificateRefused
		}
		if refused {
			code = fleetapi.PermissionDenied
		}
	case codes.InvalidArgument:
		code = fleetapi.InvalidArgument
	}
	msg := st.Message()
	switch code {
	case fleetapi.Unavailable:
		msg += " (check that the allocators are reachable from here, or name them with --endpoint; raise --request-timeout or --connect-timeout)"
	case fleetapi.PermissionDenied:
		msg += " (check that --tls-cert is signed by a CA the allocators trust, and --tls-ca signed their server certificates)"
	case fleetapi.Internal:
		msg += " (look up the game server in that cluster before allocating again)"
	}
	return allocationError{code: code, msg: msg}
}

// allocationError is the error of allocators, not of the read side: its
// message says what to do, and its code the exit code.
type allocationError struct {
	code fleetapi.Code
	msg  string
}

func (e allocationError) Error() string { return e.msg }
