package emulatortests

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/logging"
)

// fillFleets writes n live fleet documents in 4 clusters, half of them
// platform=pc, a quarter at version 1.42, with a fresh heartbeat each.
func fillFleets(tb testing.TB, store *firestoredb.Store, n int) {
	tb.Helper()
	now := time.Now()
	bw := store.Client().BulkWriter(tb.Context())
	for i := range n {
		platform := []string{"pc", "ps5"}[i%2]
		version := []string{"1.41", "1.42"}[(i/2)%2]
		ev := fleet.Event{
			SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: fmt.Sprintf("c%d", i%4),
			Version: fleet.Version{Term: 1, Seq: int64(i + 1)}, ObservedAt: fleet.MicrosOf(now), Publisher: fleet.Publisher{ID: "p"},
			Namespace: "games", Name: fmt.Sprintf("f%05d", i),
			Fleet: fleet.State{UID: "u", Labels: map[string]string{"platform": platform, "app.kubernetes.io/version": version},
				Status: fleet.Status{ReadyReplicas: int64(i % 10)}},
		}
		d, _ := fleet.ApplyFleetEvent(nil, ev, now, time.Hour)
		_, err := bw.Set(store.FleetRef(ev.Key()), d)
		require.NoError(tb, err)
	}
	for c := range 4 {
		part := fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)[0]
		cd := fleet.ApplySnapshotToCluster(nil, fleet.Event{Cluster: fmt.Sprintf("c%d", c), Version: fleet.Version{Term: 1, Seq: 1},
			ObservedAt: fleet.MicrosOf(now.Add(time.Hour)), Publisher: fleet.Publisher{ID: "p"}, Snapshot: part}, now)
		_, err := bw.Set(store.ClusterRef(cd.Cluster), cd)
		require.NoError(tb, err)
	}
	bw.End()
}

var benchRequests = flag.Int("query.requests", 200, "BenchmarkQueryFleets and BenchmarkWatchCallbackLatency: samples per case")

// BenchmarkQueryFleets measures GET /v1/fleets with a label selector over
// 1 000 and 10 000 fleet documents, answered from the query view: the cold
// first request (the full load), warm requests, pages 1 and 10, a 304, and
// requests each preceded by one fleet write; with the Firestore reads the
// adapter counts (as billed: one per document, at least one per query)
// and the view's memory.
func BenchmarkQueryFleets(b *testing.B) {
	modes := []struct {
		name         string
		maxStaleness time.Duration
	}{{"default", 0}, {"strict", -1}}
	for _, mode := range modes {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("mode=%s/docs=%d", mode.name, n), func(b *testing.B) { benchmarkQueryFleets(b, n, mode.maxStaleness) })
		}
	}
}

// benchmarkQueryFleets runs the scenarios over n fleets, with the view's
// MaxStaleness (0: its default; negative: every answer waits for a sync).
// Each scenario is a phase whose Firestore reads are counted from its
// start to its end, background syncs included.
func benchmarkQueryFleets(b *testing.B, n int, maxStaleness time.Duration) {
	project := emulator.ProjectID(b)
	store := firestoredb.New(emulator.Firestore(b, project), time.Hour, time.Now)
	fillFleets(b, store, n)
	heapBefore := heapInUse()
	src := &clusterReadCounter{Store: store}
	svc := fleetapi.NewService(src, fleetapi.Options{MaxStaleness: maxStaleness})
	srv := httptest.NewServer(query.NewHandler(svc, logging.New(io.Discard, logging.LevelWarning)))
	b.Cleanup(srv.Close)
	const sel = "orderBy=ready&selector=platform%3Dpc%2Capp.kubernetes.io%2Fversion%3D1.42"
	u := srv.URL + "/v1/fleets?pageSize=100&" + sel

	// get sends one request and returns its latency and answer.
	get := func(url string, header map[string]string, want int) (time.Duration, *http.Response) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(b, err)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		start := time.Now()
		resp, err := testhttp.Client.Do(req)
		require.NoError(b, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(b, err)
		resp.Body.Close()
		took := time.Since(start)
		require.Equal(b, want, resp.StatusCode, "%s", body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return took, resp
	}
	// phase runs request k times and reports the p50 latency and the
	// reads per request as name-p50-ms and name-reads/req, and of those
	// the cluster documents' (the view's ClusterRefresh) as
	// name-cluster-reads/req; it returns the latencies. A phase starts
	// and ends with a sync (svc.Sync), so
	// that every background sync its requests began is counted in it,
	// and none of another phase's; the final sync's own reads (the
	// queries' minimum, 1 or 2) are counted too.
	phase := func(name string, k int, request func(i int) time.Duration) []time.Duration {
		require.NoError(b, svc.Sync(b.Context()))
		reads, clusterReads := store.Reads(), src.reads.Load()
		lat := make([]time.Duration, 0, k)
		for i := range k {
			lat = append(lat, request(i))
		}
		require.NoError(b, svc.Sync(b.Context()))
		b.ReportMetric(quantile(millis(lat), 0.5), name+"-p50-ms")
		b.ReportMetric(float64(store.Reads()-reads)/float64(k), name+"-reads/req")
		b.ReportMetric(float64(src.reads.Load()-clusterReads)/float64(k), name+"-cluster-reads/req")
		return lat
	}
	write := func(cluster string, i int, seq int64) {
		_, err := store.Apply(b.Context(), fleet.Event{
			SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: cluster, Namespace: "games", Name: fmt.Sprintf("f%05d", i),
			Version: fleet.Version{Term: 2, Seq: seq}, ObservedAt: fleet.MicrosOf(time.Now()), Publisher: fleet.Publisher{ID: "p"},
			Fleet: fleet.State{UID: "u", Labels: map[string]string{"platform": "pc", "app.kubernetes.io/version": "1.42"},
				Status: fleet.Status{ReadyReplicas: seq % 10}},
		})
		require.NoError(b, err)
	}
	b.ResetTimer()

	reads := store.Reads()
	cold, _ := get(u, nil, http.StatusOK)
	b.ReportMetric(float64(cold.Microseconds())/1000, "cold-ms")
	b.ReportMetric(float64(store.Reads()-reads), "cold-reads")
	b.ReportMetric(float64(heapInUse()-heapBefore)/(1<<20), "view-MiB")
	// The syncs within CommitLag after a load read again what was
	// written within CommitLag before it (here, the end of fillFleets):
	// sync until one reads only the queries' minimum, to measure the
	// steady state.
	for deadline := time.Now().Add(30 * time.Second); ; {
		before := store.Reads()
		require.NoError(b, svc.Sync(b.Context()))
		if store.Reads()-before <= 2 {
			break
		}
		require.True(b, time.Now().Before(deadline), "the view's syncs still read the load's last writes after 30 s")
	}
	_, resp := get(u, nil, http.StatusOK)
	etag := resp.Header.Get("ETag")

	lat := phase("warm", *benchRequests, func(int) time.Duration { took, _ := get(u, nil, http.StatusOK); return took })
	reportDist(b, "latency", "ms", millis(lat))
	b.ReportMetric(float64(len(lat)), "requests")

	// Pages 1 and 10 of 20 fleets; the token of page 10 found first.
	pageURL := srv.URL + "/v1/fleets?pageSize=20&" + sel
	page10URL := pageURL
	for p := 1; p < 10; p++ {
		_, resp := get(page10URL, nil, http.StatusOK)
		var l fleetapi.FleetList
		require.NoError(b, json.NewDecoder(resp.Body).Decode(&l))
		require.NotEmpty(b, l.NextPageToken, "page %d is not the last", p)
		page10URL = pageURL + "&pageToken=" + l.NextPageToken
	}
	phase("page1", *benchRequests/4, func(int) time.Duration { took, _ := get(pageURL, nil, http.StatusOK); return took })
	phase("page10", *benchRequests/4, func(int) time.Duration { took, _ := get(page10URL, nil, http.StatusOK); return took })
	phase("304", *benchRequests/4, func(int) time.Duration {
		took, _ := get(u, map[string]string{"If-None-Match": etag}, http.StatusNotModified)
		return took
	})
	// One fleet written before each request, back to back; then with
	// requests further apart than CommitLag, so that no sync reads a
	// write a previous one read.
	phase("changed1", *benchRequests/4, func(i int) time.Duration {
		write("c0", 4*i, int64(i+1))
		took, _ := get(u, nil, http.StatusOK)
		return took
	})
	// The arrival schedule of this scenario: one write and request
	// every 300 ms.
	arrivals := time.NewTicker(fleetapi.DefaultCommitLag + 50*time.Millisecond)
	defer arrivals.Stop()
	phase("changed1-spaced", 20, func(i int) time.Duration {
		<-arrivals.C
		write("c1", 4*i+1, int64(i+1))
		took, _ := get(u, nil, http.StatusOK)
		return took
	})
	b.StopTimer()
}

// clusterReadCounter is the Store as the view's Source, counting apart
// the reads of cluster documents that the Store bills with the fleets'
// (Store.Reads): each call's share of them. The view's syncs run one at a
// time and, without watches, no listener reads beside them, so nothing
// else reads for the view during the call.
type clusterReadCounter struct {
	*firestoredb.Store
	reads atomic.Int64
}

func (c *clusterReadCounter) Clusters(ctx context.Context) (fleet.Page[fleet.ClusterDocument], error) {
	defer c.count(c.Store.Reads())
	return c.Store.Clusters(ctx)
}

func (c *clusterReadCounter) ClustersWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.ClusterDocument], error) {
	defer c.count(c.Store.Reads())
	return c.Store.ClustersWrittenSince(ctx, since)
}

// count adds the Store's reads since it read before.
func (c *clusterReadCounter) count(before int64) { c.reads.Add(c.Store.Reads() - before) }

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkWatchCallbackLatency measures the time from a fleet write (an
// ingest transaction) to the fleetwatch change callback.
func BenchmarkWatchCallbackLatency(b *testing.B) {
	project := emulator.ProjectID(b)
	store := firestoredb.New(emulator.Firestore(b, project), time.Hour, time.Now)
	fillFleets(b, store, 100)
	seen := make(chan int64, 1)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	_, err := fleetwatch.Watch(ctx, store.Client(), fleetwatch.Options{OnChange: func(c fleetwatch.Change) {
		if c.Fleet.Name == "f00000" {
			seen <- c.Fleet.Version.Seq
		}
	}})
	require.NoError(b, err)
	lat := make([]time.Duration, 0, *benchRequests)
	b.ResetTimer()
	for i := range *benchRequests {
		seq := int64(1_000_000 + i)
		start := time.Now()
		_, err := store.Apply(b.Context(), fleet.Event{
			SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "c0", Namespace: "games", Name: "f00000",
			Version: fleet.Version{Term: 1, Seq: seq}, ObservedAt: fleet.MicrosOf(start), Publisher: fleet.Publisher{ID: "p"},
			Fleet: fleet.State{UID: "u", Status: fleet.Status{ReadyReplicas: int64(i)}},
		})
		require.NoError(b, err)
		for got := <-seen; got != seq; got = <-seen {
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportDist(b, "latency", "ms", millis(lat))
	b.ReportMetric(float64(len(lat)), "requests")
}
