package query_test

import (
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/internal/testenv/watchtest"
)

// TestAThousandSubscribers: 1 000 Connect streams on one instance, beside a
// client that opened a stream and stopped reading while thousands of
// changes are sent to it. Every change reaches every reader — a stream
// the server cut (its write timeout, on a machine too loaded to serve it
// in time) resumes from its token, as a client does, and misses nothing;
// the stuck one holds the server's socket buffers and one step of events,
// no more. The bound is liveness only (testhttp.Deadline): the numbers are
// logged, and make bench measures them without -race.
func TestAThousandSubscribers(t *testing.T) {
	const n = 1000
	srv, mem := serverOver(t)

	// The stuck client: its request is sent, its answer never read, from
	// a socket with a small receive buffer.
	d := net.Dialer{}
	stuck, err := d.DialContext(t.Context(), "tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	require.NoError(t, stuck.(*net.TCPConn).SetReadBuffer(4096))
	defer stuck.Close()
	_, err = fmt.Fprintf(stuck, "GET /v1/watch?includeStale=true HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	client := fleetcastv1connect.NewInformationServiceClient(testhttp.New(&http.Transport{MaxIdleConnsPerHost: n}), srv.URL)
	type seen struct {
		mu    sync.Mutex
		ready int64
		at    time.Time
	}
	subs := make([]*seen, n)
	for i := range subs {
		subs[i] = &seen{}
	}
	resumed := watchtest.Subscribe(t, client, n, &fleetcastv1.WatchFleetsRequest{Filter: &fleetcastv1.FleetFilter{Clusters: []string{"pc"}, Selector: "platform=pc"}},
		func(sub int, f *fleetcastv1.FleetInformation) {
			if f.GetFleetName() == "f0" {
				s := subs[sub]
				s.mu.Lock()
				s.ready, s.at = f.GetReadyGameservers(), time.Now()
				s.mu.Unlock()
			}
		})
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("%d subscribers: %.1f KiB of heap each, client and server (make test runs this with -race)", n, float64(after.HeapInuse-before.HeapInuse)/n/1024)

	// Thousands of changes the 1 000 do not watch, all sent to the stuck
	// client, then one they watch.
	seq := int64(1000)
	for round := range 5 {
		for j := range 400 {
			seq++
			put(mem, seq, "ps5", fmt.Sprintf("bulk-%03d", j), int64(round))
		}
	}
	for _, ready := range []int64{41, 42} {
		seq++
		written := time.Now()
		put(mem, seq, "pc", "f0", ready)
		var lat []time.Duration
		require.Eventually(t, func() bool {
			lat = lat[:0]
			for _, s := range subs {
				s.mu.Lock()
				r, at := s.ready, s.at
				s.mu.Unlock()
				if r != ready {
					return false
				}
				lat = append(lat, at.Sub(written))
			}
			return true
		}, testhttp.Deadline, 10*time.Millisecond, "ready=%d reaches every subscriber", ready) // a liveness bound: -race on a shared machine is slow
		slices.Sort(lat)
		t.Logf("change → %d subscribers (poll every 5 ms): p50 %v, p99 %v, max %v; %d streams resumed after a cut",
			n, lat[n/2], lat[n*99/100], lat[n-1], resumed.Load())
	}
}
