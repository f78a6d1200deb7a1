package emulatortests

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// The neighbours of every chaos seed: a query instance that hostile
// readers work at, run as Cloud Run runs it (its own process), and two
// clusters sharing an ingest function — one flooding it as fast as it
// takes events, one heartbeating — both through the stand-ins for Cloud
// Run's concurrency and Pub/Sub's push window. That function reaches
// Firestore without the seed's outages, which would stale every cluster
// alike: what must not stale the bystander is its neighbour.
// Every seed must leave them as the brief says: no other cluster turns
// stale, every answer over every cluster succeeds, and the query
// instance's memory stays within its bound.
const (
	hostileStaleAfter = 3 * time.Second
	hostileHeartbeat  = 250 * time.Millisecond
	hostileMaxStreams = 4
	// hostileMemoryBound is the query instance's memory (Cloud Run's
	// 512 MiB): its peak resident set must stay below it.
	hostileMemoryBound = 512 << 20
)

// neighbourhood is what TestChaos starts once for every seed.
type neighbourhood struct {
	ingest *function // IngestFleetEvents, shared by the flood and the bystander
	query  *function // QueryFleets, its own process
	url    string
	front  string // the stand-in for Cloud Run before the ingest function
	bomb   []byte // a gzip of 64 KiB that inflates to 64 MiB
}

func startNeighbourhood(t *testing.T) *neighbourhood {
	t.Helper()
	// Logs at WARNING: at INFO its every ingested event would pile up in
	// the test's log collector over a long make chaos.
	ingest, err := startFunctionTarget("IngestFleetEvents", emulator.Host(t, emulator.FirestoreHostEnv), "LOG_LEVEL=WARNING")
	require.NoError(t, err)
	t.Cleanup(ingest.stop)
	q, err := startFunctionTarget("QueryFleets", emulator.Host(t, emulator.FirestoreHostEnv),
		"STALE_AFTER="+hostileStaleAfter.String(), "MAX_STREAMS="+strconv.Itoa(hostileMaxStreams),
		"STREAM_WRITE_TIMEOUT=1s", "HEARTBEAT=500ms", "LOG_LEVEL=WARNING")
	require.NoError(t, err)
	t.Cleanup(q.stop)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(`{"filter":{"selector":"`))
	_, _ = zw.Write(bytes.Repeat([]byte("a"), 64<<20))
	_, _ = zw.Write([]byte(`"}}`))
	require.NoError(t, zw.Close())
	return &neighbourhood{ingest: ingest, query: q, url: strings.TrimSuffix(q.url, "/"), front: cloudRun(t, ingest.url, 8), bomb: buf.Bytes()}
}

// neighbours is one seed's: the flood, the bystander, the hostile readers
// and what they saw go wrong.
type neighbours struct {
	n         *neighbourhood
	t         *testing.T
	log       *chaosLog
	flood     string
	bystander string
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	stalled   []net.Conn
	flooded   atomic.Int64
	mu        sync.Mutex
	broken    []string
}

func (n *neighbours) fail(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.broken) < 20 {
		n.broken = append(n.broken, fmt.Sprintf(format, args...))
	}
	n.log.add("neighbours: "+format, args...)
}

// move starts the seed's neighbours: the flood and the bystander's
// heartbeats run until quiet, the bystander's staleness is watched on the
// query instance.
func (nb *neighbourhood) move(t *testing.T, log *chaosLog) *neighbours {
	ctx, cancel := context.WithCancel(context.Background())
	n := &neighbours{n: nb, t: t, log: log, cancel: cancel}
	flood, bystander := fleetEvents(t, "flood"), fleetEvents(t, "bystander")
	n.flood, n.bystander = flood.cluster, bystander.cluster
	floodPush := newPushModel(nb.front, flood.cluster, 100*time.Millisecond, 6*time.Second)
	heartbeats := newPushModel(nb.front, bystander.cluster, 100*time.Millisecond, 6*time.Second)
	var seq atomic.Int64
	for range 32 {
		n.wg.Go(func() {
			for ctx.Err() == nil {
				s := seq.Add(1)
				if _, ok := floodPush.deliver(ctx, t, flood.upsert(fmt.Sprintf("f%02d", s%50), s, s%10)); ok {
					n.flooded.Add(1)
				}
			}
		})
	}
	first := make(chan struct{})
	n.wg.Go(func() {
		for s := int64(1); ctx.Err() == nil; s++ {
			if _, ok := heartbeats.deliver(ctx, t, bystander.snapshot(s, nil)); ok && s == 1 {
				close(first)
			}
			select {
			case <-ctx.Done():
			case <-time.After(hostileHeartbeat):
			}
		}
	})
	select {
	case <-first:
	case <-time.After(waitTimeout):
		n.fail("the bystander's first heartbeat did not land within %v", waitTimeout)
	}
	// Its staleness as the query instance judges it, every 100 ms, once
	// the instance knows it (it reads the clusters every CLUSTER_REFRESH).
	n.wg.Go(func() {
		known, since := false, time.Now()
		for ctx.Err() == nil {
			code, body := n.get(ctx, "/v1/clusters/"+n.bystander)
			switch {
			case ctx.Err() != nil:
			case code == http.StatusNotFound && !known && time.Since(since) < waitTimeout:
			case code == http.StatusOK && strings.Contains(body, `"stale":true`):
				n.fail("the bystander turned stale while another cluster flooded the ingest function")
			case code == http.StatusOK:
				known = true
			default:
				n.fail("GET /v1/clusters/%s answered %d: %.200s", n.bystander, code, body)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return n
}

func (n *neighbours) get(ctx context.Context, path string) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.n.url+path, nil)
	resp, err := testhttp.Client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

func (n *neighbours) post(path, contentType string, header map[string]string, body []byte) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, n.n.url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := testhttp.Client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// act is one hostile reader's move, chosen by rng, and a check that every
// answer over every cluster still succeeds.
func (n *neighbours) act(rng *rand.Rand) {
	switch r := rng.IntN(100); {
	case r < 25:
		code, body := n.post("/fleetcast.v1.InformationService/Inform", "application/json", map[string]string{"Content-Encoding": "gzip"}, n.n.bomb)
		n.log.add("reader sends a 64 KiB gzip inflating to 64 MiB: %d", code)
		if code != http.StatusTooManyRequests || !strings.Contains(body, "resource_exhausted") {
			n.fail("the gzip bomb answered %d %.200s, not resource_exhausted", code, body)
		}
	case r < 45 && len(n.stalled) < hostileMaxStreams-1:
		c, err := net.Dial("tcp", strings.TrimPrefix(n.n.url, "http://"))
		if err != nil {
			n.fail("dial the query instance: %v", err)
			return
		}
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		_, _ = fmt.Fprintf(c, "GET /v1/watch?includeStale=true HTTP/1.1\r\nHost: q\r\n\r\n")
		n.stalled = append(n.stalled, c)
		n.log.add("reader opens a stream and stops reading (%d stalled)", len(n.stalled))
	case r < 65:
		n.watch()
	}
	for _, path := range []string{"/v1/fleets?includeStale=true&pageSize=1000", "/v1/clusters", "/v1/labels/platform"} {
		if code, body := n.get(context.Background(), path); code != http.StatusOK {
			n.fail("GET %s over every cluster answered %d: %.300s", path, code, body)
		}
	}
	if code, body := n.post("/fleetcast.v1.InformationService/Inform", "application/json", nil, []byte(`{"filter":{"includeStale":true}}`)); code != http.StatusOK {
		n.fail("Inform over every cluster answered %d: %.300s", code, body)
	}
}

// watch opens a stream and reads its initial set: it is served, or
// refused as the instance's streams are all taken — nothing else.
func (n *neighbours) watch() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.n.url+"/v1/watch?cluster="+n.bystander, nil)
	resp, err := testhttp.Client.Do(req)
	if err != nil {
		n.fail("a watch: %v", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		b, _ := io.ReadAll(resp.Body)
		n.log.add("reader's watch refused: the instance serves its most streams")
		if !strings.Contains(string(b), "RESOURCE_EXHAUSTED") || resp.Header.Get("Retry-After") == "" {
			n.fail("a watch past the cap answered %.200s (Retry-After %q), not RESOURCE_EXHAUSTED", b, resp.Header.Get("Retry-After"))
		}
		return
	}
	if resp.StatusCode != http.StatusOK {
		n.fail("a watch answered %d", resp.StatusCode)
		return
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "event: synced" {
			n.log.add("reader's watch synced")
			return
		}
	}
	n.fail("a watch ended before its initial set: %v", sc.Err())
}

// quiet stops the neighbours and returns what went wrong: the bystander's
// staleness, failed answers, and the query instance's peak memory.
func (n *neighbours) quiet() []string {
	n.cancel()
	n.wg.Wait()
	for _, c := range n.stalled {
		_ = c.Close()
	}
	n.log.add("neighbours quiet: the flood landed %d events", n.flooded.Load())
	n.forget()
	if peak, err := peakRSS(n.n.query.proc.Pid()); err != nil {
		n.fail("the query instance's memory: %v", err)
	} else if peak >= hostileMemoryBound {
		n.fail("the query instance's peak memory %d MiB is past its %d MiB", peak>>20, hostileMemoryBound>>20)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.broken
}

// forget deletes the flood's and the bystander's documents: over a long
// make chaos they would fill the Firestore emulator, which keeps them all
// in memory.
//
// It gives up after forgetTimeout: an emulator that cannot answer that
// fails the seed with why, rather than holding the test until its
// timeout (a Firestore emulator whose heap filled has been seen to).
func (n *neighbours) forget() {
	ctx, cancel := context.WithTimeout(context.Background(), forgetTimeout)
	defer cancel()
	fs := emulator.Firestore(n.t, project)
	for _, c := range []string{n.flood, n.bystander} {
		docs, err := fs.Collection(firestoredb.FleetsCollection).Where("cluster", "==", c).Documents(ctx).GetAll()
		if err != nil {
			n.fail("forget %s's fleets: %v", c, err)
			continue
		}
		for _, d := range docs {
			_, _ = d.Ref.Delete(ctx)
		}
		_, _ = fs.Collection(firestoredb.ClustersCollection).Doc(c).Delete(ctx)
	}
}

// forgetTimeout bounds forget: a few thousand deletes take the emulator
// seconds.
const forgetTimeout = 2 * time.Minute

// peakRSS is a process's peak resident set (VmHWM), in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
