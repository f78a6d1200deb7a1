package query_test

import (
	"cmp"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetmetrics"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// scrape GETs /metrics as Prometheus' text format and parses it with
// Prometheus' own parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := testhttp.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, expfmt.TypeTextPlain, expfmt.ResponseFormat(resp.Header).FormatType(), resp.Header.Get("Content-Type"))
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return mfs
}

// series indexes a family's gauges by their labels, "k=v,k=v" sorted.
func series(mf *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	if mf == nil {
		return out
	}
	for _, m := range mf.Metric {
		var key []string
		for _, lp := range m.Label {
			key = append(key, lp.GetName()+"="+lp.GetValue())
		}
		slices.Sort(key)
		out[strings.Join(key, ",")] = m.GetGauge().GetValue()
	}
	return out
}

func fleetSeries(f fleetapi.Fleet, extra ...string) string {
	key := []string{"cluster=" + f.Cluster, "fleet=" + f.Name, "label_app_kubernetes_io_version=" + f.Labels["app.kubernetes.io/version"],
		"label_platform=" + f.Labels["platform"], "namespace=" + f.Namespace}
	key = append(key, extra...)
	slices.Sort(key)
	return strings.Join(key, ",")
}

// withRollout adds a fleet of pc carrying a list and a rollout in
// progress, so that every family has a series.
func withRollout(t *testing.T, mem interface{ PutFleet(fleet.Document) }) {
	t.Helper()
	now := time.Now()
	mem.PutFleet(fleet.Document{Cluster: "pc", Namespace: "beta", Name: "rolling", UID: "u", Version: fleet.Version{Term: 1, Seq: 100},
		Labels: map[string]string{"platform": "pc", "app.kubernetes.io/version": "1.43"},
		Spec:   &fleet.Spec{Replicas: 4, Scheduling: "Packed"},
		Status: &fleet.DocStatus{Replicas: 5, ReadyReplicas: 3, ReservedReplicas: 1, AllocatedReplicas: 1,
			Counters: map[string]fleet.DocAggregate{}, Lists: map[string]fleet.DocAggregate{"players": {Capacity: 40, Count: 7, Available: 33}}},
		Rollout:   &fleet.Rollout{Complete: false},
		Publisher: fleet.Publisher{ID: "p"}, ObservedAt: now.Add(-time.Second), IngestedAt: now, LagMillis: 5})
}

var metricsLabels = []string{"platform", "app.kubernetes.io/version"}

// TestMetricsEqualTheFleetsAPI: per fleet, /metrics carries what
// /v1/fleets answers from the same view — the same fleets (none of the
// stale cluster's), the same figures — and each cluster's heartbeat age
// and staleness as /v1/clusters has them.
func TestMetricsEqualTheFleetsAPI(t *testing.T) {
	srv, mem := serverWith(t, query.WithMetrics(fleetmetrics.Options{Labels: metricsLabels}))
	withRollout(t, mem)
	mfs := scrape(t, srv.URL)
	fleets := getList(t, srv.URL+"/v1/fleets?pageSize=100")
	require.Len(t, fleets.Items, 9, "pc's and ps5's, not stale xbox's")

	gauges := map[string]func(fleetapi.Fleet) int64{
		"fleetcast_fleet_replicas":           func(f fleetapi.Fleet) int64 { return f.Replicas },
		"fleetcast_fleet_current_replicas":   func(f fleetapi.Fleet) int64 { return f.CurrentReplicas },
		"fleetcast_fleet_ready_replicas":     func(f fleetapi.Fleet) int64 { return f.ReadyReplicas },
		"fleetcast_fleet_allocated_replicas": func(f fleetapi.Fleet) int64 { return f.AllocatedReplicas },
		"fleetcast_fleet_reserved_replicas":  func(f fleetapi.Fleet) int64 { return f.ReservedReplicas },
	}
	for name, field := range gauges {
		want := map[string]float64{}
		for _, f := range fleets.Items {
			want[fleetSeries(f)] = float64(field(f))
		}
		assert.Equal(t, want, series(mfs[name]), name)
	}
	counters, lists, rollouts := map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, f := range fleets.Items {
		for k, c := range f.Counters {
			counters[fleetSeries(f, "counter="+k)] = float64(c.Available)
		}
		for k, l := range f.Lists {
			lists[fleetSeries(f, "list="+k)] = float64(l.Available)
		}
		if f.Rollout != nil {
			rollouts[fleetSeries(f)] = map[bool]float64{true: 1, false: 0}[f.Rollout.Complete]
		}
	}
	assert.Equal(t, counters, series(mfs["fleetcast_fleet_counter_available"]))
	assert.Equal(t, lists, series(mfs["fleetcast_fleet_list_available"]))
	assert.Equal(t, map[string]float64{fleetSeries(fleets.Items[0]): 0}, rollouts, "one fleet's rollout is known")
	assert.Equal(t, rollouts, series(mfs["fleetcast_fleet_rollout_complete"]))
	assert.NotContains(t, mfs, "fleetcast_fleets", "per fleet, no count of fleets")

	stale := series(mfs["fleetcast_cluster_stale"])
	ages := series(mfs["fleetcast_cluster_heartbeat_age_seconds"])
	resp, err := testhttp.Client.Get(srv.URL + "/v1/clusters")
	require.NoError(t, err)
	var clusters fleetapi.ClusterList
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&clusters))
	resp.Body.Close()
	require.Len(t, clusters.Items, 3)
	for _, c := range clusters.Items {
		k := "cluster=" + c.Cluster
		assert.Equal(t, map[bool]float64{true: 1, false: 0}[c.Stale], stale[k], k)
		// Both readings judge "now" within this test's seconds.
		assert.InDelta(t, time.Since(c.HeartbeatAt).Seconds(), ages[k], 30, k)
	}
	assert.Equal(t, map[string]float64{"cluster=pc": 0, "cluster=ps5": 0, "cluster=xbox": 1}, stale)
	assert.Greater(t, ages["cluster=xbox"], 3500.0)
	assert.Equal(t, map[string]float64{"cluster=pc": 4, "cluster=ps5": 4, "cluster=xbox": 4}, series(mfs["fleetcast_cluster_fleets"]))
	assert.Equal(t, map[string]float64{"": 0}, series(mfs["fleetcast_metrics_aggregated"]))
	assert.Equal(t, map[string]float64{"": 0}, series(mfs["fleetcast_metrics_series_omitted"]))
	for name, mf := range mfs {
		assert.Contains(t, fleetmetrics.Names(), name, "Names lists every family")
		assert.Equal(t, dto.MetricType_GAUGE, mf.GetType(), name)
		assert.NotEmpty(t, mf.GetHelp(), name)
	}
}

// TestMetricsAggregateBeyondTheSeriesLimit: past the series limit, the
// series are sums by cluster and the chosen labels, equal to the sums of
// /v1/fleets' fleets; each cluster has an equal share of the limit, and
// sums that do not fit in it are left out whole and counted.
func TestMetricsAggregateBeyondTheSeriesLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       fleetmetrics.Options
		wantGroups int
		omitted    float64
	}{
		// 9 fleets are 8×6+7 = 55 series per fleet: over 40. Summed by
		// cluster and version: pc 1.41, 1.42, 1.43; ps5 1.41, 1.42, of
		// 5 replica gauges, fleets and rooms (1.43: players, rollout):
		// 7 series each, 8 for pc 1.43. pc and ps5 have 20 each: pc's
		// 1.43 does not fit after its 14.
		{"over the limit", fleetmetrics.Options{Labels: []string{"app.kubernetes.io/version"}, MaxSeries: 40}, 4, 8},
		{"asked for", fleetmetrics.Options{Labels: []string{"app.kubernetes.io/version"}, Aggregate: true}, 5, 0},
		// 10 each: one sum of each cluster.
		{"sums that do not fit", fleetmetrics.Options{Labels: []string{"app.kubernetes.io/version"}, MaxSeries: 20}, 2, 22},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, mem := serverWith(t, query.WithMetrics(tc.opts))
			withRollout(t, mem)
			mfs := scrape(t, srv.URL)
			fleets := getList(t, srv.URL+"/v1/fleets?pageSize=100")
			ready, count := map[string]float64{}, map[string]float64{}
			for _, f := range fleets.Items {
				k := "cluster=" + f.Cluster + ",label_app_kubernetes_io_version=" + f.Labels["app.kubernetes.io/version"]
				ready[k] += float64(f.ReadyReplicas)
				count[k]++
			}
			require.Len(t, ready, 5)
			got := series(mfs["fleetcast_fleet_ready_replicas"])
			assert.Len(t, got, tc.wantGroups)
			for k, v := range got {
				assert.Equal(t, ready[k], v, k)
				assert.Equal(t, count[k], series(mfs["fleetcast_fleets"])[k], k)
			}
			assert.Equal(t, map[string]float64{"": 1}, series(mfs["fleetcast_metrics_aggregated"]))
			assert.Equal(t, map[string]float64{"": tc.omitted}, series(mfs["fleetcast_metrics_series_omitted"]))
			total := 0
			for name, mf := range mfs {
				if strings.HasPrefix(name, "fleetcast_fleet") {
					total += len(mf.Metric)
				}
			}
			assert.LessOrEqual(t, total, cmp.Or(tc.opts.MaxSeries, fleetmetrics.DefaultMaxSeries))
		})
	}
}

// TestMetricsNegotiateAndRefuse: the format is the scraper's choice
// (Prometheus asks for protobuf first), gzip when accepted; anything but
// GET or HEAD without parameters is refused as the API refuses it.
func TestMetricsNegotiateAndRefuse(t *testing.T) {
	srv, _ := serverWith(t)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
	require.NoError(t, err)
	// What Prometheus 3 sends by default.
	req.Header.Set("Accept", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
	req.Header.Set("Accept-Encoding", "gzip")
	tr := &http.Transport{DisableCompression: true}
	resp, err := testhttp.New(tr).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "gzip", resp.Header.Get("Content-Encoding"))
	format := expfmt.ResponseFormat(resp.Header)
	assert.Equal(t, expfmt.TypeProtoDelim, format.FormatType())
	zr, err := gzip.NewReader(resp.Body)
	require.NoError(t, err)
	dec := expfmt.NewDecoder(zr, format)
	names := map[string]int{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		names[mf.GetName()] = len(mf.Metric)
	}
	assert.Equal(t, 8, names["fleetcast_fleet_ready_replicas"])

	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
		{http.MethodGet, "/metrics?match[]=x", http.StatusBadRequest},
		{http.MethodHead, "/metrics", http.StatusOK},
	} {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		require.NoError(t, err)
		resp, err := testhttp.Client.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, tc.status, resp.StatusCode, "%s %s: %s", tc.method, tc.path, body)
	}
}

// TestMetricsConfiguration: the settings' errors name the variable.
func TestMetricsConfiguration(t *testing.T) {
	env := map[string]string{"METRICS_LABELS": " platform, app.kubernetes.io/version ,", "METRICS_MAX_SERIES": "500", "METRICS_AGGREGATE": "true"}
	cfg, err := query.ConfigFromEnv(func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, fleetmetrics.Options{Labels: metricsLabels, MaxSeries: 500, Aggregate: true}, cfg.Metrics)

	cfg, err = query.ConfigFromEnv(func(string) string { return "" })
	require.NoError(t, err)
	assert.Equal(t, fleetmetrics.Options{MaxSeries: fleetmetrics.DefaultMaxSeries}, cfg.Metrics)

	bad := map[string]string{"METRICS_LABELS": "platform,not a key,a.b,a_b", "METRICS_MAX_SERIES": "0", "METRICS_AGGREGATE": "sometimes"}
	_, err = query.ConfigFromEnv(func(k string) string { return bad[k] })
	require.Error(t, err)
	for _, want := range []string{`METRICS_LABELS="platform,not a key,a.b,a_b"`, `"not a key" is not a label key`, `"a.b" and "a_b" are both label_a_b`,
		`METRICS_MAX_SERIES="0"`, `METRICS_AGGREGATE="sometimes"`} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestOneClustersLabelsCannotCrowdOutAnother: a cluster whose fleets each
// carry a version of their own makes a sum per fleet; they fill its own
// share of the series limit, and every sum of the other cluster, whose
// name sorts after it, is still served.
func TestOneClustersLabelsCannotCrowdOutAnother(t *testing.T) {
	srv, mem := serverWith(t, query.WithMetrics(fleetmetrics.Options{Labels: []string{"app.kubernetes.io/version"}, MaxSeries: 40}))
	now := time.Now()
	for i := range 30 {
		mem.PutFleet(fleet.Document{Cluster: "pc", Namespace: "noisy", Name: fmt.Sprintf("n%02d", i), UID: "u", Version: fleet.Version{Term: 1, Seq: int64(200 + i)},
			Labels: map[string]string{"app.kubernetes.io/version": fmt.Sprintf("build-%02d", i)},
			Spec:   &fleet.Spec{Replicas: 1}, Status: &fleet.DocStatus{Replicas: 1, ReadyReplicas: 1, Counters: map[string]fleet.DocAggregate{}, Lists: map[string]fleet.DocAggregate{}},
			ObservedAt: now, IngestedAt: now})
	}
	mfs := scrape(t, srv.URL)
	ready := series(mfs["fleetcast_fleet_ready_replicas"])
	perCluster := map[string]int{}
	for k := range ready {
		perCluster[strings.Split(k, ",")[0]]++
	}
	assert.Equal(t, 2, perCluster["cluster=ps5"], "both of ps5's sums")
	assert.Positive(t, series(mfs["fleetcast_metrics_series_omitted"])[""], "pc's own sums are left out")
	total := 0
	for name, mf := range mfs {
		if strings.HasPrefix(name, "fleetcast_fleet") {
			total += len(mf.Metric)
		}
	}
	assert.LessOrEqual(t, total, 40)
}

// TestMetricsWithoutRolloutsOrLists: a family with nothing to say is left
// out, not an empty family, which the text format cannot hold (expfmt
// refuses one, which used to cut the answer short there).
func TestMetricsWithoutRolloutsOrLists(t *testing.T) {
	srv, _ := serverWith(t)
	mfs := scrape(t, srv.URL)
	assert.NotContains(t, mfs, "fleetcast_fleet_rollout_complete", "no rollout is known")
	assert.NotContains(t, mfs, "fleetcast_fleet_list_available", "no fleet has a list")
	for _, name := range []string{"fleetcast_fleet_counter_available", "fleetcast_cluster_stale", "fleetcast_metrics_aggregated", "fleetcast_metrics_series_omitted"} {
		assert.Contains(t, mfs, name, "the families after them are served")
	}
}
