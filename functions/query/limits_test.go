package query_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleetapi"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// requirements is a selector of n requirements, "!k00,!k01,…".
func requirements(n int) string {
	terms := make([]string, n)
	for i := range terms {
		terms[i] = fmt.Sprintf("!k%02d", i)
	}
	return strings.Join(terms, ",")
}

// setOfBytes is a selector of one requirement, "k in (v…,v…)", of exactly
// n bytes: values of up to 63 bytes, as Kubernetes allows.
func setOfBytes(n int) string {
	var b strings.Builder
	b.WriteString("k in (")
	first := true
	for room := n - b.Len() - 1; room > 0; room = n - b.Len() - 1 {
		if !first {
			b.WriteByte(',')
			room--
		}
		first = false
		size := min(63, room)
		if room-size == 1 {
			size-- // room for a comma alone would end in an empty value
		}
		b.WriteString(strings.Repeat("v", size))
	}
	b.WriteByte(')')
	return b.String()
}

// TestSelectorsAreBounded: a selector at MaxSelectorBytes or
// MaxSelectorRequirements is answered; one past either is refused before
// any work is done with it — 400 on REST and SSE, INVALID_ARGUMENT over
// Connect, gRPC-Web and gRPC — in a fleet query, a watch's filter and a
// placement policy's rule, with a message naming the limit.
func TestSelectorsAreBounded(t *testing.T) {
	srv := server(t)
	atBytes, overBytes := setOfBytes(fleetapi.MaxSelectorBytes), setOfBytes(fleetapi.MaxSelectorBytes+1)
	require.Len(t, atBytes, fleetapi.MaxSelectorBytes)
	require.Len(t, overBytes, fleetapi.MaxSelectorBytes+1)
	tests := []struct {
		name     string
		selector string
		ok       bool
		limit    string
	}{
		{"requirements at the limit", requirements(fleetapi.MaxSelectorRequirements), true, ""},
		{"one requirement more", requirements(fleetapi.MaxSelectorRequirements + 1), false, "MaxSelectorRequirements"},
		{"bytes at the limit", atBytes, true, ""},
		{"one byte more", overBytes, false, "MaxSelectorBytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy := tt.selector + ":0"
			for _, path := range []string{
				"/v1/fleets?" + url.Values{"selector": {tt.selector}}.Encode(),
				"/v1/placements?" + url.Values{"selector": {tt.selector}}.Encode(),
				"/v1/placements?" + url.Values{"policy": {policy}}.Encode(),
				"/v1/watch?" + url.Values{"selector": {tt.selector}}.Encode(),
			} {
				status, body := getStatus(t, srv.URL+path, !tt.ok)
				if tt.ok {
					assert.Equal(t, http.StatusOK, status, "%.60s", path)
					continue
				}
				assert.Equal(t, http.StatusBadRequest, status, "%.60s", path)
				assert.Contains(t, body, tt.limit, "%.60s: the answer names the limit", path)
			}
			for name, client := range clients(srv) {
				filter := &fleetcastv1.FleetFilter{Selector: tt.selector}
				calls := map[string]func() error{
					"Inform": func() error {
						_, err := client.Inform(t.Context(), connect.NewRequest(&fleetcastv1.InformRequest{Filter: filter}))
						return err
					},
					"Place filter": func() error {
						_, err := client.Place(t.Context(), connect.NewRequest(&fleetcastv1.PlaceRequest{Filter: filter}))
						return err
					},
					"Place policy": func() error {
						_, err := client.Place(t.Context(), connect.NewRequest(&fleetcastv1.PlaceRequest{
							Policy: []*fleetcastv1.PlacementRule{{ClusterSelector: tt.selector}}}))
						return err
					},
					"WatchFleets": func() error {
						st, err := client.WatchFleets(t.Context(), connect.NewRequest(&fleetcastv1.WatchFleetsRequest{Filter: filter}))
						if err != nil {
							return err
						}
						defer st.Close()
						st.Receive()
						return st.Err()
					},
				}
				for call, f := range calls {
					err := f()
					if tt.ok {
						assert.NoError(t, err, "%s %s", name, call)
						continue
					}
					ce, ok := errors.AsType[*connect.Error](err)
					require.True(t, ok, "%s %s: %v", name, call, err)
					assert.Equal(t, connect.CodeInvalidArgument, ce.Code(), "%s %s", name, call)
					assert.Contains(t, ce.Message(), tt.limit, "%s %s", name, call)
				}
			}
		})
	}
}

// getStatus GETs url and returns its status and, for an error, its
// message; a stream's (200) body is left unread.
func getStatus(t *testing.T, url string, wantError bool) (int, string) {
	t.Helper()
	resp, err := testhttp.Client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	if !wantError || resp.StatusCode == http.StatusOK {
		return resp.StatusCode, ""
	}
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return resp.StatusCode, e.Error.Message
	}
	return resp.StatusCode, string(b)
}
