package query_test

import (
	"bufio"
	"compress/gzip"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// TestTheEventStreamIsGzippedStepByStep: a client that accepts gzip (a
// browser) gets /v1/watch gzipped, and each step's events arrive when it
// is flushed, not when the stream ends: the initial set, then Synced, then
// a change, all while the stream is open. One that does not gets it plain.
func TestTheEventStreamIsGzippedStepByStep(t *testing.T) {
	srv, mem := serverOver(t)
	raw := testhttp.New(&http.Transport{DisableCompression: true}) // the encoding as sent
	for _, gz := range []bool{true, false} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/watch?cluster=pc", nil)
		require.NoError(t, err)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		resp, err := raw.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		body := resp.Body
		if gz {
			require.Equal(t, "gzip", resp.Header.Get("Content-Encoding"))
			zr, err := gzip.NewReader(resp.Body)
			require.NoError(t, err, "the gzip header arrives with the first step")
			body = zr
		} else {
			require.Empty(t, resp.Header.Get("Content-Encoding"))
		}
		lines := bufio.NewScanner(body)
		next := func(kind string) {
			t.Helper()
			for lines.Scan() {
				if lines.Text() == "event: "+kind {
					return
				}
			}
			t.Fatalf("gzip=%t: no %s event: %v", gz, kind, lines.Err())
		}
		next("synced")
		put(mem, 1000+map[bool]int64{true: 1, false: 2}[gz], "pc", "f0", 7)
		next("modified")
		assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"))
	}
}
