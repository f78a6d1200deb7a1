package emulatortests

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
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

// countingReader counts the documents the API reads.
type countingReader struct {
	fleetapi.Reader
	docs atomic.Int64
}

func (c *countingReader) ListFleets(ctx context.Context, f firestoredb.FleetFilter) ([]*fleet.Document, error) {
	d, err := c.Reader.ListFleets(ctx, f)
	c.docs.Add(int64(len(d)))
	return d, err
}

func (c *countingReader) ListClusters(ctx context.Context) ([]*fleet.ClusterDocument, error) {
	d, err := c.Reader.ListClusters(ctx)
	c.docs.Add(int64(len(d)))
	return d, err
}

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

// BenchmarkQueryFleets measures GET /v1/fleets with a label selector (two
// equalities sent to Firestore) over 1 000 and 10 000 fleet documents.
func BenchmarkQueryFleets(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("docs=%d", n), func(b *testing.B) {
			project := emulator.ProjectID(b)
			store := firestoredb.New(emulator.Firestore(b, project), time.Hour, time.Now)
			fillFleets(b, store, n)
			reader := &countingReader{Reader: store}
			srv := httptest.NewServer(query.NewHandler(reader, logging.New(io.Discard, logging.LevelWarning), time.Now, query.DefaultStaleAfter))
			b.Cleanup(srv.Close)
			u := srv.URL + "/v1/fleets?orderBy=ready&pageSize=100&selector=" + url.QueryEscape("platform=pc,app.kubernetes.io/version=1.42")
			lat := make([]time.Duration, 0, *benchRequests)
			reader.docs.Store(0)
			b.ResetTimer()
			for range *benchRequests {
				start := time.Now()
				resp, err := http.Get(u)
				require.NoError(b, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				require.Equal(b, http.StatusOK, resp.StatusCode)
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			reportDist(b, "latency", "ms", millis(lat))
			b.ReportMetric(float64(len(lat)), "requests")
			b.ReportMetric(float64(reader.docs.Load())/float64(len(lat)), "docs-read/req")
		})
	}
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
	_, err := fleetwatch.Watch(ctx, store.Client(), fleetwatch.Query{OnChange: func(c fleetwatch.Change) {
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
