// Package testhttp is the HTTP client of tests, benchmarks and the demo:
// every call it makes has a deadline, so a server that never answers
// fails the call that waited on it, naming it, instead of hanging the run
// until go test's timeout with nothing said.
//
// A request whose context has a deadline of its own keeps it (a stream
// that must outlive Deadline sets one); any other is given Deadline, which
// bounds the whole exchange, its body included.
package testhttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Deadline bounds a call whose context has none: far longer than any
// answer of a healthy server here, short beside go test's timeout.
const Deadline = 2 * time.Minute

// Client is http.DefaultClient's transport with Deadline.
var Client = New(http.DefaultTransport)

// New returns a client sending through rt (nil: http.DefaultTransport)
// whose calls have Deadline unless their context has a deadline.
func New(rt http.RoundTripper) *http.Client {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return &http.Client{Transport: deadline{rt, Deadline}}
}

type deadline struct {
	next  http.RoundTripper
	after time.Duration
}

func (d deadline) RoundTrip(r *http.Request) (*http.Response, error) {
	if _, ok := r.Context().Deadline(); ok {
		return d.next.RoundTrip(r)
	}
	ctx, cancel := context.WithTimeoutCause(r.Context(), d.after,
		fmt.Errorf("testhttp: %s %s had no answer within %v: %w", r.Method, r.URL.Redacted(), d.after, context.DeadlineExceeded))
	resp, err := d.next.RoundTrip(r.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases the call's deadline with its body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
