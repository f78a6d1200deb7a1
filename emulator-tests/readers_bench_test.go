package emulatortests

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/logging"
)

var (
	readersRequests = flag.Int("readers.requests", 2000, "BenchmarkReaders: requests per phase and round")
	readersRounds   = flag.Int("readers.rounds", 3, "BenchmarkReaders: rounds of each phase (the median and range across them are reported)")
	readersFleets   = flag.String("readers.fleets", "1000,10000", "BenchmarkReaders: fleet counts, comma-separated")
)

// BenchmarkReaders measures what readers of one query instance see of each
// other and of the view's syncs, over the Firestore emulator holding 1 000
// and 10 000 fleets, while syncs run back to back (a loop of strict syncs,
// and a fleet written every 20 ms):
//   - selector: GET /v1/fleets?selector=… (a page of 100), p50 and p99 of
//     each round of -readers.requests, their median and range over
//     -readers.rounds;
//   - bystander: GET /v1/fleets/{cluster}/{namespace}/{name} alone, then
//     while 8 hostile readers loop (the largest legal selector, the
//     largest page, /metrics, a placement with the largest policy), and
//     the ratio of their p99s. The hostile readers are a process of their
//     own in the idle scheduling class (startHostileReaders), as clients on
//     other machines: what they cost the instance is what it serves them;
//   - overlimit: a selector one requirement past the limit, refused (400);
//   - metrics: 8 scrapers of /metrics at once, and the computations of
//     the fleets' figures per version of the view meanwhile.
//
// make bench runs it on emulators in the idle scheduling class
// (EMULATOR_NICE=idle): they stand for Firestore, which runs on Google's
// machines, not on the instance's cores. At the default priority the
// Firestore emulator takes most of this machine's 2 cores while syncs run
// back to back, and the figures measure it more than the instance; at
// nice 19 it still makes its core look busy to the kernel, which then
// wakes the bystander on the core of a heavy read. instance-cores-alone
// and instance-cores-hostile are the cores the benchmark's process (the
// instance and the bystander's client) used in each phase, and
// instance-gc/s-* its garbage collections a second. make bench runs it
// with the deployed instance's GOGC and GOMEMLIMIT (QUERY_GC): at Go's
// defaults the collections the hostile readers' garbage starts are what
// the bystander waits for, and any GOGC paces a small view's collections
// faster than a large one's.
func BenchmarkReaders(b *testing.B) {
	for _, s := range strings.Split(*readersFleets, ",") {
		var n int
		_, err := fmt.Sscan(s, &n)
		require.NoError(b, err, "-readers.fleets")
		b.Run(fmt.Sprintf("fleets=%d", n), func(b *testing.B) { benchmarkReaders(b, n) })
	}
}

func benchmarkReaders(b *testing.B, n int) {
	project := emulator.ProjectID(b)
	store := firestoredb.New(emulator.Firestore(b, project), time.Hour, time.Now)
	fillFleets(b, store, n)
	log := logging.New(io.Discard, logging.LevelWarning)
	svc := fleetapi.NewService(store, fleetapi.Options{StaleAfter: time.Hour, Log: log})
	h := query.NewHandler(svc, log)
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	client := testhttp.New(&http.Transport{MaxIdleConnsPerHost: 16})
	get := func(path string, want int) time.Duration {
		start := time.Now()
		resp, err := client.Get(srv.URL + path)
		require.NoError(b, err)
		_, err = io.Copy(io.Discard, resp.Body)
		require.NoError(b, err)
		resp.Body.Close()
		require.Equal(b, want, resp.StatusCode, path)
		return time.Since(start)
	}
	get("/v1/fleets", http.StatusOK) // the load

	// The hostile readers and the scrapers ask for gzip and read the bytes
	// without decompressing them: on their own machines, as they would be,
	// decompressing takes nothing from the instance; in this process it
	// would take the cores the instance shares with them.
	rawClient := testhttp.New(&http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true})
	getRaw := func(path string, want int) time.Duration {
		start := time.Now()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(b, err)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := rawClient.Do(req)
		require.NoError(b, err)
		_, err = io.Copy(io.Discard, resp.Body)
		require.NoError(b, err)
		resp.Body.Close()
		require.Equal(b, want, resp.StatusCode, path)
		return time.Since(start)
	}

	// Syncs back to back, each with something to read.
	ctx, stop := context.WithCancel(b.Context())
	var bg sync.WaitGroup
	var syncs atomic.Int64
	bg.Go(func() {
		for ctx.Err() == nil {
			if svc.Sync(ctx) == nil {
				syncs.Add(1)
			}
		}
	})
	bg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for seq := int64(1); ctx.Err() == nil; seq++ {
			_, err := store.Apply(ctx, fleet.Event{
				SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "c0", Namespace: "games", Name: fmt.Sprintf("f%05d", 4*(seq%64)),
				Version: fleet.Version{Term: 2, Seq: seq}, ObservedAt: fleet.MicrosOf(time.Now()), Publisher: fleet.Publisher{ID: "p"},
				Fleet: fleet.State{UID: "u", Labels: map[string]string{"platform": "pc", "app.kubernetes.io/version": "1.42"}, Status: fleet.Status{ReadyReplicas: seq % 10}},
			})
			if err != nil && ctx.Err() == nil {
				b.Errorf("write: %v", err)
				return
			}
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	})
	defer func() { stop(); bg.Wait() }()
	b.ResetTimer()
	started, syncsBefore := time.Now(), syncs.Load()

	// rounds runs request k times a round and returns each round's p50
	// and p99, in ms.
	rounds := func(request func() time.Duration) (p50, p99 []float64) {
		for range *readersRounds {
			lat := make([]time.Duration, 0, *readersRequests)
			for range *readersRequests {
				lat = append(lat, request())
			}
			ms := millis(lat)
			p50, p99 = append(p50, quantile(ms, 0.5)), append(p99, quantile(ms, 0.99))
		}
		return p50, p99
	}
	selector := "/v1/fleets?pageSize=100&" + url.Values{"selector": {"platform=pc,app.kubernetes.io/version=1.42"}}.Encode()
	p50, p99 := rounds(func() time.Duration { return get(selector, http.StatusOK) })
	reportSpread(b, "selector-p50", "ms", p50)
	reportSpread(b, "selector-p99", "ms", p99)

	one := "/v1/fleets/c1/games/f00001"
	cpu, gc := cpuMeter(), gcMeter()
	aloneP50, alone := rounds(func() time.Duration { return get(one, http.StatusOK) })
	b.ReportMetric(cpu(), "instance-cores-alone")
	b.ReportMetric(gc(), "instance-gc/s-alone")
	reportSpread(b, "bystander-alone-p50", "ms", aloneP50)
	reportSpread(b, "bystander-alone-p99", "ms", alone)

	terms := make([]string, fleetapi.MaxSelectorRequirements)
	for i := range terms {
		terms[i] = fmt.Sprintf("!k%02d", i)
	}
	largest := strings.Join(terms, ",")
	rules := make([]string, fleetapi.MaxPolicyRules)
	for i := range rules {
		rules[i] = largest + ":" + fmt.Sprint(i)
	}
	hostile := []string{
		"/v1/fleets?pageSize=100&" + url.Values{"selector": {largest}}.Encode(),
		"/v1/fleets?pageSize=1000&includeStale=true",
		"/metrics",
		"/v1/placements?count=100&" + url.Values{"policy": rules}.Encode(),
	}
	hostiles := make([]string, 8)
	for i := range hostiles {
		hostiles[i] = hostile[i%len(hostile)]
	}
	readers := startHostileReaders(b, srv.URL, hostiles)
	cpu, gc = cpuMeter(), gcMeter()
	besideP50, beside := rounds(func() time.Duration { return get(one, http.StatusOK) })
	b.ReportMetric(cpu(), "instance-cores-hostile")
	b.ReportMetric(gc(), "instance-gc/s-hostile")
	hostileRequests := readers.stop(b)
	reportSpread(b, "bystander-hostile-p50", "ms", besideP50)
	reportSpread(b, "bystander-hostile-p99", "ms", beside)
	ratios := make([]float64, len(alone))
	for i := range alone {
		ratios[i] = beside[i] / alone[i]
	}
	reportSpread(b, "bystander-ratio", "x", ratios)
	b.ReportMetric(float64(hostileRequests), "hostile-requests")

	over := "/v1/fleets?" + url.Values{"selector": {largest + ",!k99"}}.Encode()
	_, refused := rounds(func() time.Duration { return get(over, http.StatusBadRequest) })
	reportSpread(b, "overlimit-p99", "ms", refused)

	// The versions of the view the scrapers could see, sampled every
	// millisecond, against the computations /metrics made meanwhile.
	var scrapes sync.Mutex
	var scrapeLat []time.Duration
	var scrapers sync.WaitGroup
	versions := map[uint64]bool{}
	computedBefore := h.MetricsComputations()
	sctx, sstop := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			_ = svc.Read(sctx, func(r *fleetapi.Read) error {
				versions[r.Version()] = true
				return nil
			})
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	for range 8 {
		scrapers.Go(func() {
			for range *readersRequests / 40 {
				took := getRaw("/metrics", http.StatusOK)
				scrapes.Lock()
				scrapeLat = append(scrapeLat, took)
				scrapes.Unlock()
			}
		})
	}
	scrapers.Wait()
	sstop()
	sampler.Wait()
	reportDist(b, "metrics-8-scrapers", "ms", millis(scrapeLat))
	b.ReportMetric(float64(h.MetricsComputations()-computedBefore)/float64(len(versions)), "metrics-computations/version")

	b.ReportMetric(float64(syncs.Load()-syncsBefore)/time.Since(started).Seconds(), "syncs/s")
	b.ReportMetric(float64(n), "fleets")
}

// hostileReadersEnv, set in the environment of this test binary, makes it
// the hostile readers' process (runHostileReaders) rather than the tests.
const hostileReadersEnv = "FLEETCAST_HOSTILE_READERS"

// hostileReaders is a process of readers who loop on expensive requests,
// started by BenchmarkReaders: one per path, for as long as its standard
// input stays open.
type hostileReaders struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startHostileReaders starts this test binary again as the hostile readers
// of base (one loop per path), in the idle scheduling class (chrt --idle):
// they stand for clients on their own machines, as the emulators stand for
// Firestore. In this process, or at the default priority, the readers'
// own HTTP clients take the cores the instance shares with them, and the
// bystander's figure measures them rather than the instance. Each of their
// requests costs the instance what it would cost in production.
func startHostileReaders(b *testing.B, base string, paths []string) *hostileReaders {
	cmd := exec.Command("chrt", "--idle", "0", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hostileReadersEnv+"="+base+"\n"+strings.Join(paths, "\n"))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(b, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	h := &hostileReaders{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := h.out.ReadString('\n') // "ready": every loop has sent its first request
	require.NoError(b, err, "hostile readers did not start")
	require.Equal(b, "ready\n", line)
	return h
}

// stop ends the loops and returns how many requests they made.
func (h *hostileReaders) stop(b *testing.B) int64 {
	require.NoError(b, h.stdin.Close())
	line, err := h.out.ReadString('\n')
	require.NoError(b, err, "hostile readers: no count")
	require.NoError(b, h.cmd.Wait(), "hostile readers failed")
	n, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	require.NoError(b, err, line)
	return n
}

// runHostileReaders is the hostile readers' process: spec is the base URL
// and the paths, one per line. Each path gets a loop of requests asking
// for gzip and reading the bytes without decompressing them, as a client
// would on its own machine; any answer but 200 is fatal. It prints "ready"
// once every loop has had an answer, stops when its standard input
// closes, and prints how many requests the loops made.
func runHostileReaders(spec string) int {
	lines := strings.Split(spec, "\n")
	base, paths := lines[0], lines[1:]
	client := testhttp.New(&http.Transport{MaxIdleConnsPerHost: len(paths), DisableCompression: true})
	ctx, stop := context.WithCancel(context.Background())
	var requests atomic.Int64
	var failOnce sync.Once
	var failed error
	fail := func(err error) {
		if ctx.Err() == nil {
			failOnce.Do(func() { failed = err })
		}
		stop()
	}
	var started, loops sync.WaitGroup
	get := func(path string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return nil
	}
	for _, path := range paths {
		started.Add(1)
		loops.Go(func() {
			err := get(path)
			started.Done()
			for ; err == nil; err = get(path) {
				requests.Add(1)
			}
			fail(err)
		})
	}
	started.Wait()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark closes it
	stop()
	loops.Wait()
	fmt.Println(requests.Load())
	if failed != nil {
		fmt.Fprintln(os.Stderr, "hostile readers:", failed)
		return 1
	}
	return 0
}
