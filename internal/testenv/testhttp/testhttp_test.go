package testhttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestACallWithoutADeadlineIsGivenOne: a server that never answers fails
// the call, naming it, once the deadline passes; a request's own deadline
// is kept; an answered call's body is read whole.
func TestACallWithoutADeadlineIsGivenOne(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "answer")
	}))
	defer srv.Close()
	defer close(release)

	resp, err := Client.Get(srv.URL + "/ok")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, "answer", string(body))

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/hang", nil)
	require.NoError(t, err)
	_, err = Client.Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the request's own deadline")

	short := &http.Client{Transport: deadline{http.DefaultTransport, 20 * time.Millisecond}}
	_, err = short.Get(srv.URL + "/hang")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "testhttp: GET "+srv.URL+"/hang had no answer within 20ms")
}
