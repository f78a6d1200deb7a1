package emulatortests

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

var (
	publisherLoad   = flag.Duration("publisher.load", time.Minute, "BenchmarkPublisher: how long each case changes fleets at 100 per second")
	publisherWindow = 10 * time.Second // CPU and memory are sampled per window
)

// BenchmarkPublisher runs the real publisher binary against the control
// plane and the Pub/Sub emulator with 1 000 and 10 000 fleets, changes fleet
// statuses at 100 per second for -publisher.load (on every fleet, or on 10
// hot ones), and reports the publisher's CPU seconds per minute and
// resident memory per 10 s window (median, minimum, maximum), its peak
// memory, and how many messages it published for how many informer events.
func BenchmarkPublisher(b *testing.B) {
	for _, bc := range []struct{ fleets, hot int }{{1000, 1000}, {10000, 10000}, {1000, 10}} {
		b.Run(fmt.Sprintf("fleets=%d/changing=%d", bc.fleets, bc.hot), func(b *testing.B) { benchmarkPublisher(b, bc.fleets, bc.hot) })
	}
}

// benchFleets are namespaces filled with n fleets, kept across the runs of
// a benchmark (creating 10 000 fleets takes a while).
var benchFleets = map[int]*kubetest.Namespace{}

func benchmarkPublisher(b *testing.B, fleets, hot int) {
	c := controlplane.Require(b, cp, cpErr)
	emulator.Host(b, emulator.PubSubHostEnv)
	ctx := b.Context()
	topic := "bench-" + randomHex(b, 4)
	require.NoError(b, pubsubtopic.EnsureTopic(ctx, emulator.PubSub(b, project), emulator.SchemaClient(b), topic, "fleet-event"))

	start := time.Now()
	ns := benchFleets[fleets]
	if ns != nil {
		ns = ns.For(b)
	} else {
		ns = kubetest.NewNamespace(b, c)
		parallel(fleets, 8, func(i int) { ns.CreateFleet(ns.Name, fmt.Sprintf("f%05d", i), nil) })
		benchFleets[fleets] = ns
		b.Logf("created %d fleets in %v", fleets, time.Since(start).Round(time.Millisecond))
		start = time.Now()
	}

	port, err := proc.FreePort()
	require.NoError(b, err)
	bin := publisherBinary(b) // built once, before the clock starts
	// Start-up is the process's: from its start to every fleet published.
	start = time.Now()
	pub, err := proc.Start("publisher", bin, proc.Options{
		Args: []string{"--cluster=bench", "--project=" + project, "--topic=" + topic,
			"--namespaces=" + ns.Name, "--lease-namespace=" + ns.Name,
			"--kubeconfig=" + c.Kubeconfig, "--metrics-addr=127.0.0.1:" + port,
			"--min-interval=1s", "--snapshot-interval=30s", "--log-level=WARNING"},
		Env:    []string{"FLEETCAST_ID=bench"},
		Stdout: os.Stderr, Stderr: os.Stderr,
		Grace: time.Minute, // it flushes what is pending
	})
	require.NoError(b, err)
	b.Cleanup(pub.Stop)
	metricsURL := "http://127.0.0.1:" + port + "/metrics"
	// Ready once every fleet has been published under its term.
	require.NoError(b, pub.WaitReady(b.Context(), 5*time.Minute, func() bool {
		return metric(b, metricsURL, `fleetcast_publisher_publishes_total{kind="FLEET_UPSERT",result="ok"}`) >= float64(fleets)
	}), "the publisher publishing %d fleets", fleets)
	startup := time.Since(start)
	b.Logf("publisher started, synced and published %d fleets in %v", fleets, startup.Round(time.Millisecond))

	pub0 := metricSum(b, metricsURL, "fleetcast_publisher_publishes_total{")
	inf0 := metricSum(b, metricsURL, "fleetcast_publisher_informer_events_total{")
	b.ResetTimer()
	// The load: 100 changes per second on a goroutine of its own, while
	// the publisher's CPU time and memory are sampled every window.
	changes := int(publisherLoad.Seconds() * 100)
	done := make(chan struct{})
	var loadTime time.Duration
	go func() {
		defer close(done)
		start := time.Now()
		defer func() { loadTime = time.Since(start) }()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := range changes {
			<-tick.C
			ns.SetStatus(ns.Name, fmt.Sprintf("f%05d", rand.IntN(hot)), map[string]any{"readyReplicas": int64(i % 4), "allocations": int64(i)})
		}
	}()
	var cpuPerMinute, rssMiB []float64
	t0, cpu0 := time.Now(), cpuTime(b, pub.Pid())
	for loading := true; loading; {
		select {
		case <-done:
			loading = false
		case <-time.After(publisherWindow - time.Since(t0)):
		}
		if time.Since(t0) < publisherWindow/2 {
			continue // the load's last, partial window is too short to rate
		}
		cpu := cpuTime(b, pub.Pid())
		cpuPerMinute = append(cpuPerMinute, (cpu-cpu0).Seconds()/time.Since(t0).Minutes())
		rss, _ := memory(b, pub.Pid())
		rssMiB = append(rssMiB, rss/(1<<20))
		t0, cpu0 = time.Now(), cpu
	}
	letTimePass(1500 * time.Millisecond) // the trailing publishes of the last changes
	b.StopTimer()
	published := metricSum(b, metricsURL, "fleetcast_publisher_publishes_total{") - pub0
	informer := metricSum(b, metricsURL, "fleetcast_publisher_informer_events_total{") - inf0
	_, hwm := memory(b, pub.Pid())

	reportSpread(b, "cpu", "s/min", cpuPerMinute)
	reportSpread(b, "rss", "MiB", rssMiB)
	b.ReportMetric(hwm/(1<<20), "peak-rss-MiB")
	b.ReportMetric(informer, "informer-events")
	b.ReportMetric(published, "published")
	b.ReportMetric(published/max(informer, 1), "msgs/event")
	b.ReportMetric(float64(changes), "changes")
	b.ReportMetric(float64(changes)/loadTime.Seconds(), "changes/s")
	b.ReportMetric(startup.Seconds(), "startup-s")
}

var (
	publisherBinOnce sync.Once
	publisherBin     string
	publisherBinErr  error
)

func publisherBinary(tb testing.TB) string {
	tb.Helper()
	publisherBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fleetcast-bench")
		if err != nil {
			publisherBinErr = err
			return
		}
		publisherBin = filepath.Join(dir, "fleetcast-publisher")
		publisherBinErr = proc.Build(context.Background(), "", "github.com/fleetcast/fleetcast/cmd/fleetcast-publisher", publisherBin)
	})
	require.NoError(tb, publisherBinErr)
	return publisherBin
}

func parallel(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// metric returns the value of the sample named exactly (with labels).
func metric(tb testing.TB, url, sample string) float64 {
	tb.Helper()
	return scrape(tb, url, func(line string) bool { return strings.HasPrefix(line, sample+" ") })
}

// metricSum sums the samples whose line starts with prefix.
func metricSum(tb testing.TB, url, prefix string) float64 {
	tb.Helper()
	return scrape(tb, url, func(line string) bool { return strings.HasPrefix(line, prefix) })
}

func scrape(tb testing.TB, url string, match func(string) bool) float64 {
	tb.Helper()
	resp, err := testhttp.Client.Get(url)
	if err != nil {
		return 0 // not serving yet
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !match(line) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(tb, err, line)
		sum += v
	}
	return sum
}

// cpuTime is the user plus system CPU time of a process (Linux).
func cpuTime(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(tb, err)
	// Fields after the command name, which is in parentheses.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	require.NoError(tb, err)
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	require.NoError(tb, err)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond
}

// memory returns the resident set size and its peak, in bytes (Linux).
func memory(tb testing.TB, pid int) (rss, hwm float64) {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(tb, err)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb * 1024
		case "VmHWM:":
			hwm = kb * 1024
		}
	}
	return rss, hwm
}
