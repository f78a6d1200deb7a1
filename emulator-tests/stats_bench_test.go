package emulatortests

import (
	"math"
	"slices"
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
