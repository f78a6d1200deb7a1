package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

var serving = regexp.MustCompile(`serving on http://(\S+) `)

// push is a Pub/Sub push of cluster pc's fleet games/ranked with ready
// game servers, as its subscription posts it to the service.
func push(t *testing.T, seq, ready int64) []byte {
	t.Helper()
	now := time.Now()
	data, err := fleet.EncodeEvent(fleet.Event{
		SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "pc",
		Version: fleet.Version{Term: 1, Seq: seq}, ObservedAt: fleet.MicrosOf(now),
		Publisher: fleet.Publisher{ID: "pub-pc", Version: "test"}, Namespace: "games", Name: "ranked",
		Fleet: fleet.State{UID: "u-ranked", Labels: map[string]string{"platform": "pc"},
			Status: fleet.Status{Replicas: 10, ReadyReplicas: ready}},
	})
	require.NoError(t, err)
	body, err := json.Marshal(ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: data, MessageID: "m-" + time.Now().String()}})
	require.NoError(t, err)
	return body
}

// TestThePushesOfAClusterLandInFirestore runs the program on the Firestore
// emulator as Cloud Run runs the ingest service: pushes on cluster pc's
// topic path are acknowledged and written, an older state is acknowledged
// and ignored, a GET is refused, and the stop is clean.
func TestThePushesOfAClusterLandInFirestore(t *testing.T) {
	project := emulator.ProjectID(t)
	fs := emulator.Firestore(t, project)
	env := map[string]string{"GOOGLE_CLOUD_PROJECT": project, "HOST": "127.0.0.1", "PORT": "0"}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	var stdout, stderr syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return env[k] }, &stdout, &stderr) }()
	require.Eventually(t, func() bool { return serving.MatchString(stderr.String()) }, 30*time.Second, 10*time.Millisecond, "it says where it serves")
	url := "http://" + serving.FindStringSubmatch(stderr.String())[1] + "/projects/" + project + "/topics/fleet-events-pc"

	post := func(body []byte) int {
		resp, err := testhttp.Client.Post(url, "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	ready := func() int64 {
		docs, err := fs.Collection(firestoredb.FleetsCollection).Documents(t.Context()).GetAll()
		require.NoError(t, err)
		require.Len(t, docs, 1)
		var d fleet.Document
		require.NoError(t, docs[0].DataTo(&d))
		assert.Equal(t, "pc", d.Cluster)
		require.NotNil(t, d.Status)
		return d.Status.ReadyReplicas
	}
	assert.Equal(t, http.StatusOK, post(push(t, 2, 7)))
	assert.Equal(t, int64(7), ready())
	assert.Equal(t, http.StatusOK, post(push(t, 1, 3)), "an older state is acknowledged")
	assert.Equal(t, int64(7), ready(), "and changes nothing")
	resp, err := testhttp.Client.Get(url)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Contains(t, stdout.String(), "IngestFleetEvents", "its log lines, on standard output as Cloud Run reads them")

	cancel()
	require.NoError(t, <-done)
	assert.Contains(t, stderr.String(), "stopping: waiting at most 8s for requests in flight")
	_, err = testhttp.Client.Post(url, "application/json", bytes.NewReader(push(t, 3, 1)))
	assert.Error(t, err, "nothing is served once stopped")
}

// TestBadConfigurationIsRefusedAtStart: every bad variable, the program's
// and the ingest's, at once, before anything is served; arguments are
// refused.
func TestBadConfigurationIsRefusedAtStart(t *testing.T) {
	env := map[string]string{"SHUTDOWN_GRACE": "soon", "EVENT_TIMEOUT": "never", "GOOGLE_CLOUD_PROJECT": "p"}
	err := run(t.Context(), nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SHUTDOWN_GRACE")
	assert.Contains(t, err.Error(), "EVENT_TIMEOUT")
	err = run(t.Context(), []string{"serve"}, func(string) string { return "" }, io.Discard, io.Discard)
	assert.ErrorContains(t, err, "unexpected arguments")
	var out syncbuf.Buffer
	require.NoError(t, run(t.Context(), []string{"version"}, func(string) string { return "" }, &out, io.Discard))
	assert.Contains(t, out.String(), "fleetcast-ingest dev")
	assert.True(t, errors.Is(run(t.Context(), []string{"-h"}, func(string) string { return "" }, io.Discard, io.Discard), flag.ErrHelp))
}
