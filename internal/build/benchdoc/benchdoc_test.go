package benchdoc

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// record is what make bench writes before a run's output.
const record = `fleetcast-commit: 0123456789abcdef0123456789abcdef01234567
fleetcast-modified: false
machine-date: 2026-12-03
machine-cpu: AMD EPYC
machine-memory: 24 GiB
machine-os: Debian GNU/Linux 12 (bookworm)
machine-go: 1.26.8
machine-cloud-sdk: 528.0.0
machine-firestore-emulator: 1.19.9
machine-pubsub-emulator: 0.8.20
machine-kube-apiserver: v1.34.1
machine-etcd: v3.6.5
machine-cores: 2
`

const sample = record + `goos: linux
goarch: amd64
pkg: github.com/fleetcast/fleetcast/firestoredb
cpu: AMD EPYC
BenchmarkApply/changed/sequential-2         	    1000	   1901234 ns/op	       526.0 events/s	         1.000 writes/event
BenchmarkApply/changed/sequential-2         	    1000	   1801234 ns/op	       511.0 events/s	         1.000 writes/event
BenchmarkApply/changed/sequential-2         	    1000	   1701234 ns/op	       600.0 events/s	         1.000 writes/event
--- BENCH: BenchmarkApply
    store_test.go:1: a log line 12 34
PASS
ok  	github.com/fleetcast/fleetcast/firestoredb	12.3s
BenchmarkQueryFleets/docs=1000-2   	       1	4000000000 ns/op	        18.00 latency-p50-ms	       200.0 requests
`

func TestParse(t *testing.T) {
	r, err := Parse(strings.NewReader(sample))
	require.NoError(t, err)
	assert.Equal(t, "AMD EPYC", r.Header["cpu"])
	assert.Len(t, r.Results, 2)
	assert.Equal(t, Source{Commit: "0123456789abcdef0123456789abcdef01234567"}, r.Source)
	assert.Equal(t, "0123456", r.Source.Short())
	assert.Equal(t, Machine{Date: "2026-12-03", CPU: "AMD EPYC", OS: "Debian GNU/Linux 12 (bookworm)", Go: "1.26.8", Memory: "24 GiB",
		CloudSDK: "528.0.0", FirestoreEmulator: "1.19.9", PubSubEmulator: "0.8.20", KubeAPIServer: "v1.34.1", Etcd: "v3.6.5", Cores: 2}, r.Machine)

	med, err := r.Median("BenchmarkApply/changed/sequential", "events/s")
	require.NoError(t, err)
	assert.Equal(t, 526.0, med)
	lo, hi, err := r.Spread("BenchmarkApply/changed/sequential", "events/s")
	require.NoError(t, err)
	assert.Equal(t, []float64{511, 600}, []float64{lo, hi})
	n, err := r.Count("BenchmarkApply/changed/sequential")
	require.NoError(t, err)
	assert.Equal(t, 3, n)

	med, err = r.Median("BenchmarkQueryFleets/docs=1000", "latency-p50-ms")
	require.NoError(t, err)
	assert.Equal(t, 18.0, med)
	med, err = r.Median("BenchmarkQueryFleets/docs=1000", "iterations")
	require.NoError(t, err)
	assert.Equal(t, 1.0, med)
}

func TestParseErrors(t *testing.T) {
	_, err := Parse(strings.NewReader("PASS\nok x 1s\n"))
	assert.ErrorContains(t, err, "no benchmark results")
	_, err = Parse(strings.NewReader("BenchmarkX-2  1  100 ns/op  5\n"))
	assert.ErrorContains(t, err, "line 1: BenchmarkX: want value-unit pairs")
	_, err = Parse(strings.NewReader("BenchmarkX-2  1  abc ns/op\n"))
	assert.ErrorContains(t, err, `value "abc" of ns/op`)
	_, err = Parse(strings.NewReader("BenchmarkX-2  1  100 ns/op\n"))
	assert.ErrorContains(t, err, "the run does not record fleetcast-commit")
	_, err = Parse(strings.NewReader(strings.Replace(record, "machine-cores: 2\n", "", 1) + "BenchmarkX-2  1  100 ns/op\n"))
	assert.ErrorContains(t, err, "the run does not record machine-cores")
	_, err = Parse(strings.NewReader(strings.Replace(record, "0123456789abcdef", "g123", 1) + "BenchmarkX-2  1  100 ns/op\n"))
	assert.ErrorContains(t, err, "is not a full commit hash")
	_, err = Parse(strings.NewReader(record + record + "BenchmarkX-2  1  100 ns/op\n"))
	assert.ErrorContains(t, err, "fleetcast-commit recorded twice")
	// A program's log lines that look alike are no record.
	r, err := Parse(strings.NewReader(record + "fleetcast-query: stopping: streams end\nfleetcast-query: stopping: streams end\nBenchmarkX-2  1  100 ns/op\n"))
	require.NoError(t, err)
	assert.Equal(t, "0123456", r.Source.Short())
}

func TestMissingMetricsAreErrors(t *testing.T) {
	r, err := Parse(strings.NewReader(sample))
	require.NoError(t, err)
	_, err = r.Median("BenchmarkNope", "events/s")
	assert.ErrorContains(t, err, "no benchmark BenchmarkNope")
	_, err = r.Median("BenchmarkApply/changed/sequential", "fleets/s")
	assert.ErrorContains(t, err, `reported no "fleets/s"`)
	// The document needs many more benchmarks than the sample has.
	var b strings.Builder
	err = Render(&b, r)
	assert.ErrorContains(t, err, "the run has no benchmark BenchmarkBill")
}

func TestMedianOfEvenCount(t *testing.T) {
	r, err := Parse(strings.NewReader(record + "BenchmarkX  1  1 u\nBenchmarkX  1  4 u\nBenchmarkX  1  2 u\nBenchmarkX  1  10 u\n"))
	require.NoError(t, err)
	med, err := r.Median("BenchmarkX", "u")
	require.NoError(t, err)
	assert.Equal(t, 3.0, med)
}

func TestNum(t *testing.T) {
	for _, tc := range []struct {
		v        float64
		decimals int
		want     string
	}{
		{0, 0, "0"},
		{999, 0, "999"},
		{1000, 0, "1 000"},
		{1312.4, 0, "1 312"},
		{12345.678, 1, "12 345.7"},
		{1234567, 0, "1 234 567"},
		{-4321.5, 1, "-4 321.5"},
		{0.0421, 3, "0.042"},
	} {
		assert.Equal(t, tc.want, Num(tc.v, tc.decimals), "%v", tc.v)
	}
}

// TestRenderRecordedRun renders the output of a real make bench run
// (testdata/bench.txt, the run behind BENCHMARKS.md): every metric the
// document names must be in it, and leaving one benchmark out must fail.
func TestRenderRecordedRun(t *testing.T) {
	raw, err := os.ReadFile("testdata/bench.txt")
	require.NoError(t, err)
	r, err := Parse(bytes.NewReader(raw))
	require.NoError(t, err)
	var doc strings.Builder
	require.NoError(t, Render(&doc, r))
	assert.NotContains(t, doc.String(), "<no value>")
	for _, section := range []string{"## Side by side", "## 1. Coalescing", "## 2. End-to-end latency",
		"## 3. Ingest throughput", "## 4. Publisher cost", "## 5. Queries"} {
		assert.Contains(t, doc.String(), section)
	}

	var without bytes.Buffer
	for _, line := range bytes.SplitAfter(raw, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("BenchmarkReconcile")) {
			without.Write(line)
		}
	}
	r, err = Parse(&without)
	require.NoError(t, err)
	err = Render(&doc, r)
	assert.ErrorContains(t, err, "the run has no benchmark BenchmarkReconcile")
}

// TestRecordRoundTrips: what Record writes, Parse reads back.
func TestRecordRoundTrips(t *testing.T) {
	src := Source{Commit: strings.Repeat("ab", 20), Modified: true}
	m := Machine{Date: "2026-12-03", CPU: "cpu", OS: "os", Go: "1.26", Memory: "8 GiB", CloudSDK: "1", FirestoreEmulator: "2",
		PubSubEmulator: "3", KubeAPIServer: "unknown", Etcd: "unknown", Cores: 4}
	var b strings.Builder
	require.NoError(t, Record(&b, src, m))
	r, err := Parse(strings.NewReader(b.String() + "BenchmarkX-4  1  100 ns/op\n"))
	require.NoError(t, err)
	assert.Equal(t, src, r.Source)
	assert.Equal(t, m, r.Machine)
	m.CPU = "two\nlines"
	assert.ErrorContains(t, Record(&b, src, m), "spans lines")
}

func TestSci(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 0.25: "0.250", 9999: "9 999", 12345: "12.3 k", 2.63e6: "2.63 M", 164e9: "164 G", 1.5e12: "1.50 T"} {
		assert.Equal(t, want, sci(v), "%v", v)
	}
}

// TestRunsOrderByTheirParameter: a sweep's benchmarks come in the order of
// their parameter's value, not of their names.
func TestRunsOrderByTheirParameter(t *testing.T) {
	r, err := Parse(strings.NewReader(record + "BenchmarkC/churn=10-2  1  1 u\nBenchmarkC/churn=2-2  1  1 u\nBenchmarkC/churn=1.5-2  1  1 u\nBenchmarkD  1  1 u\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"BenchmarkC/churn=1.5", "BenchmarkC/churn=2", "BenchmarkC/churn=10"}, r.Runs("BenchmarkC/"))
	assert.Empty(t, r.Runs("BenchmarkE"))
}

// TestBenchmarksMdIsItsRecordedRun: the repository's BENCHMARKS.md is
// exactly what the renderer makes of the run make bench kept
// (testdata/bench.txt), and names the commit that run measured: a
// document edited by hand, rendered from another run, or left behind by a
// change of its template fails here.
func TestBenchmarksMdIsItsRecordedRun(t *testing.T) {
	raw, err := os.ReadFile("testdata/bench.txt")
	require.NoError(t, err)
	r, err := Parse(bytes.NewReader(raw))
	require.NoError(t, err)
	doc, err := os.ReadFile("../../../BENCHMARKS.md")
	require.NoError(t, err)
	m := regexp.MustCompile("one run of `make bench` at `([0-9a-f]+)`").FindSubmatch(doc)
	require.NotNil(t, m, "BENCHMARKS.md names the commit its run measured")
	assert.Equal(t, r.Source.Short(), string(m[1]), "BENCHMARKS.md's commit is its recorded run's")
	var want strings.Builder
	require.NoError(t, Render(&want, r))
	if want.String() != string(doc) {
		t.Errorf("BENCHMARKS.md is not what its recorded run renders to (go run ./internal/cmd/benchdoc -o BENCHMARKS.md internal/build/benchdoc/testdata/bench.txt), first difference at byte %d", firstDiff(want.String(), string(doc)))
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
