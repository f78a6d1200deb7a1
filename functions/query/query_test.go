package query_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
	"github.com/fleetcast/fleetcast/internal/testenv/otlptest"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/telemetry"
)

// TestOnlyUnavailabilityIsA503: a store that cannot answer now is 503
// (retry); any other failure is a 500 whose cause is logged, not sent.
func TestOnlyUnavailabilityIsA503(t *testing.T) {
	tests := []struct {
		err        error
		wantStatus int
		wantLevel  string
	}{
		{status.Error(codes.Unavailable, "connection refused"), http.StatusServiceUnavailable, "WARNING"},
		{fmt.Errorf("list: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, "WARNING"},
		{status.Error(codes.ResourceExhausted, "quota"), http.StatusServiceUnavailable, "WARNING"},
		{status.Error(codes.Canceled, "the caller went away"), http.StatusServiceUnavailable, "WARNING"},
		{status.Error(codes.PermissionDenied, "missing roles/datastore.viewer"), http.StatusInternalServerError, "ERROR"},
		{status.Error(codes.FailedPrecondition, "the query requires an index"), http.StatusInternalServerError, "ERROR"},
		{errors.New("decode fleets/x: cannot unmarshal"), http.StatusInternalServerError, "ERROR"},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			var logs strings.Builder
			src := fleetapitest.NewMemory(time.Now)
			src.Err = tt.err
			log := logging.New(&logs, logging.LevelWarning)
			srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(src, fleetapi.Options{Log: log}), log))
			defer srv.Close()
			resp, err := testhttp.Client.Get(srv.URL + "/v1/clusters")
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, tt.wantStatus, resp.StatusCode)
			assert.NotContains(t, string(body), tt.err.Error(), "the cause stays in the log")
			// The view logs its failed sync; the request's line is last.
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			require.Len(t, lines, 2, logs.String())
			assert.Contains(t, lines[0], "query view sync failed")
			var line map[string]any
			require.NoError(t, json.Unmarshal([]byte(lines[1]), &line))
			assert.Equal(t, tt.wantLevel, line["severity"])
			assert.Contains(t, line[logging.KeyError], tt.err.Error(), "the cause is logged")
		})
	}
}

// TestEachRequestHasASpanLinkedToItsCaller: a request is served in a span
// named after its route, in a trace of the query side's own that links
// the caller's (a reader's traceparent does not decide what is sampled
// here, nor which trace the query side's lines join); the lines logged
// while serving it name that span.
func TestEachRequestHasASpanLinkedToItsCaller(t *testing.T) {
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	spans := otlptest.Capture(t, telemetry.Config{Service: "fleetcast-query", SampleRatio: 1})
	var logs strings.Builder
	src := fleetapitest.NewMemory(time.Now)
	src.Err = errors.New("decode fleets/x: cannot unmarshal")
	log := logging.New(&logs, logging.LevelWarning, logging.WithProject("studio"))
	srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(src, fleetapi.Options{Log: log}), log))
	defer srv.Close()

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/fleets?cluster=pc", nil)
	require.NoError(t, err)
	req.Header.Set("traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	resp, err := testhttp.Client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)

	got := spans.GetSpans().Snapshots()
	require.Len(t, got, 1)
	s := got[0]
	assert.Equal(t, "GET /v1/fleets", s.Name(), "named by its route, not its query")
	assert.NotEqual(t, callerTrace, s.SpanContext().TraceID().String(), "the caller's trace is not continued")
	require.Len(t, s.Links(), 1)
	assert.Equal(t, callerTrace, s.Links()[0].SpanContext.TraceID().String(), "but linked")

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &line))
	assert.Equal(t, "projects/studio/traces/"+s.SpanContext().TraceID().String(), line[logging.FieldTrace])
	assert.Equal(t, s.SpanContext().SpanID().String(), line[logging.FieldSpanID])

	// An RPC is named by its procedure.
	resp, err = testhttp.Client.Post(srv.URL+fleetcastv1connect.InformationServiceListClustersProcedure, "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	resp.Body.Close()
	got = spans.GetSpans().Snapshots()
	require.Len(t, got, 2)
	assert.Equal(t, "POST /fleetcast.v1.InformationService/ListClusters", got[1].Name())
}
