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
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/emulator"
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
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("docs=%d", n), func(b *testing.B) {
			project := emulator.ProjectID(b)
			store := firestoredb.New(emulator.Firestore(b, project), time.Hour, time.Now)
			fillFleets(b, store, n)
			heapBefore := heapInUse()
			svc := fleetapi.NewService(store, fleetapi.Options{})
			srv := httptest.NewServer(query.NewHandler(svc, logging.New(io.Discard, logging.LevelWarning)))
			b.Cleanup(srv.Close)
			const sel = "orderBy=ready&selector=platform%3Dpc%2Capp.kubernetes.io%2Fversion%3D1.42"
			u := srv.URL + "/v1/fleets?pageSize=100&" + sel
			// get sends one request and returns its latency, its
			// Firestore reads and its answer.
			get := func(url string, header map[string]string, want int) (time.Duration, int64, *http.Response) {
				req, err := http.NewRequest(http.MethodGet, url, nil)
				require.NoError(b, err)
				for k, v := range header {
					req.Header.Set(k, v)
				}
				reads := store.Reads()
				start := time.Now()
				resp, err := http.DefaultClient.Do(req)
				require.NoError(b, err)
				body, err := io.ReadAll(resp.Body)
				require.NoError(b, err)
				resp.Body.Close()
				took := time.Since(start)
				require.Equal(b, want, resp.StatusCode, "%s", body)
				resp.Body = io.NopCloser(bytes.NewReader(body))
				return took, store.Reads() - reads, resp
			}
			b.ResetTimer()
			cold, coldReads, _ := get(u, nil, http.StatusOK)
			b.ReportMetric(float64(cold.Microseconds())/1000, "cold-ms")
			b.ReportMetric(float64(coldReads), "cold-reads")
			b.ReportMetric(float64(heapInUse()-heapBefore)/(1<<20), "view-MiB")

			lat := make([]time.Duration, 0, *benchRequests)
			var reads int64
			var etag string
			for range *benchRequests {
				took, r, resp := get(u, nil, http.StatusOK)
				lat = append(lat, took)
				reads += r
				etag = resp.Header.Get("ETag")
			}
			reportDist(b, "latency", "ms", millis(lat))
			b.ReportMetric(float64(len(lat)), "requests")
			b.ReportMetric(float64(reads)/float64(len(lat)), "reads/req")

			// Pages 1 and 10 of 20 fleets, and a 304.
			pageURL := srv.URL + "/v1/fleets?pageSize=20&" + sel
			var page1, page10, notModified []time.Duration
			var page1Reads, page10Reads, notModifiedReads int64
			for range *benchRequests / 4 {
				next := pageURL
				for p := 1; p <= 10; p++ {
					took, r, resp := get(next, nil, http.StatusOK)
					switch p {
					case 1:
						page1, page1Reads = append(page1, took), page1Reads+r
					case 10:
						page10, page10Reads = append(page10, took), page10Reads+r
					}
					var l fleetapi.FleetList
					require.NoError(b, json.NewDecoder(resp.Body).Decode(&l))
					require.NotEmpty(b, l.NextPageToken, "page %d is not the last", p)
					next = pageURL + "&pageToken=" + l.NextPageToken
				}
				took, r, _ := get(u, map[string]string{"If-None-Match": etag}, http.StatusNotModified)
				notModified, notModifiedReads = append(notModified, took), notModifiedReads+r
			}
			b.ReportMetric(quantile(millis(page1), 0.5), "page1-p50-ms")
			b.ReportMetric(float64(page1Reads)/float64(len(page1)), "page1-reads/req")
			b.ReportMetric(quantile(millis(page10), 0.5), "page10-p50-ms")
			b.ReportMetric(float64(page10Reads)/float64(len(page10)), "page10-reads/req")
			b.ReportMetric(quantile(millis(notModified), 0.5), "304-p50-ms")
			b.ReportMetric(float64(notModifiedReads)/float64(len(notModified)), "304-reads/req")

			// One fleet written before each request: the answer reads it.
			var changed []time.Duration
			var changedReads int64
			for i := range *benchRequests / 4 {
				ev := fleet.Event{
					SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "c0", Namespace: "games", Name: fmt.Sprintf("f%05d", 4*i),
					Version: fleet.Version{Term: 2, Seq: int64(i + 1)}, ObservedAt: fleet.MicrosOf(time.Now()), Publisher: fleet.Publisher{ID: "p"},
					Fleet: fleet.State{UID: "u", Labels: map[string]string{"platform": "pc", "app.kubernetes.io/version": "1.42"},
						Status: fleet.Status{ReadyReplicas: int64(i % 10)}},
				}
				_, err := store.Apply(b.Context(), ev)
				require.NoError(b, err)
				took, r, _ := get(u, nil, http.StatusOK)
				changed, changedReads = append(changed, took), changedReads+r
			}
			b.StopTimer()
			b.ReportMetric(quantile(millis(changed), 0.5), "changed1-p50-ms")
			b.ReportMetric(float64(changedReads)/float64(len(changed)), "changed1-reads/req")
		})
	}
}

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
