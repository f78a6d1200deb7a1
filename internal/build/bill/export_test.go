package bill

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetmetrics"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
)

// seriesOf counts the series /metrics answers for clusters of fleets (as
// the bill's fleets: replicas and a rollout, labelled by platform), per
// fleet or summed, leaving out the two series about /metrics itself.
func seriesOf(t *testing.T, clusters, fleets int, aggregate bool) int {
	t.Helper()
	now := time.Now()
	mem := fleetapitest.NewMemory(time.Now)
	for c := range clusters {
		mem.PutCluster(fleet.ClusterDocument{Cluster: fmt.Sprintf("c%d", c), Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: 1},
			SnapshotParts: 1, IngestedAt: now, HeartbeatAt: now, FleetCount: int64(fleets)})
		for i := range fleets {
			mem.PutFleet(fleet.Document{Cluster: fmt.Sprintf("c%d", c), Namespace: "games", Name: fmt.Sprintf("f%d", i), UID: "u",
				Version: fleet.Version{Term: 1, Seq: int64(i + 2)}, Labels: map[string]string{"platform": []string{"pc", "xbox", "playstation", "switch"}[i%4]},
				Spec: &fleet.Spec{Replicas: 3}, Status: &fleet.DocStatus{Replicas: 3, ReadyReplicas: 2, AllocatedReplicas: 1},
				Rollout: &fleet.Rollout{Complete: true}, ObservedAt: now, IngestedAt: now})
		}
	}
	svc := fleetapi.NewService(mem, fleetapi.Options{MaxStaleness: time.Hour, ClusterRefresh: -1})
	require.NoError(t, svc.Sync(t.Context()))
	var snap *fleetmetrics.Snapshot
	require.NoError(t, svc.Read(t.Context(), func(r *fleetapi.Read) error {
		snap = fleetmetrics.Collect(r, fleetmetrics.Options{Labels: []string{"platform"}, Aggregate: aggregate})
		return nil
	}))
	var buf bytes.Buffer
	require.NoError(t, snap.Write(&buf, expfmt.NewFormat(expfmt.TypeTextPlain)))
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(&buf)
	require.NoError(t, err)
	n := 0
	for name, f := range families {
		if name != "fleetcast_metrics_aggregated" && name != "fleetcast_metrics_series_omitted" {
			n += len(f.GetMetric())
		}
	}
	return n
}

// TestTheExportsSeriesAreWhatMetricsAnswers: the series the bill prices
// the export by are the ones /metrics answers.
func TestTheExportsSeriesAreWhatMetricsAnswers(t *testing.T) {
	d := Reference
	one, two := seriesOf(t, 1, 8, false), seriesOf(t, 1, 9, false)
	assert.Equal(t, d.MetricsSeriesPerFleet, two-one, "series per fleet")
	assert.Equal(t, d.MetricsSeriesPerCluster, one-8*d.MetricsSeriesPerFleet, "series per cluster")
	assert.Equal(t, 3*(d.MetricsSumsPerCluster*(d.MetricsSeriesPerFleet+1)+d.MetricsSeriesPerCluster), seriesOf(t, 3, 8, true),
		"summed: per cluster and platform")

	opts := Fleetcast(d, units().Fleetcast, Prices).Options
	require.Len(t, opts, 5, "the export, per fleet and summed; the ingest and the query side billed the other way; storing the ingested events' lines")
	perFleet := float64(d.QueryInstances) * (d.Fleets()*6 + 10*3) / 30 * Month.Seconds()
	assert.InDelta(t, perFleet, opts[0].Quantity, 1)
	assert.InDelta(t, perFleet*0.06/1e6, opts[0].Cost, 1e-6)
	assert.Less(t, opts[1].Cost, opts[0].Cost/100, "summing is what makes the export cheap")
}

// TestTracesAreTheSampledShare: Cloud Trace bills the sampled share of
// every message's spans and of the queries'.
func TestTracesAreTheSampledShare(t *testing.T) {
	b := Fleetcast(Reference, units().Fleetcast, Prices)
	l := line(t, b, "Cloud Trace", "spans sampled (trace_sample_ratio 0.01)")
	msgs := line(t, Fleetcast(functions(), units().Fleetcast, Prices), "Cloud Run requests", "ingest function").Quantity
	queries := (10 + 20/3600.0) * Month.Seconds()
	assert.InDelta(t, 0.01*(msgs*SpansPerTracedUpsert+queries), l.Quantity, 1)
	none := Reference
	none.TraceSampleRatio = 0
	assert.Zero(t, line(t, Fleetcast(none, units().Fleetcast, Prices), "Cloud Trace", "spans sampled (trace_sample_ratio 0)").Cost)
}

// TestAlertingIsPerConditionAndSeries: Cloud Monitoring bills each
// condition a month and the series its executions return.
func TestAlertingIsPerConditionAndSeries(t *testing.T) {
	b := Fleetcast(Reference, units().Fleetcast, Prices)
	assert.Equal(t, 11, Reference.AlertConditions(), "one condition finds every stale cluster; ten others")
	assert.Equal(t, 11, Reference.Scaled(10).AlertConditions(), "whatever the number of clusters")
	assert.InDelta(t, 11*1.50, line(t, b, "Cloud Monitoring alerting", "alert conditions").Cost, 1e-9)
	assert.InDelta(t, 11*Month.Seconds()/30*0.35/1e6, line(t, b, "Cloud Monitoring alerting", "time series returned").Cost, 1e-9)
}

// TestCloudRunsRequestLogsAreBilled: every request a Cloud Run service
// answers — each push into the ingest or the consumer function, each query
// and stream — writes a request log entry Cloud Logging bills, in every
// system, but those fleetcast's module excludes: its ingest function's
// accepted pushes'. The fair baseline's read side is fleetcast's, with its
// one line.
func TestCloudRunsRequestLogsAreBilled(t *testing.T) {
	m := units()
	fc := Fleetcast(Reference, m.Fleetcast, Prices)
	assert.Zero(t, line(t, fc, "Cloud Logging", "ingest: Cloud Run request logs").Cost, "the accepted pushes' entries are excluded (Terraform's ingest_accepted_pushes)")
	queries := line(t, Fleetcast(functions(), m.Fleetcast, Prices), "Cloud Run requests", "query function").Quantity
	assert.InDelta(t, queries*RequestLogBytes/(1<<30), line(t, fc, "Cloud Logging", "query side: Cloud Run request logs").Quantity, 1e-9, "a service logs each request as a function does")

	bl := Baseline(Reference, m.Baseline, Prices)
	consumed := line(t, bl, "Cloud Run requests", "consumer function").Quantity
	assert.InDelta(t, consumed*RequestLogBytes/(1<<30), line(t, bl, "Cloud Logging", "consumer function: Cloud Run request logs").Quantity, 1e-9)
	line(t, bl, "Cloud Logging", "query function: Cloud Run request logs")

	fair := FairBaseline(Reference, m, Prices)
	n := 0
	for _, l := range fair.Lines {
		if l.Item == "query side: Cloud Run request logs" {
			n++
			assert.InDelta(t, queries*RequestLogBytes/(1<<30), l.Quantity, 1e-9, "fleetcast's read side's")
		}
	}
	assert.Equal(t, 1, n)
	line(t, fair, "Cloud Logging", "consumer function: Cloud Run request logs")
}
