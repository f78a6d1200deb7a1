// Package benchdoc turns the output of one `make bench` run (go test -bench
// text) into BENCHMARKS.md: the numbers of every benchmark the document
// names, with the machine they were measured on. A metric the document
// needs but the run lacks is an error, never a blank.
package benchdoc

import (
	"bufio"
	"cmp"
	_ "embed"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/fleetcast/fleetcast/internal/build/bill"
)

// Run is what one benchmark run reported.
type Run struct {
	// Header holds the run's goos, goarch, cpu and pkg lines (the last
	// of each).
	Header map[string]string
	// Results maps a benchmark's name, without its -GOMAXPROCS suffix, to
	// one map of unit → value per result line (one per -count).
	Results map[string][]map[string]float64
	// Source is the commit the run measured, and whether the tree had
	// changes it does not hold (its RecordSource lines).
	Source Source
	// Machine is where it ran (its RecordMachine lines).
	Machine Machine
}

// Source is the code a run measured.
type Source struct {
	// Commit is the full hash of the checked-out commit.
	Commit string
	// Modified: the tree had uncommitted changes to tracked files.
	Modified bool
}

// Short is the commit's abbreviated hash, as the document names it.
func (s Source) Short() string { return s.Commit[:min(len(s.Commit), 7)] }

var (
	resultLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.+)$`)
	headerLine = regexp.MustCompile(`^(goos|goarch|cpu|pkg): (.*)$`)
	// recordLine is one of Record's lines; a program's log line that
	// begins alike (fleetcast-query: …) is none.
	recordLine = regexp.MustCompile(`^(fleetcast)-(commit|modified): (.*)$|^(machine)-([a-z-]+): (.*)$`)
	commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// Parse reads go test -bench output. Lines that are not results or headers
// (logs, PASS, ok) are ignored; a malformed result line is an error, and
// so is a run that does not say which commit it measured and where
// (RecordSource, RecordMachine).
func Parse(r io.Reader) (*Run, error) {
	run := &Run{Header: map[string]string{}, Results: map[string][]map[string]float64{}}
	records := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if m := headerLine.FindStringSubmatch(line); m != nil {
			run.Header[m[1]] = m[2]
			continue
		}
		if m := recordLine.FindStringSubmatch(line); m != nil {
			key, v := m[1]+"-"+m[2], m[3]
			if m[1] == "" {
				key, v = m[4]+"-"+m[5], m[6]
			}
			if _, dup := records[key]; dup {
				return nil, fmt.Errorf("line %d: %s recorded twice: one run per file", n, key)
			}
			records[key] = v
			continue
		}
		m := resultLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		fields := strings.Fields(m[3])
		if len(fields)%2 != 0 {
			return nil, fmt.Errorf("line %d: %s: want value-unit pairs after the iteration count", n, m[1])
		}
		iterations, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: iterations %q: %w", n, m[1], m[2], err)
		}
		metrics := map[string]float64{"iterations": iterations}
		for i := 0; i < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: value %q of %s: %w", n, m[1], fields[i], fields[i+1], err)
			}
			metrics[fields[i+1]] = v
		}
		run.Results[m[1]] = append(run.Results[m[1]], metrics)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(run.Results) == 0 {
		return nil, fmt.Errorf("no benchmark results in the input")
	}
	if err := run.readRecords(records); err != nil {
		return nil, err
	}
	return run, nil
}

// values returns a metric's value in every result line of a benchmark.
func (r *Run) values(bench, unit string) ([]float64, error) {
	lines, ok := r.Results[bench]
	if !ok {
		return nil, fmt.Errorf("the run has no benchmark %s", bench)
	}
	var out []float64
	for _, l := range lines {
		v, ok := l[unit]
		if !ok {
			return nil, fmt.Errorf("benchmark %s reported no %q", bench, unit)
		}
		out = append(out, v)
	}
	return out, nil
}

// Median is the median of a metric over a benchmark's result lines.
func (r *Run) Median(bench, unit string) (float64, error) {
	v, err := r.values(bench, unit)
	if err != nil {
		return 0, err
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], nil
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, nil
}

// Spread is a metric's minimum and maximum over a benchmark's result lines.
func (r *Run) Spread(bench, unit string) (lo, hi float64, err error) {
	v, err := r.values(bench, unit)
	if err != nil {
		return 0, 0, err
	}
	return slices.Min(v), slices.Max(v), nil
}

// Runs are the benchmarks whose names start with prefix, ordered by the
// number that follows it (churn=1, churn=2, churn=10), then by name.
func (r *Run) Runs(prefix string) []string {
	var out []string
	for name := range r.Results {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	param := func(name string) float64 {
		rest := strings.TrimPrefix(name, prefix)
		_, v, _ := strings.Cut(rest, "=")
		v, _, _ = strings.Cut(v, "/")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return math.Inf(1)
		}
		return f
	}
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(param(a), param(b)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return out
}

// Count is how many result lines a benchmark has.
func (r *Run) Count(bench string) (int, error) {
	lines, ok := r.Results[bench]
	if !ok {
		return 0, fmt.Errorf("the run has no benchmark %s", bench)
	}
	return len(lines), nil
}

// Num formats a number for a table: groups of three digits separated by a
// space (1 312, 10 000), with the decimals asked for.
func Num(v float64, decimals int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteString(" ")
		}
		b.WriteRune(c)
	}
	out := b.String()
	if frac != "" {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}

//go:embed BENCHMARKS.md.tmpl
var docTemplate string

// Render writes the document for run, on the machine and at the commit it
// recorded.
func Render(w io.Writer, run *Run) error {
	funcs := template.FuncMap{
		"median": run.Median,
		"min": func(bench, unit string) (float64, error) {
			lo, _, err := run.Spread(bench, unit)
			return lo, err
		},
		"max": func(bench, unit string) (float64, error) {
			_, hi, err := run.Spread(bench, unit)
			return hi, err
		},
		"count":     run.Count,
		"num":       Num,
		"div":       func(a, b float64) float64 { return a / b },
		"mul":       func(a, b float64) float64 { return a * b },
		"add":       func(a, b float64) float64 { return a + b },
		"bill":      func(bench string) (*Bills, error) { return bills(run, bench) },
		"usd":       func(v float64) string { return "$" + Num(v, 2) },
		"sci":       sci,
		"float":     func(v int) float64 { return float64(v) },
		"sub":       func(a, b int) int { return a - b },
		"dur":       func(d time.Duration) float64 { return d.Seconds() },
		"list":      func(v ...string) []string { return v },
		"runs":      run.Runs,
		"hasPrefix": strings.HasPrefix,
	}
	t, err := template.New("BENCHMARKS.md").Funcs(funcs).Option("missingkey=error").Parse(docTemplate)
	if err != nil {
		return fmt.Errorf("parse the document's template: %w", err)
	}
	var b strings.Builder
	if err := t.Execute(&b, map[string]any{"Machine": run.Machine, "Source": run.Source, "Header": run.Header}); err != nil {
		return err
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// Bills are both systems' monthly bills for the reference deployment,
// from the units a run of the bill's benchmark measured.
type Bills struct {
	Deployment          bill.Deployment
	Prices              bill.PriceTable
	Units               bill.Measured
	Fleetcast, Baseline bill.Bill
	// Fair is the baseline with fleetcast's read side (bill.FairBaseline).
	Fair bill.Bill
	// SpansPerTracedUpsert is bill.SpansPerTracedUpsert.
	SpansPerTracedUpsert int
	// Regional are the bills with Firestore in a regional location.
	Regional struct {
		Prices                    bill.PriceTable
		Fleetcast, Baseline, Fair bill.Bill
	}
	// Components sums each component's lines, the three bills side by
	// side, in the order they first appear.
	Components []Component
	// TenTimes are the bills of the deployment ten times the reference
	// (bill.Deployment.Scaled), from the same units.
	TenTimes struct {
		Deployment                bill.Deployment
		Fleetcast, Baseline, Fair bill.Bill
		Components                []Component
	}
}

// Component is one component's monthly cost in the three bills.
type Component struct {
	Name                      string
	Fleetcast, Baseline, Fair float64
}

func bills(run *Run, bench string) (*Bills, error) {
	m, err := bill.FromMetrics(func(name string) (float64, error) { return run.Median(bench, name) })
	if err != nil {
		return nil, err
	}
	b := &Bills{Deployment: bill.Reference, Prices: bill.Prices, Units: m,
		Fleetcast:            bill.Fleetcast(bill.Reference, m.Fleetcast, bill.Prices),
		Baseline:             bill.Baseline(bill.Reference, m.Baseline, bill.Prices),
		SpansPerTracedUpsert: bill.SpansPerTracedUpsert}
	b.Regional.Prices = bill.Prices.Regional()
	b.Regional.Fleetcast = bill.Fleetcast(bill.Reference, m.Fleetcast, b.Regional.Prices)
	b.Regional.Baseline = bill.Baseline(bill.Reference, m.Baseline, b.Regional.Prices)
	b.Fair = bill.FairBaseline(bill.Reference, m, bill.Prices)
	b.TenTimes.Deployment = bill.Reference.Scaled(10)
	b.TenTimes.Fleetcast = bill.Fleetcast(b.TenTimes.Deployment, m.Fleetcast, bill.Prices)
	b.TenTimes.Baseline = bill.Baseline(b.TenTimes.Deployment, m.Baseline, bill.Prices)
	b.TenTimes.Fair = bill.FairBaseline(b.TenTimes.Deployment, m, bill.Prices)
	b.Regional.Fair = bill.FairBaseline(bill.Reference, m, b.Regional.Prices)
	b.Components = components(b.Fleetcast, b.Fair, b.Baseline)
	b.TenTimes.Components = components(b.TenTimes.Fleetcast, b.TenTimes.Fair, b.TenTimes.Baseline)
	return b, nil
}

// components sums each component's lines of the three bills, side by side,
// in the order they first appear.
func components(fleetcast, fair, baseline bill.Bill) []Component {
	var out []Component
	index := map[string]int{}
	add := func(lines []bill.Line, to func(*Component) *float64) {
		for _, l := range lines {
			i, ok := index[l.Component]
			if !ok {
				i = len(out)
				index[l.Component] = i
				out = append(out, Component{Name: l.Component})
			}
			*to(&out[i]) += l.Cost
		}
	}
	add(fleetcast.Lines, func(c *Component) *float64 { return &c.Fleetcast })
	add(fair.Lines, func(c *Component) *float64 { return &c.Fair })
	add(baseline.Lines, func(c *Component) *float64 { return &c.Baseline })
	return out
}

// sci formats a large quantity for a table: three significant digits
// with a metric multiplier (2.63 M, 164 G), or the number itself below
// 10 000.
func sci(v float64) string {
	for _, u := range []struct {
		div    float64
		suffix string
	}{{1e12, " T"}, {1e9, " G"}, {1e6, " M"}, {1e3, " k"}} {
		if math.Abs(v) >= u.div && (u.div != 1e3 || math.Abs(v) >= 1e4) {
			x := v / u.div
			decimals := 2
			if math.Abs(x) >= 100 {
				decimals = 0
			} else if math.Abs(x) >= 10 {
				decimals = 1
			}
			return Num(x, decimals) + u.suffix
		}
	}
	if v != math.Trunc(v) {
		return Num(v, 3)
	}
	return Num(v, 0)
}
