package emulatortests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
	"github.com/fleetcast/fleetcast/logging"
)

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// decoded is a source whose full loads hand the view documents of their
// own, as Firestore's client decodes each read afresh: the in-memory store
// hands out its own maps, which the view would then share.
type decoded struct{ *fleetapitest.Memory }

func (d decoded) LiveFleets(ctx context.Context, each func(*fleet.Document)) ([]string, error) {
	var err error
	bad, lerr := d.Memory.LiveFleets(ctx, func(doc *fleet.Document) {
		b, merr := json.Marshal(doc)
		var fresh fleet.Document
		if merr == nil {
			merr = json.Unmarshal(b, &fresh)
		}
		if merr != nil {
			err = merr
			return
		}
		each(&fresh)
	})
	return bad, errors.Join(lerr, err)
}

// memoryWorld is a query handler over n fleets of three fresh clusters in
// memory, each fleet's state made to about stateBytes of JSON (a typical
// fleet: about 500; the largest: fleet.MaxStateBytes).
func memoryWorld(tb testing.TB, n, stateBytes int) (*fleetapitest.Memory, *fleetapi.Service, *httptest.Server) {
	tb.Helper()
	mem := fleetapitest.NewMemory(time.Now)
	now := time.Now()
	for _, c := range []string{"c0", "c1", "c2"} {
		mem.PutCluster(fleet.ClusterDocument{Cluster: c, Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: 1},
			SnapshotParts: 1, IngestedAt: now.Add(time.Hour), HeartbeatAt: now})
	}
	for i := range n {
		s := fleet.State{UID: fmt.Sprintf("uid-%05d", i), Labels: map[string]string{"platform": "pc", "app.kubernetes.io/version": "1.42.0"},
			Spec: fleet.Spec{Replicas: 10}, Status: fleet.Status{Replicas: 10, ReadyReplicas: int64(i % 10),
				Counters: map[string]fleet.Aggregate{"rooms": {Count: 3, Capacity: 40}}}}
		for l := 0; jsonSize(tb, s) < stateBytes-120; l++ {
			s.Labels[fmt.Sprintf("example.com/label-%03d", l)] = strings.Repeat("v", 60) + fmt.Sprintf("%03d", l)
		}
		k := fleet.Key{Cluster: fmt.Sprintf("c%d", i%3), Namespace: "games", Name: fmt.Sprintf("fleet-%05d", i)}
		d := fleet.Document{Cluster: k.Cluster, Namespace: k.Namespace, Name: k.Name, UID: s.UID, Version: fleet.Version{Term: 1, Seq: int64(i + 2)},
			DocID: k.DocID(), DocIDHash: fleet.IDHash(k.DocID()), Labels: s.Labels, Spec: &s.Spec, Status: fleet.NewDocStatus(s.Status),
			Publisher: fleet.Publisher{ID: "p", Version: "v"}, ObservedAt: now, IngestedAt: now}
		mem.PutFleet(d)
	}
	log := logging.New(io.Discard, logging.LevelWarning)
	svc := fleetapi.NewService(decoded{mem}, fleetapi.Options{Log: log, MaxWatches: 10_000, MaxViewBytes: 1 << 30})
	srv := httptest.NewServer(query.NewHandler(svc, log))
	tb.Cleanup(srv.Close)
	return mem, svc, srv
}

func jsonSize(tb testing.TB, s fleet.State) int {
	b, err := fleet.EncodeEvent(fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "c", Namespace: "n", Name: "f",
		Version: fleet.Version{Term: 1, Seq: 1}, ObservedAt: 1, Publisher: fleet.Publisher{ID: "p"}, Fleet: s})
	if err != nil {
		return len(b) // past the bound: the loop stops
	}
	return len(b) - 500
}

// BenchmarkInstanceMemory measures the heap of a query instance holding
// 10 000 fleets, typical (about 500 bytes of state) and at
// fleet.MaxStateBytes, and what the view's budget counts for them
// (docBytes): the bound VIEW_MAX_BYTES is kept against.
func BenchmarkInstanceMemory(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"typical", 500}, {"largest", fleet.MaxStateBytes}} {
		b.Run("fleets=10000/state="+size.name, func(b *testing.B) {
			_, svc, _ := memoryWorld(b, 10_000, size.bytes)
			base := liveHeap() // the store's own documents are not the instance's
			require.NoError(b, svc.Sync(b.Context()))
			b.ResetTimer()
			for b.Loop() {
				require.NoError(b, svc.Sync(b.Context()))
			}
			b.StopTimer()
			heap := liveHeap() - base
			b.ReportMetric(float64(heap)/(1<<20), "MiB-heap")
			b.ReportMetric(float64(heap)/10_000, "B/fleet")
			b.ReportMetric(float64(svc.ViewBytes())/(1<<20), "MiB-counted")
			runtime.KeepAlive(svc)
		})
	}
}

// BenchmarkStreamMemory measures what one more watch stream costs an
// instance holding 10 000 fleets: reading (it received its initial set and
// follows), and stalled (it opened the stream and reads nothing; its
// socket's buffers hold what the kernel took), per stream, over 100.
func BenchmarkStreamMemory(b *testing.B) {
	for _, stalled := range []bool{false, true} {
		b.Run(map[bool]string{false: "fleets=10000/reading", true: "fleets=10000/stalled"}[stalled], func(b *testing.B) {
			_, svc, srv := memoryWorld(b, 10_000, 500)
			require.NoError(b, svc.Sync(b.Context()))
			const streams = 100
			for b.Loop() {
				base := liveHeap()
				var conns []net.Conn
				for range streams {
					conns = append(conns, openStream(b, srv.URL, stalled))
				}
				if stalled {
					<-time.After(2 * time.Second) // the writes fill the buffers and block
				}
				heap := liveHeap() - base
				b.ReportMetric(float64(heap)/streams/1024, "KiB/stream")
				for _, c := range conns {
					_ = c.Close()
				}
			}
		})
	}
}

// openStream opens GET /v1/watch on a connection of its own; unless
// stalled, it reads up to the initial set's end (synced), then keeps
// reading.
func openStream(tb testing.TB, srvURL string, stalled bool) net.Conn {
	tb.Helper()
	addr := strings.TrimPrefix(srvURL, "http://")
	c, err := net.Dial("tcp", addr)
	require.NoError(tb, err)
	if stalled {
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	}
	_, err = fmt.Fprintf(c, "GET /v1/watch HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	require.NoError(tb, err)
	if stalled {
		return c
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(tb, err)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() && sc.Text() != "event: synced" {
	}
	go func() { _, _ = io.Copy(io.Discard, resp.Body) }()
	return c
}
