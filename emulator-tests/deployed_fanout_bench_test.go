package emulatortests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleetapi"
	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/internal/testenv/watchtest"
)

// deployedMaxStreams is the streams one query instance takes as Terraform
// deploys it: MAX_STREAMS = min(query_max_streams, query_concurrency),
// 500 and 1 000 by default (terraform/modules/fleetcast).
const deployedMaxStreams = 500

// BenchmarkDeployedFanout is BenchmarkWatchFanout's 1 000 stream
// subscribers through the HTTP stacks as deployed, not an httptest server,
// in processes of their own, each taking the deployed MAX_STREAMS (500),
// so 1 000 subscribers are two instances' worth, half on each: the query
// function served by the Functions Framework's runner
// (cmd/fleetcast-functions, FUNCTION_TARGET=QueryFleets), watched over
// Connect (HTTP/1.1, as the function is called) and over SSE (GET
// /v1/watch, as the dashboard and curl read it); and cmd/fleetcast-query
// (query_mode = "service"), watched over native gRPC (grpc-go, HTTP/2
// with prior knowledge, as a matchmaker's stubs call it). It reports the
// latency from a fleet write to each subscriber's receipt, the last
// subscriber's, and the instances' resident memory per subscriber.
func BenchmarkDeployedFanout(b *testing.B) {
	for _, run := range []struct{ server, protocol string }{
		{"functions-framework", "connect"}, {"functions-framework", "sse"}, {"fleetcast-query", "grpc"},
	} {
		b.Run(fmt.Sprintf("server=%s/protocol=%s/subscribers=%d", run.server, run.protocol, 2*deployedMaxStreams), func(b *testing.B) {
			benchmarkDeployedFanout(b, run.server, run.protocol, 2*deployedMaxStreams)
		})
	}
}

func benchmarkDeployedFanout(b *testing.B, server, protocol string, n int) {
	host := emulator.Host(b, emulator.FirestoreHostEnv)
	projectID := emulator.ProjectID(b)
	store := firestoredb.New(emulator.Firestore(b, projectID), time.Hour, time.Now)
	fillFleets(b, store, 100)
	var instances []*function
	var queryBin string
	if server == "fleetcast-query" {
		queryBin = buildQueryService(b)
	}
	for range n / deployedMaxStreams {
		env := []string{"GOOGLE_CLOUD_PROJECT=" + projectID, fmt.Sprintf("MAX_STREAMS=%d", deployedMaxStreams), "LOG_LEVEL=WARNING"}
		var fn *function
		var err error
		if server == "fleetcast-query" {
			fn, err = startQueryService(queryBin, host, env...)
		} else {
			fn, err = startFunctionTarget("QueryFleets", host, env...)
		}
		require.NoError(b, err)
		b.Cleanup(fn.stop)
		instances = append(instances, fn)
	}
	rss := func() float64 {
		sum := 0.0
		for _, fn := range instances {
			r, _ := memory(b, fn.proc.Pid())
			sum += r
		}
		return sum
	}
	before := rss()
	r := newReceipts(n)
	per := n / len(instances)
	for i, fn := range instances {
		url := strings.TrimSuffix(fn.url, "/")
		saw := func(sub int, name string, seq int64) {
			if name == "f00000" {
				r.saw(i*per+sub, seq)
			}
		}
		switch protocol {
		case "sse":
			subscribeSSE(b, url, per, saw)
			continue
		case "grpc":
			subscribeGRPC(b, strings.TrimPrefix(url, "http://"), per, saw)
			continue
		}
		client := fleetcastv1connect.NewInformationServiceClient(testhttp.New(&http.Transport{MaxIdleConnsPerHost: per}), url)
		watchtest.Subscribe(b, client, per, &fleetcastv1.WatchFleetsRequest{Filter: &fleetcastv1.FleetFilter{Clusters: []string{"c0"}, Selector: "platform=pc"}},
			func(sub int, f *fleetcastv1.FleetInformation) { saw(sub, f.GetFleetName(), f.GetVersion().GetSeq()) })
	}
	rssPer := (rss() - before) / float64(n) / 1024
	measureFanout(b, store, r) // resets the metrics reported before it
	b.ReportMetric(rssPer, "rss-KiB/subscriber")
	b.ReportMetric(float64(len(instances)), "instances")
	b.ReportMetric(deployedMaxStreams, "max-streams")
	b.ReportMetric(float64(fleetapi.DefaultMaxStaleness.Milliseconds()), "max-staleness-ms")
}

// subscribeSSE opens n GET /v1/watch streams of the server at url, as a
// browser's EventSource reads them, and hands each fleet event to saw
// until the benchmark ends; it returns once every stream has its initial
// set (synced).
func subscribeSSE(b *testing.B, url string, n int, saw func(sub int, name string, seq int64)) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), watchtest.SubscriptionLifetime)
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	client := testhttp.New(&http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0})
	synced := make(chan struct{}, n)
	for i := range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/watch?cluster=c0&selector=platform%3Dpc", nil)
		require.NoError(b, err)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := client.Do(req)
		require.NoError(b, err)
		require.Equal(b, http.StatusOK, resp.StatusCode, "subscriber %d", i)
		wg.Go(func() {
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			var kind, data string
			for sc.Scan() {
				field, value, _ := strings.Cut(sc.Text(), ": ")
				switch field {
				case "event":
					kind = value
				case "data":
					data = value
				case "":
					switch kind {
					case "synced":
						synced <- struct{}{}
					case "added", "modified":
						var f fleetapi.Fleet
						if err := json.Unmarshal([]byte(data), &f); err == nil {
							saw(i, f.Name, f.Version.Seq)
						}
					}
					kind, data = "", ""
				}
			}
			if ctx.Err() == nil {
				b.Errorf("SSE subscriber %d: its stream ended before the benchmark did: %v", i, sc.Err())
			}
		})
	}
	for range n {
		select {
		case <-synced:
		case <-time.After(watchtest.Lifetime):
			b.Fatalf("the %d SSE subscribers did not all receive their initial set", n)
		}
	}
}

// grpcStreamsPerConn is how many streams subscribeGRPC opens on one
// connection: well under Go's HTTP/2 server's 250 concurrent streams per
// connection, past which a client's new stream waits for one to end.
const grpcStreamsPerConn = 100

// subscribeGRPC opens n WatchFleets streams on the server at addr with
// grpc-go, grpcStreamsPerConn to an HTTP/2 connection, as matchmakers'
// generated stubs call fleetcast-query, and hands each fleet event to saw
// until the benchmark ends; it returns once every stream has its initial
// set.
func subscribeGRPC(b *testing.B, addr string, n int, saw func(sub int, name string, seq int64)) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), watchtest.SubscriptionLifetime)
	var wg sync.WaitGroup
	var conns []*grpc.ClientConn
	b.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	synced := make(chan struct{}, n)
	req := &fleetcastv1.WatchFleetsRequest{Filter: &fleetcastv1.FleetFilter{Clusters: []string{"c0"}, Selector: "platform=pc"}}
	var client fleetcastv1.InformationServiceClient
	for i := range n {
		if i%grpcStreamsPerConn == 0 {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(b, err)
			conns = append(conns, conn)
			client = fleetcastv1.NewInformationServiceClient(conn)
		}
		st, err := client.WatchFleets(ctx, req)
		require.NoError(b, err)
		wg.Go(func() {
			for {
				msg, err := st.Recv()
				if err != nil {
					if ctx.Err() == nil {
						b.Errorf("gRPC subscriber %d: its stream ended before the benchmark did: %v", i, err)
					}
					return
				}
				switch ev := msg.GetEvent().(type) {
				case *fleetcastv1.WatchFleetsResponse_Synced:
					synced <- struct{}{}
				case *fleetcastv1.WatchFleetsResponse_Fleet:
					saw(i, ev.Fleet.GetFleet().GetFleetName(), ev.Fleet.GetFleet().GetVersion().GetSeq())
				}
			}
		})
	}
	for range n {
		select {
		case <-synced:
		case <-time.After(watchtest.Lifetime):
			b.Fatalf("the %d gRPC subscribers did not all receive their initial set", n)
		}
	}
}

// buildQueryService builds cmd/fleetcast-query for tb.
func buildQueryService(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "fleetcast-query")
	require.NoError(tb, proc.Build(context.Background(), "", "github.com/fleetcast/fleetcast/cmd/fleetcast-query", bin))
	return bin
}

// startQueryService starts bin, cmd/fleetcast-query, as Cloud Run runs its
// image (query_mode = "service"), on the Firestore emulator at
// firestoreHost; env entries (KEY=value) override the defaults.
func startQueryService(bin, firestoreHost string, env ...string) (*function, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	return startServing("fleetcast-query", bin, port, append([]string{"PORT=" + port, "HOST=127.0.0.1",
		"GOOGLE_CLOUD_PROJECT=" + project, emulator.FirestoreHostEnv + "=" + firestoreHost}, env...))
}
