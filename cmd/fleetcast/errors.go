package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
