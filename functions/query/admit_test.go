package query_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleetapi"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// TestHeavyReadsTakeTurns: while every heavy-read slot is taken (here by
// the test, as by readers asking for expensive answers), a list, a
// placement, a label's values and the metrics wait their turn and, past
// HeavyWait, are refused with 503 RESOURCE_EXHAUSTED and Retry-After over
// HTTP, resource_exhausted over Connect, gRPC-Web and gRPC; a fleet or a
// cluster read by name is answered meanwhile. Once the slot is free, all
// are answered.
func TestHeavyReadsTakeTurns(t *testing.T) {
	srv, _, svc := serverOf(t, func(o *fleetapi.Options) {
		o.HeavySlots, o.HeavyWait = 1, 50*time.Millisecond
	})
	heavyPaths := []string{
		"/v1/fleets",
		"/v1/fleets?" + url.Values{"selector": {"platform=pc"}}.Encode(),
		"/v1/placements",
		"/v1/labels/platform",
		"/metrics",
	}
	lightPaths := []string{"/v1/fleets/pc/games/f1", "/v1/clusters", "/v1/clusters/pc"}
	release, err := svc.Admit(t.Context())
	require.NoError(t, err)
	for _, path := range heavyPaths {
		resp, err := testhttp.Client.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, path)
		assert.Equal(t, "1", resp.Header.Get("Retry-After"), path)
	}
	status, msg := getStatus(t, srv.URL+"/v1/fleets", true)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, msg, "busy", "the message says why")
	for _, path := range lightPaths {
		status, _ := getStatus(t, srv.URL+path, false)
		assert.Equal(t, http.StatusOK, status, "%s is answered while the heavy slot is taken", path)
	}
	for name, client := range clients(srv) {
		for call, f := range map[string]func() error{
			"Inform": func() error {
				_, err := client.Inform(t.Context(), connect.NewRequest(&fleetcastv1.InformRequest{}))
				return err
			},
			"Place": func() error {
				_, err := client.Place(t.Context(), connect.NewRequest(&fleetcastv1.PlaceRequest{}))
				return err
			},
			"LabelValues": func() error {
				_, err := client.LabelValues(t.Context(), connect.NewRequest(&fleetcastv1.LabelValuesRequest{Key: "platform"}))
				return err
			},
		} {
			err := f()
			ce, ok := errors.AsType[*connect.Error](err)
			require.True(t, ok, "%s %s: %v", name, call, err)
			assert.Equal(t, connect.CodeResourceExhausted, ce.Code(), "%s %s", name, call)
		}
		_, err := client.GetFleet(t.Context(), connect.NewRequest(&fleetcastv1.GetFleetRequest{ClusterName: "pc", Namespace: "games", FleetName: "f1"}))
		assert.NoError(t, err, "%s GetFleet while the heavy slot is taken", name)
	}

	// A selector or a policy past the bounds is refused at once: only
	// the parse of one within them waits for the slot.
	terms := make([]string, fleetapi.MaxSelectorRequirements+1)
	for i := range terms {
		terms[i] = fmt.Sprintf("!k%02d", i)
	}
	over := strings.Join(terms, ",")
	for _, path := range []string{
		"/v1/fleets?" + url.Values{"selector": {over}}.Encode(),
		"/v1/placements?" + url.Values{"selector": {over}}.Encode(),
		"/v1/placements?" + url.Values{"policy": {over + ":0"}}.Encode(),
	} {
		status, msg := getStatus(t, srv.URL+path, true)
		assert.Equal(t, http.StatusBadRequest, status, "%s while the heavy slot is taken", path)
		assert.Contains(t, msg, "MaxSelectorRequirements", path)
	}
	for name, client := range clients(srv) {
		_, err := client.Inform(t.Context(), connect.NewRequest(&fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Selector: over}}))
		assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%s Inform: %v", name, err)
		_, err = client.Place(t.Context(), connect.NewRequest(&fleetcastv1.PlaceRequest{Policy: []*fleetcastv1.PlacementRule{{ClusterSelector: over}}}))
		assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%s Place: %v", name, err)
	}

	release()
	for _, path := range append(heavyPaths, lightPaths...) {
		status, _ := getStatus(t, srv.URL+path, false)
		assert.Equal(t, http.StatusOK, status, "%s once the slot is free", path)
	}
}
