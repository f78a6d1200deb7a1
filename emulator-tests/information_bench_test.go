package emulatortests

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/logging"
)

// informer is what the benchmark calls, over one protocol.
type informer struct {
	inform func(context.Context, *fleetcastv1.InformRequest) (*fleetcastv1.InformResponse, error)
	// watch opens a stream and returns its next message.
	watch func(context.Context, *fleetcastv1.WatchFleetsRequest) (func() (*fleetcastv1.WatchFleetsResponse, error), error)
}

// BenchmarkInformationService measures InformationService as
// cmd/fleetcast-query serves it (HTTP/1.1 and h2c on one port) over 1 000
// fleets on the emulator, through native gRPC (grpc-go, HTTP/2) beside the
// Connect protocol (connect-go, HTTP/1.1, as the function serves it):
// Inform's latency (the pc fleets with 5 or more ready, 100 a page), and a
// watch's change latency, from a fleet's ingest transaction to its
// MODIFIED message on the stream.
func BenchmarkInformationService(b *testing.B) {
	project := emulator.ProjectID(b)
	store := firestoredb.New(emulator.Firestore(b, project), time.Hour, time.Now)
	fillFleets(b, store, 1000)
	log := logging.New(discard{}, logging.LevelWarning)
	srv := httptest.NewUnstartedServer(query.NewHandler(fleetapi.NewService(store, fleetapi.Options{Log: log}), log))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	b.Cleanup(srv.Close)

	conn, err := grpc.NewClient(srv.Listener.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	b.Cleanup(func() { conn.Close() })
	g := fleetcastv1.NewInformationServiceClient(conn)
	c := fleetcastv1connect.NewInformationServiceClient(testhttp.Client, srv.URL)
	protocols := []struct {
		name string
		informer
	}{
		{"grpc", informer{inform: func(ctx context.Context, r *fleetcastv1.InformRequest) (*fleetcastv1.InformResponse, error) {
			return g.Inform(ctx, r)
		}, watch: func(ctx context.Context, r *fleetcastv1.WatchFleetsRequest) (func() (*fleetcastv1.WatchFleetsResponse, error), error) {
			s, err := g.WatchFleets(ctx, r)
			return func() (*fleetcastv1.WatchFleetsResponse, error) { return s.Recv() }, err
		}}},
		{"connect", informer{inform: func(ctx context.Context, r *fleetcastv1.InformRequest) (*fleetcastv1.InformResponse, error) {
			resp, err := c.Inform(ctx, connect.NewRequest(r))
			if err != nil {
				return nil, err
			}
			return resp.Msg, nil
		}, watch: func(ctx context.Context, r *fleetcastv1.WatchFleetsRequest) (func() (*fleetcastv1.WatchFleetsResponse, error), error) {
			s, err := c.WatchFleets(ctx, connect.NewRequest(r))
			return func() (*fleetcastv1.WatchFleetsResponse, error) {
				if !s.Receive() {
					return nil, s.Err()
				}
				return s.Msg(), nil
			}, err
		}}},
	}
	// Warm up what every protocol shares — the view's load and listener,
	// the emulator's own code paths — so that the first protocol measured
	// does not pay for it: one untimed pass, its numbers discarded.
	seq := int64(1_000_000)
	measureInformation(b, store, protocols[1].informer, &seq, 50)
	for _, p := range protocols {
		b.Run("protocol="+p.name, func(b *testing.B) {
			for range b.N {
				informs, changes := measureInformation(b, store, p.informer, &seq, *benchRequests)
				reportDist(b, "inform", "ms", millis(informs))
				reportDist(b, "change", "ms", millis(changes))
				b.ReportMetric(float64(len(informs)), "requests")
			}
		})
	}
}

// measureInformation times n Inform calls, then n changes through a watch.
func measureInformation(b *testing.B, store *firestoredb.Store, in informer, seq *int64, n int) (informs, changes []time.Duration) {
	ctx := b.Context()
	req := &fleetcastv1.InformRequest{Filter: &fleetcastv1.FleetFilter{Selector: "platform=pc", MinReady: 5}, PageSize: 100}
	_, err := in.inform(ctx, req) // the view's first load is not Inform's latency
	require.NoError(b, err)
	informs = make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		resp, err := in.inform(ctx, req)
		require.NoError(b, err)
		informs = append(informs, time.Since(start))
		require.Len(b, resp.GetFleetInformation(), 100)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next, err := in.watch(wctx, &fleetcastv1.WatchFleetsRequest{Filter: &fleetcastv1.FleetFilter{Selector: "platform=pc"}})
	require.NoError(b, err)
	for m, err := next(); m.GetSynced() == nil; m, err = next() {
		require.NoError(b, err)
	}
	// The first change starts the view's listener: not a change's latency.
	changes = make([]time.Duration, 0, n+1)
	for i := range n + 1 {
		*seq++
		start := time.Now()
		_, err := store.Apply(ctx, fleet.Event{
			SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "c0", Namespace: "games", Name: "f00000",
			Version: fleet.Version{Term: 1, Seq: *seq}, ObservedAt: fleet.MicrosOf(start), Publisher: fleet.Publisher{ID: "p"},
			Fleet: fleet.State{UID: "u", Labels: map[string]string{"platform": "pc", "app.kubernetes.io/version": "1.41"},
				Status: fleet.Status{ReadyReplicas: int64(i)}},
		})
		require.NoError(b, err)
		for {
			m, err := next()
			require.NoError(b, err)
			if f := m.GetFleet().GetFleet(); f.GetFleetName() == "f00000" && f.GetVersion().GetSeq() == *seq {
				break
			}
		}
		changes = append(changes, time.Since(start))
	}
	return informs, changes[1:]
}
