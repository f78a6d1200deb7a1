package bill

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInstanceTimeBillsBusyPeriodsRoundedUp(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name        string
		spans       [][2]int // begin, end in ms
		concurrency int
		billed      time.Duration
		instances   int
	}{
		{"one short request bills the rounding", [][2]int{{0, 3}}, 8, 100 * time.Millisecond, 1},
		{"an instant request still bills the rounding", [][2]int{{5, 5}}, 8, 100 * time.Millisecond, 1},
		{"a long request rounds up", [][2]int{{0, 250}}, 8, 300 * time.Millisecond, 1},
		{"overlapping requests share one period", [][2]int{{0, 30}, {20, 50}, {40, 90}}, 8, 100 * time.Millisecond, 1},
		{"requests apart are periods apart", [][2]int{{500, 510}, {0, 10}}, 8, 200 * time.Millisecond, 1},
		{"a period within the last one's rounding continues its billed time", [][2]int{{0, 60}, {60, 120}}, 8, 160 * time.Millisecond, 1},
		{"short periods close together bill the union of their roundings", [][2]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {150, 160}}, 8, 206 * time.Millisecond, 1},
		{"beyond the concurrency a second instance bills too", [][2]int{{0, 50}, {10, 50}, {20, 50}}, 2, 200 * time.Millisecond, 2},
		{"one at a time: every overlap is an instance", [][2]int{{0, 250}, {100, 150}}, 1, 400 * time.Millisecond, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var spans []Span
			for _, s := range tc.spans {
				spans = append(spans, Span{at(s[0]), at(s[1])})
			}
			billed, instances := InstanceTime(spans, tc.concurrency, 100*time.Millisecond)
			assert.Equal(t, tc.billed, billed)
			assert.Equal(t, tc.instances, instances)
		})
	}
}

func TestSuperposeKeepsEachCopyInTheWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var rec Spans
	for i := range 100 {
		rec.Add(t0.Add(time.Duration(i)*time.Second), t0.Add(time.Duration(i)*time.Second+20*time.Millisecond))
	}
	rec.Add(t0.Add(-time.Second), t0) // before the window
	spans := rec.Within(t0, t0.Add(100*time.Second))
	require.Len(t, spans, 100)
	all := Superpose(spans, spans[:50], t0, 100*time.Second, 9, rand.New(rand.NewPCG(1, 2)))
	require.Len(t, all, 100+9*50, "the first whole, nine copies of the others")
	for _, s := range all {
		assert.False(t, s.Begin.Before(t0) || !s.Begin.Before(t0.Add(100*time.Second)), "begins in the window")
		assert.Equal(t, 20*time.Millisecond, s.End.Sub(s.Begin), "keeps its length")
	}
	one, _ := InstanceTime(spans, 8, 100*time.Millisecond)
	ten, _ := InstanceTime(all, 8, 100*time.Millisecond)
	assert.Equal(t, 10*time.Second, one, "a request a second: each its own period")
	assert.Greater(t, ten, 3*one, "sources at random offsets rarely share a period")
	assert.LessOrEqual(t, ten, 550*100*time.Millisecond, "at most a rounding per request")
}

func units() Measured {
	return Measured{
		Fleetcast: FleetcastUnits{
			MsgsPerHotFleetSecond: 1, MsgsPerSpreadChange: 1, RefreshesPerFleetInterval: 0.5, PartsPerSnapshot: 1,
			BilledBytesPerUpsert: 1000, BilledBytesPerPart: 20000, ApplyReadsPerUpsert: 1, WritesPerChange: 1,
			ReconcileReadsPerPart: 1, ClusterReadsPerPart: 1, ClusterWritesPerPart: 1, FullReconcileEvery: 240,
			BilledSecondsPerInvocation: 0.1, IngestInstances: 1, LogBytesPerInvocation: 300, ExcludedLogBytesPerInvocation: 250,
			ViewSyncReadsPerSecond: 4, ViewListenReadsPerWrite: 2, AnnouncementsPerWrite: 1.1, BilledBytesPerAnnouncement: 1200,
		},
		Baseline: BaselineUnits{MsgsPerChange: 1, MsgsPerFleetRepublish: 1, BilledBytesPerMsg: 1000, WritesPerMsg: 1,
			BilledSecondsPerInvocation: 0.1, LogBytesPerInvocation: 300, ReadsPerQuery: 100, BilledSecondsPerQuery: 0.1},
	}
}

func line(t *testing.T, b Bill, component, item string) Line {
	t.Helper()
	for _, l := range b.Lines {
		if l.Component == component && l.Item == item {
			return l
		}
	}
	require.Failf(t, "no line", "%s has no line %s: %s", b.System, component, item)
	return Line{}
}

// functions is the reference deployment in the module's default modes:
// the ingest and the query side as functions, billed by request.
func functions() Deployment {
	d := Reference
	d.IngestInstanceBilled, d.QueryInstanceBilled = false, false
	return d
}

func TestFleetcastBillFollowsTheDeployment(t *testing.T) {
	u := units().Fleetcast
	b := Fleetcast(functions(), u, Prices)
	month := Month.Seconds()
	// 2 hot fleets × 1 msg/s, 60 spread changes/s, 10 000 fleets × 0.5
	// refreshes per 600 s, 10 clusters × 1 part per 30 s.
	upserts := 2 + 60 + 10000*0.5/600.0
	parts := 10 / 30.0
	assert.InDelta(t, (upserts*1000+parts*20000)*month/(1<<40), line(t, b, "Pub/Sub", "publish").Quantity, 1e-9)
	assert.InDelta(t, (upserts+parts)*month, line(t, b, "Cloud Run requests", "ingest function").Quantity, 1e-3)
	assert.InDelta(t, (upserts+parts)*month*0.1, line(t, b, "Cloud Run instance time", "ingest function (1 vCPU + 0.5 GiB)").Quantity, 1e-3)
	assert.InDelta(t, 62*month, line(t, b, "Firestore writes", "ingest: changes").Quantity, 1e-3)
	assert.InDelta(t, parts*(1+1000/240.0)*month, line(t, b, "Firestore reads", "ingest: snapshot reconcile").Quantity, 1e-3)
	writes := 62 + parts
	// The view's listener follows the fleets, not the cluster documents;
	// it loads every fleet every 6 h, and checks each of the 10 clusters
	// (1 000 fleets: one read) every 5 min.
	assert.InDelta(t, 2*(4+2*62+10000/21600.0+10/300.0)*month, line(t, b, "Firestore reads", "query side's views (queries and streams)").Quantity, 1e-3)
	// The ingest's lines, less those the module excludes; what storing
	// them would add.
	assert.InDelta(t, (upserts+parts)*50*month/(1<<30), line(t, b, "Cloud Logging", "ingest").Quantity, 1e-9)
	assert.InDelta(t, (upserts+parts)*250*month/(1<<30), b.Options[len(b.Options)-1].Quantity, 1e-9)
	// The query side billed by instance: its 2 instances every second
	// at the lower price, no request fee; less than the function's.
	byInstance := b.Options[len(b.Options)-2]
	assert.InDelta(t, 2*month*(0.000018+0.5*0.000002), byInstance.Cost, 1e-6)
	assert.Less(t, byInstance.Cost, line(t, b, "Cloud Run instance time", "query function (1 vCPU + 0.5 GiB)").Cost+
		line(t, b, "Cloud Run requests", "query function").Cost)
	assert.InDelta(t, 2*month*(0.000024+0.5*0.0000025), line(t, b, "Cloud Run instance time", "query function (1 vCPU + 0.5 GiB)").Cost, 1e-6)
	// The ingest billed by instance: the one instance busy at once, all
	// month.
	assert.InDelta(t, month*(0.000018+0.5*0.000002), b.Options[len(b.Options)-3].Cost, 1e-6)
	// The change feed: each fleet write announced 1.1 times, published
	// once and delivered to each of the 2 query instances.
	feed := 62 * 1.1 * 1200 * month / (1 << 40)
	assert.InDelta(t, feed, line(t, b, "Pub/Sub", "change feed: publish").Quantity, 1e-9)
	assert.InDelta(t, 2*feed, line(t, b, "Pub/Sub", "change feed: delivery to each query instance").Quantity, 1e-9)
	assert.InDelta(t, writes*month*0.06/1e5, b.Matchmaker.Cost, 1e-6)

	sum := 0.0
	for _, l := range b.Lines {
		assert.InDelta(t, l.Quantity*l.Price, l.Cost, 1e-9, l.Item)
		assert.NotEmpty(t, l.Formula, l.Item)
		sum += l.Cost
	}
	assert.InDelta(t, sum, b.Total(), 1e-9)

	// Twice the hot fleets' messages: twice their share of the requests.
	u.MsgsPerHotFleetSecond = 2
	more := Fleetcast(functions(), u, Prices)
	assert.InDelta(t, 2*month, line(t, more, "Cloud Run requests", "ingest function").Quantity-line(t, b, "Cloud Run requests", "ingest function").Quantity, 1e-3)
}

// TestInstanceBillingReplacesTheRequestLines: the reference (the prod
// environment) runs both sides as services billed by instance. Their
// instance lines replace the functions' requests and instance time, which
// become its options at the same cost they have in the functions' bill;
// every other line is the same.
func TestInstanceBillingReplacesTheRequestLines(t *testing.T) {
	u := units().Fleetcast
	month := Month.Seconds()
	instance := 0.000018 + 0.5*0.000002
	fn, svc := Fleetcast(functions(), u, Prices), Fleetcast(Reference, u, Prices)
	ingest := line(t, svc, "Cloud Run instance time", "ingest service (ingest_mode = \"service\", ingest_instance_billing) (1 vCPU + 0.5 GiB)")
	assert.InDelta(t, month*instance, ingest.Cost, 1e-6, "the one instance busy at once, all month")
	query := line(t, svc, "Cloud Run instance time", "query service (query_mode = \"service\", query_instance_billing) (1 vCPU + 0.5 GiB)")
	assert.InDelta(t, 2*month*instance, query.Cost, 1e-6)
	for _, l := range svc.Lines {
		assert.NotEqual(t, "Cloud Run requests", l.Component, "no request fee by instance")
		assert.False(t, strings.HasPrefix(l.Item, "ingest function") || strings.HasPrefix(l.Item, "query function"), "no function's line: %s", l.Item)
	}
	ingestFn := line(t, fn, "Cloud Run requests", "ingest function").Cost + line(t, fn, "Cloud Run instance time", "ingest function (1 vCPU + 0.5 GiB)").Cost
	queryFn := line(t, fn, "Cloud Run requests", "query function").Cost + line(t, fn, "Cloud Run instance time", "query function (1 vCPU + 0.5 GiB)").Cost
	assert.InDelta(t, fn.Total()-ingestFn-queryFn+ingest.Cost+query.Cost, svc.Total(), 1e-6, "only the billing of the two sides differs")
	assert.InDelta(t, ingestFn, svc.Options[2].Cost, 1e-6, "the ingest function, as an option")
	assert.Contains(t, svc.Options[2].Item, "ingest_mode = \"function\"")
	assert.InDelta(t, queryFn, svc.Options[3].Cost, 1e-6, "the query function, as an option")
	assert.Contains(t, svc.Options[3].Item, "query_mode = \"function\"")

	// Linear in the clusters: ten times the clusters, ten instances; and
	// never none.
	assert.InDelta(t, 10*month*instance, line(t, Fleetcast(Reference.Scaled(10), u, Prices), "Cloud Run instance time", ingest.Item).Cost, 1e-6)
	u.IngestInstances = 0
	assert.InDelta(t, month*instance, line(t, Fleetcast(Reference, u, Prices), "Cloud Run instance time", ingest.Item).Cost, 1e-6)
}

func TestBaselineBillFollowsTheDeployment(t *testing.T) {
	b := Baseline(Reference, units().Baseline, Prices)
	month := Month.Seconds()
	msgs := 100 + 10000/15.0
	assert.InDelta(t, msgs*month, line(t, b, "Firestore writes", "consumer: every message").Quantity, 1e-3)
	assert.InDelta(t, 20*msgs*month, line(t, b, "Firestore reads", "matchmakers' listeners").Quantity, 1e-2)
	assert.InDelta(t, 10*100*month, line(t, b, "Firestore reads", "one-off queries").Quantity, 1e-3)
	assert.InDelta(t, msgs*month*0.06/1e5, b.Matchmaker.Cost, 1e-6)
}

func TestNumbersInFormulas(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 2628000: "2 628 000", 1.00349: "1.003", 0.0001234: "0.0001234", 16.666: "16.67", -1234.5: "-1 234"} {
		assert.Equal(t, want, n(v), "%v", v)
	}
}

func TestMeasuredRoundTripsThroughMetrics(t *testing.T) {
	m := units()
	got := map[string]float64{}
	m.Report(func(name string, v float64) {
		assert.NotContains(t, got, name, "two units share a name")
		got[name] = v
	})
	back, err := FromMetrics(func(name string) (float64, error) { return got[name], nil })
	require.NoError(t, err)
	assert.Equal(t, m, back)

	_, err = FromMetrics(func(name string) (float64, error) { return 0, assert.AnError })
	assert.ErrorIs(t, err, assert.AnError)
}

func TestRegionalHalvesFirestoreOnly(t *testing.T) {
	multi := Fleetcast(Reference, units().Fleetcast, Prices)
	regional := Fleetcast(Reference, units().Fleetcast, Prices.Regional())
	for i, l := range multi.Lines {
		r := regional.Lines[i]
		if strings.HasPrefix(l.Component, "Firestore") {
			assert.InDelta(t, l.Cost/2, r.Cost, 1e-9, l.Item)
		} else {
			assert.InDelta(t, l.Cost, r.Cost, 1e-9, l.Item)
		}
	}
}

// TestFairBaselineIsTheBroadcasterWithFleetcastsReadSide: the fair
// baseline keeps every line of the broadcaster's write side, drops its
// listening matchmakers and its queries' reads and instances, and pays
// fleetcast's view over the broadcaster's writes instead.
func TestFairBaselineIsTheBroadcasterWithFleetcastsReadSide(t *testing.T) {
	m := units()
	full := Baseline(Reference, m.Baseline, Prices)
	fair := FairBaseline(Reference, m, Prices)
	month := Month.Seconds()
	writes := 100 + 10000/15.0
	assert.Equal(t, line(t, full, "Firestore writes", "consumer: every message"), line(t, fair, "Firestore writes", "consumer: every message"))
	assert.Equal(t, line(t, full, "Cloud Run instance time", "consumer function (1 vCPU + 0.5 GiB)"),
		line(t, fair, "Cloud Run instance time", "consumer function (1 vCPU + 0.5 GiB)"))
	for _, l := range fair.Lines {
		assert.NotEqual(t, "matchmakers' listeners", l.Item)
		assert.NotEqual(t, "one-off queries", l.Item)
	}
	assert.InDelta(t, 2*(4+2*writes+10000/21600.0+10/300.0)*month, line(t, fair, "Firestore reads", "query side's views (queries and streams)").Quantity, 1e-2)
	assert.InDelta(t, 3*writes*1.1*1200*month/(1<<40), line(t, fair, "Pub/Sub", "change feed: publish").Quantity+
		line(t, fair, "Pub/Sub", "change feed: delivery to each query instance").Quantity, 1e-9, "the feed carries the broadcaster's writes")
	query := queryByInstance(Reference, Prices).Item
	assert.Equal(t, line(t, Fleetcast(Reference, m.Fleetcast, Prices), "Cloud Run instance time", query),
		line(t, fair, "Cloud Run instance time", query), "the same query instances, billed alike")
	assert.Less(t, fair.Total(), full.Total())
	assert.Greater(t, fair.Total(), Fleetcast(Reference, m.Fleetcast, Prices).Total())
}

func TestScaledKeepsEachClusterAndAddsTheInstancesItsStreamsNeed(t *testing.T) {
	ten := Reference.Scaled(10)
	assert.Equal(t, 100, ten.Clusters)
	assert.Equal(t, Reference.FleetsPerCluster, ten.FleetsPerCluster)
	assert.Equal(t, 1000.0, ten.ChangesPerSecond)
	assert.Equal(t, Reference.SpreadChangesPerSecond()*10, ten.SpreadChangesPerSecond())
	assert.Equal(t, 200, ten.Matchmakers)
	assert.Equal(t, 2, ten.QueryInstances, "200 streams fit the reference's instances")
	assert.Equal(t, 4, Reference.Scaled(100).QueryInstances, "2 000 streams take four")
}
