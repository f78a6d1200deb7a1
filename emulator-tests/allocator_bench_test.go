package emulatortests

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fleetcast/fleetcast/allocator"
	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/query"
	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
	"github.com/fleetcast/fleetcast/internal/testenv/agonestest"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/tlstest"
	"github.com/fleetcast/fleetcast/logging"
)

var (
	allocRequests = flag.Int("alloc.requests", 2000, "BenchmarkAllocator: requests per round of each phase")
	allocRounds   = flag.Int("alloc.rounds", 3, "BenchmarkAllocator: rounds of each phase (the spread)")
	allocCallers  = flag.Int("alloc.callers", 20, "BenchmarkAllocator: concurrent callers of the throughput and spread phase")
)

// countingAllocator is a cluster's Agones allocator that always has a
// game server: it answers at once, and counts.
type countingAllocator struct {
	pb.UnimplementedAllocationServiceServer
	n atomic.Int64
}

func (a *countingAllocator) Allocate(context.Context, *pb.AllocationRequest) (*pb.AllocationResponse, error) {
	n := a.n.Add(1)
	return &pb.AllocationResponse{GameServerName: fmt.Sprintf("ranked-%d", n), Address: "10.0.0.1",
		Ports: []*pb.AllocationResponse_GameServerStatusPort{{Name: "default", Port: 7654}}}, nil
}

// BenchmarkAllocator measures fleetcast-allocator — the service, its
// gRPC server over mutual TLS and its forwarder — in one process, over
// the Firestore emulator holding 4 equally able clusters (a fleet each
// of 1 000 Ready game servers labelled mode=ranked, equal policies), each
// cluster's allocator an in-process Agones allocation service over mutual
// TLS that allocates at once; so the figures are fleetcast's own cost,
// not an allocator's. Every phase runs -alloc.rounds rounds of
// -alloc.requests requests; a figure is the median of the rounds' and
// their range:
//
//   - direct and through: one caller's Allocate straight to a cluster's
//     allocator, and through fleetcast-allocator, interleaved, p50 and
//     p99 each, and their ratio per round (through ÷ direct);
//   - throughput and spread: -alloc.callers callers at once through the
//     service: allocations a second, and the most loaded cluster's
//     allocations over the clusters' mean;
//   - failover: the first cluster by priority has its allocator down (its
//     port refused), the others take the requests: p50 and p99 of one
//     caller's allocations, and the first one's, which finds it down.
func BenchmarkAllocator(b *testing.B) {
	project := emulator.ProjectID(b)
	client := emulator.Firestore(b, project)
	store := firestoredb.New(client, time.Hour, time.Now)
	agones := tlstest.NewCA(b, "agones")
	const clusters = 4
	allocators := make([]*countingAllocator, clusters)
	addrs := make([]string, clusters)
	var policies []allocator.Policy
	for i := range clusters {
		name := fmt.Sprintf("c%d", i)
		allocators[i] = &countingAllocator{}
		addr := agonestest.Serve(b, allocators[i], agones.Server(b, "agones-allocator").TLS(b), agones.Pool())
		addrs[i] = addr
		part := fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)[0]
		part.FleetCount, part.AllocatorEndpoint = 1, addr
		for seq, ev := range []fleet.Event{{Kind: fleet.KindSnapshot, Snapshot: part}, {Kind: fleet.KindUpsert, Namespace: "games", Name: "ranked",
			Fleet: fleet.State{UID: "u-" + name, GameServerLabels: map[string]string{"mode": "ranked"}, Status: fleet.Status{Replicas: 1000, ReadyReplicas: 1000}}}} {
			ev.SchemaVersion, ev.Cluster, ev.Version = fleet.SchemaVersion, name, fleet.Version{Term: 1, Seq: int64(seq + 1)}
			ev.Publisher, ev.ObservedAt = fleet.Publisher{ID: "pub-" + name, Version: "bench"}, fleet.MicrosOf(time.Now())
			_, err := store.Apply(b.Context(), ev)
			require.NoError(b, err)
		}
		policies = append(policies, allocator.Policy{Name: name, Cluster: name, Priority: 0, Weight: 1, SecretName: "unused"})
	}
	cfg, err := query.ConfigFromEnv(func(string) string { return "" })
	require.NoError(b, err)
	view, err := query.NewView(client, cfg, logging.New(io.Discard, logging.LevelWarning))
	require.NoError(b, err)
	trusted := agones.Client(b, "fleetcast-allocator").TLS(b)
	f := allocationFront(b, view, func(*allocator.Policy) tls.Certificate { return trusted }, agones, policies)
	direct := func() pb.AllocationServiceClient {
		cc, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{agones.Client(b, "matchmaker").TLS(b)}, RootCAs: agones.Pool(), MinVersion: tls.VersionTLS12})))
		require.NoError(b, err)
		b.Cleanup(func() { _ = cc.Close() })
		return pb.NewAllocationServiceClient(cc)
	}()
	req := &pb.AllocationRequest{Namespace: "games", GameServerSelectors: []*pb.GameServerSelector{{MatchLabels: map[string]string{"mode": "ranked"}}}}
	call := func(c pb.AllocationServiceClient) time.Duration {
		ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.Allocate(ctx, req)
		took := time.Since(start)
		if err != nil {
			b.Fatalf("allocate: %v", err)
		}
		return took
	}
	// Warm both paths: connections made, the view loaded.
	require.Eventually(b, func() bool {
		_, err := f.client.Allocate(b.Context(), req)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the service allocates")
	call(direct)
	b.ResetTimer()

	var dP50, dP99, tP50, tP99, ratio50, ratio99 []float64
	for range *allocRounds {
		var d, t []time.Duration
		for range *allocRequests {
			d = append(d, call(direct))
			t = append(t, call(f.client))
		}
		dm, tm := millis(d), millis(t)
		d50, d99, t50, t99 := quantile(dm, 0.5), quantile(dm, 0.99), quantile(tm, 0.5), quantile(tm, 0.99)
		dP50, dP99, tP50, tP99 = append(dP50, d50), append(dP99, d99), append(tP50, t50), append(tP99, t99)
		ratio50, ratio99 = append(ratio50, t50/d50), append(ratio99, t99/d99)
	}
	reportSpread(b, "direct-p50", "ms", dP50)
	reportSpread(b, "direct-p99", "ms", dP99)
	reportSpread(b, "through-p50", "ms", tP50)
	reportSpread(b, "through-p99", "ms", tP99)
	reportSpread(b, "ratio-p50", "x", ratio50)
	reportSpread(b, "ratio-p99", "x", ratio99)

	var rates, spreads []float64
	for range *allocRounds {
		before := make([]int64, clusters)
		for i, a := range allocators {
			before[i] = a.n.Load()
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range *allocCallers {
			wg.Go(func() {
				for next.Add(1) <= int64(*allocRequests) {
					call(f.client)
				}
			})
		}
		wg.Wait()
		rates = append(rates, float64(*allocRequests)/time.Since(start).Seconds())
		var counts []float64
		total := 0.0
		for i, a := range allocators {
			n := float64(a.n.Load() - before[i])
			counts, total = append(counts, n), total+n
		}
		spreads = append(spreads, slices.Max(counts)/(total/clusters))
	}
	reportSpread(b, "allocations", "per-s", rates)
	reportSpread(b, "spread", "x", spreads)

	// c0 first, and down: its endpoint refuses connections.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	down := lis.Addr().String()
	require.NoError(b, lis.Close())
	failover := slices.Clone(policies)
	failover[0].Endpoints = []string{down}
	for i := 1; i < clusters; i++ {
		failover[i].Priority = 1
	}
	f.svc.SetPolicies(failover)
	first := call(f.client)
	b.ReportMetric(float64(first.Microseconds())/1000, "failover-first-ms")
	var fP50, fP99 []float64
	for range *allocRounds {
		var lat []time.Duration
		for range *allocRequests {
			lat = append(lat, call(f.client))
		}
		ms := millis(lat)
		fP50, fP99 = append(fP50, quantile(ms, 0.5)), append(fP99, quantile(ms, 0.99))
	}
	reportSpread(b, "failover-p50", "ms", fP50)
	reportSpread(b, "failover-p99", "ms", fP99)
	// Every one of them failed over: c0 was tried first each time.
	require.GreaterOrEqual(b, testutil.ToFloat64(f.metrics.FailedOver), float64(1+*allocRounds**allocRequests))
}
