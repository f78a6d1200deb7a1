package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// cluster writes cluster pc's heartbeat and two fleets, ranked (8 ready)
// and casual (2), as the ingest function would, and returns how to change
// a fleet's ready game servers.
func cluster(t *testing.T, project string) (setReady func(name string, ready int64)) {
	t.Helper()
	store := firestoredb.New(emulator.Firestore(t, project), time.Hour, time.Now)
	seq := int64(0)
	apply := func(ev fleet.Event) {
		seq++
		ev.SchemaVersion, ev.Cluster, ev.Version = fleet.SchemaVersion, "pc", fleet.Version{Term: 1, Seq: seq}
		ev.Publisher, ev.ObservedAt = fleet.Publisher{ID: "pub-pc", Version: "test"}, fleet.MicrosOf(time.Now())
		_, err := store.Apply(t.Context(), ev)
		require.NoError(t, err)
	}
	part := fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)[0]
	part.ClusterLabels, part.FleetCount = map[string]string{"region": "europe-west1"}, 2
	apply(fleet.Event{Kind: fleet.KindSnapshot, Snapshot: part})
	setReady = func(name string, ready int64) {
		apply(fleet.Event{Kind: fleet.KindUpsert, Namespace: "games", Name: name, Fleet: fleet.State{
			UID: "u-" + name, Labels: map[string]string{"platform": "pc"}, Spec: fleet.Spec{Replicas: 10},
			Status: fleet.Status{Replicas: 10, ReadyReplicas: ready, AllocatedReplicas: 10 - ready},
		}})
	}
	setReady("ranked", 8)
	setReady("casual", 2)
	return setReady
}

var serving = regexp.MustCompile(`serving on http://(\S+) `)

// start runs the program on a free port of the loopback and returns its
// address, and what ends it and reports its error.
func start(t *testing.T, env map[string]string) (addr string, stop func() error, stderr *syncbuf.Buffer) {
	t.Helper()
	env["HOST"], env["PORT"] = "127.0.0.1", "0"
	ctx, cancel := context.WithCancel(t.Context())
	stderr = &syncbuf.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return env[k] }, io.Discard, stderr) }()
	require.Eventually(t, func() bool { return serving.MatchString(stderr.String()) }, 30*time.Second, 10*time.Millisecond, "it says where it serves")
	t.Cleanup(cancel)
	return serving.FindStringSubmatch(stderr.String())[1], func() error { cancel(); return <-done }, stderr
}

// TestNativeGRPCOverH2C: a plain grpc-go client — HTTP/2 with prior
// knowledge, as every gRPC stub speaks it — calls every RPC of
// InformationService on the port that serves REST over HTTP/1.1, follows a
// watch through a change, and hears UNAVAILABLE, to resume, when the
// server stops.
func TestNativeGRPCOverH2C(t *testing.T) {
	project := emulator.ProjectID(t)
	setReady := cluster(t, project)
	addr, stop, stderr := start(t, map[string]string{"GOOGLE_CLOUD_PROJECT": project, "WATCH_POLL": "20ms", "MAX_STALENESS": "0"})

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	c := fleetcastv1.NewInformationServiceClient(conn)
	ctx := t.Context()

	inf, err := c.Inform(ctx, &fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Selector: "platform=pc"}, OrderBy: fleetcastv1.OrderBy_ORDER_BY_READY})
	require.NoError(t, err)
	require.Len(t, inf.GetFleetInformation(), 2)
	assert.Equal(t, "ranked", inf.GetFleetInformation()[0].GetFleetName())
	assert.Equal(t, int64(8), inf.GetFleetInformation()[0].GetReadyGameservers())
	assert.Equal(t, "pc", inf.GetFleetInformation()[0].GetClusterName())

	f, err := c.GetFleet(ctx, &fleetcastv1.GetFleetRequest{ClusterName: "pc", Namespace: "games", FleetName: "casual"})
	require.NoError(t, err)
	assert.Equal(t, int64(2), f.GetFleetInformation().GetReadyGameservers())
	_, err = c.GetFleet(ctx, &fleetcastv1.GetFleetRequest{ClusterName: "pc", Namespace: "games", FleetName: "nope"})
	assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)

	cl, err := c.ListClusters(ctx, &fleetcastv1.ListClustersRequest{})
	require.NoError(t, err)
	require.Len(t, cl.GetClusters(), 1)
	one, err := c.GetCluster(ctx, &fleetcastv1.GetClusterRequest{ClusterName: "pc"})
	require.NoError(t, err)
	assert.Equal(t, int64(2), one.GetCluster().GetFleetCount())
	lv, err := c.LabelValues(ctx, &fleetcastv1.LabelValuesRequest{Key: "platform"})
	require.NoError(t, err)
	require.Len(t, lv.GetValues(), 1)
	assert.Equal(t, int64(10), lv.GetValues()[0].GetReadyGameservers())

	// A bad filter is INVALID_ARGUMENT naming its field, in
	// google.rpc.BadRequest, as grpc-go's status package reads it.
	_, err = c.Inform(ctx, &fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Selector: "platform in (pc"}})
	st := status.Convert(err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	var field string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			field = br.GetFieldViolations()[0].GetField()
		}
	}
	assert.Equal(t, "filter.selector", field)

	// A watch: the cluster, both fleets, synced; then the change.
	wctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	w, err := c.WatchFleets(wctx, &fleetcastv1.WatchFleetsRequest{Filter: &fleetcastv1.FleetFilter{Selector: "platform=pc"}})
	require.NoError(t, err)
	var added int
	for {
		m, err := w.Recv()
		require.NoError(t, err)
		if m.GetSynced() != nil {
			assert.Equal(t, int32(2), m.GetSynced().GetFleetCount())
			break
		}
		if m.GetFleet() != nil {
			assert.Equal(t, fleetcastv1.ChangeType_CHANGE_TYPE_ADDED, m.GetFleet().GetType())
			added++
		}
	}
	assert.Equal(t, 2, added)
	setReady("casual", 5)
	for {
		m, err := w.Recv()
		require.NoError(t, err)
		if ch := m.GetFleet(); ch != nil {
			assert.Equal(t, fleetcastv1.ChangeType_CHANGE_TYPE_MODIFIED, ch.GetType())
			assert.Equal(t, "casual", ch.GetFleet().GetFleetName())
			assert.Equal(t, int64(5), ch.GetFleet().GetReadyGameservers())
			break
		}
	}

	// The same port serves REST over HTTP/1.1.
	resp, err := testhttp.Client.Get("http://" + addr + "/v1/fleets?selector=platform%3Dpc")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 1, resp.ProtoMajor)

	// Stopping ends the watch with UNAVAILABLE, which a client answers by
	// resuming elsewhere; the program returns without error.
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	for {
		_, err := w.Recv()
		if err != nil {
			assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
			assert.Contains(t, err.Error(), "shutting down")
			break
		}
	}
	require.NoError(t, <-stopped)
	assert.Contains(t, stderr.String(), "stopping")
}

// TestBadConfigurationIsRefusedAtStart: every bad variable, at once,
// before anything is served; arguments are refused.
func TestBadConfigurationIsRefusedAtStart(t *testing.T) {
	env := map[string]string{"SHUTDOWN_GRACE": "soon", "WATCH_POLL": "often", "GOOGLE_CLOUD_PROJECT": "p"}
	err := run(t.Context(), nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SHUTDOWN_GRACE")
	assert.Contains(t, err.Error(), "WATCH_POLL")
	err = run(t.Context(), []string{"serve"}, func(string) string { return "" }, io.Discard, io.Discard)
	assert.ErrorContains(t, err, "unexpected arguments")
	var out syncbuf.Buffer
	require.NoError(t, run(t.Context(), []string{"version"}, func(string) string { return "" }, &out, io.Discard))
	assert.Contains(t, out.String(), "fleetcast-query dev")
	assert.True(t, errors.Is(run(t.Context(), []string{"-h"}, func(string) string { return "" }, io.Discard, io.Discard), flag.ErrHelp))
}
