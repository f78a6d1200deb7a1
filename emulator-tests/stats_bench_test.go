package emulatortests

import (
	"math"
	"runtime/metrics"
	"slices"
	"syscall"
	"testing"
	"time"
)

// millis converts durations to milliseconds for reporting.
func millis(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v.Microseconds()) / 1000
	}
	return out
}

// quantile returns the q-quantile (0 ≤ q ≤ 1) of v by the nearest-rank
// method; v is sorted in place.
func quantile(v []float64, q float64) float64 {
	slices.Sort(v)
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(i, 0), len(v)-1)]
}

// reportDist reports a distribution's median, p95, p99, minimum and
// maximum as metrics named name-p50 and so on, in unit.
func reportDist(b *testing.B, name, unit string, v []float64) {
	b.Helper()
	if len(v) == 0 {
		b.Fatalf("%s: no samples", name)
	}
	b.ReportMetric(quantile(v, 0.5), name+"-p50-"+unit)
	b.ReportMetric(quantile(v, 0.95), name+"-p95-"+unit)
	b.ReportMetric(quantile(v, 0.99), name+"-p99-"+unit)
	b.ReportMetric(v[0], name+"-min-"+unit)
	b.ReportMetric(v[len(v)-1], name+"-max-"+unit)
}

// reportSpread reports the median, minimum and maximum of a few rounds'
// results as name-median, name-min and name-max, in unit.
func reportSpread(b *testing.B, name, unit string, v []float64) {
	b.Helper()
	if len(v) == 0 {
		b.Fatalf("%s: no samples", name)
	}
	b.ReportMetric(quantile(v, 0.5), name+"-median-"+unit)
	b.ReportMetric(v[0], name+"-min-"+unit)
	b.ReportMetric(v[len(v)-1], name+"-max-"+unit)
}

// cpuMeter starts measuring the CPU time this process takes (user and
// system); the function it returns gives the cores used on average since.
func cpuMeter() func() float64 {
	used := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			panic(err) // RUSAGE_SELF with a valid pointer cannot fail
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start, cpu0 := time.Now(), used()
	return func() float64 { return float64(used()-cpu0) / float64(time.Since(start)) }
}

// gcMeter starts counting the garbage collections of this process; the
// function it returns gives how many a second since.
func gcMeter() func() float64 {
	sample := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	cycles := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	start, n0 := time.Now(), cycles()
	return func() float64 { return float64(cycles()-n0) / time.Since(start).Seconds() }
}
