package terraform_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/histogram"
	promlabels "github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/allocator"
	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/internal/build/bill"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
	"github.com/fleetcast/fleetcast/internal/testenv/logquery"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
	"github.com/fleetcast/fleetcast/logging"
)

// googleMetrics are the Google-defined metrics the module's alerts, SLOs
// and dashboard read, with their monitored resource and metric labels, as
// Google's metrics list has them (cloud.google.com/monitoring/api/metrics_gcp).
var googleMetrics = map[string]struct {
	resource string
	labels   []string
}{
	"pubsub.googleapis.com/subscription/num_undelivered_messages": {"pubsub_subscription", nil},
	"pubsub.googleapis.com/subscription/push_request_count":       {"pubsub_subscription", []string{"response_class", "response_code", "delivery_type"}},
	"run.googleapis.com/request_count":                            {"cloud_run_revision", []string{"response_code", "response_code_class", "route_type"}},
	"run.googleapis.com/container/instance_count":                 {"cloud_run_revision", []string{"state"}},
}

// resourceLabels are each monitored resource type's labels.
var resourceLabels = map[string][]string{
	"cloud_run_revision":  {"project_id", "service_name", "revision_name", "location", "configuration_name"},
	"pubsub_subscription": {"project_id", "subscription_id"},
}

// ingestLogs runs the ingest function on the Firestore emulator through
// every outcome it logs at INFO and above — a fleet created, updated and
// deleted, a snapshot, a redelivery, and a drop of each reason — and
// returns its stdout's lines.
func ingestLogs(t *testing.T) [][]byte {
	t.Helper()
	var buf bytes.Buffer
	store := firestoredb.New(emulator.Firestore(t, emulator.ProjectID(t)), 24*time.Hour, time.Now)
	cfg, err := ingest.ConfigFromEnv(func(string) string { return "" }) // as deployed, but for the database
	require.NoError(t, err)
	h := ingest.NewHandler(store, logging.New(&buf, slog.LevelInfo), cfg, time.Now)
	now := time.Now()
	term := now.UnixMilli()
	ev := func(cluster string, seq int64, ready int64) fleet.Event {
		return fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: cluster,
			Version: fleet.Version{Term: term, Seq: seq}, ObservedAt: fleet.MicrosOf(now.Add(-20 * time.Millisecond)),
			Publisher: fleet.Publisher{ID: "p", Version: "test"}, Namespace: "games", Name: "ranked",
			Fleet: fleet.State{UID: "u", Labels: map[string]string{"platform": cluster}, Status: fleet.Status{ReadyReplicas: ready}}}
	}
	deleted := ev("pc", 3, 0)
	deleted.Kind, deleted.Fleet = fleet.KindDelete, fleet.State{UID: "u"}
	snap := ev("pc", 4, 0)
	snap.Kind, snap.Namespace, snap.Name, snap.Fleet = fleet.KindSnapshot, "", "", fleet.State{}
	snap.Snapshot = fleet.Snapshot{Part: 0, Parts: 1, ClusterLabels: map[string]string{"platform": "pc"}}
	skewed := ev("pc", 5, 1)
	skewed.Version.Term = math.MaxInt64
	encode := func(e fleet.Event) []byte {
		b, err := fleet.EncodeEvent(e)
		require.NoError(t, err)
		return b
	}
	const pcTopic = "//pubsub.googleapis.com/projects/p/topics/fleet-events-pc"
	for i, c := range []struct {
		source string
		data   any
	}{
		{pcTopic, ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: encode(ev("pc", 1, 3))}}}, // created
		{pcTopic, ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: encode(ev("pc", 1, 3))}}}, // a redelivery: DEBUG
		{pcTopic, ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: encode(ev("pc", 2, 5))}}}, // updated
		{pcTopic, ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: encode(deleted)}}},
		{pcTopic, ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: encode(snap)}}},
		{pcTopic, "not a Pub/Sub message"},
		{"//pubsub.googleapis.com/projects/p/topics/elsewhere", ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: encode(ev("pc", 6, 1))}}},
		{pcTopic, ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: []byte(`{"kind":"FLEET_UPSERT"}`)}}},
		{pcTopic, ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: encode(ev("ps5", 7, 1))}}},
		{pcTopic, ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: encode(skewed)}}},
	} {
		e := event.New()
		e.SetID(fmt.Sprintf("ce-%d", i))
		e.SetType("google.cloud.pubsub.topic.v1.messagePublished")
		e.SetSource(c.source)
		if md, ok := c.data.(ingest.MessagePublishedData); ok {
			md.Message.MessageID = fmt.Sprintf("m-%d", i)
			c.data = md
		}
		require.NoError(t, e.SetData("application/json", c.data))
		require.NoError(t, h.Handle(t.Context(), e), "event %d is acknowledged", i)
	}
	var lines [][]byte
	for l := range bytes.Lines(buf.Bytes()) {
		lines = append(lines, bytes.TrimSuffix(l, []byte("\n")))
	}
	return lines
}

// unreachable is a partition whose every answer fails, as a function
// that is down does.
type unreachable struct{}

func (unreachable) fail() error {
	return &fleetapi.Error{Code: fleetapi.Unavailable, Message: "the query API", Err: errors.New("503 Service Unavailable")}
}
func (u unreachable) ListFleets(context.Context, fleetapi.Query) (fleetapi.FleetList, error) {
	return fleetapi.FleetList{}, u.fail()
}
func (u unreachable) GetFleet(context.Context, fleet.Key) (fleetapi.Fleet, error) {
	return fleetapi.Fleet{}, u.fail()
}
func (u unreachable) ListClusters(context.Context) (fleetapi.ClusterList, error) {
	return fleetapi.ClusterList{}, u.fail()
}
func (u unreachable) GetCluster(context.Context, string) (fleetapi.Cluster, error) {
	return fleetapi.Cluster{}, u.fail()
}
func (u unreachable) LabelValues(context.Context, string, bool) (fleetapi.LabelValues, error) {
	return fleetapi.LabelValues{}, u.fail()
}
func (u unreachable) Place(context.Context, fleetapi.PlaceRequest) (fleetapi.Placements, error) {
	return fleetapi.Placements{}, u.fail()
}
func (u unreachable) Watch(context.Context, fleetapi.Query, string, func(fleetapi.Event) error) error {
	return u.fail()
}

// unreachablePartition is the URL of the partition partitionLogs finds
// down.
const unreachablePartition = "https://fleetcast-query-xbox-abc-ew.a.run.app"

// partitionLogs are the lines of a service over two partitions, one of
// them down, asked each thing it answers once: a list, a fleet and a
// cluster of the partition that is down, the clusters, a label's values,
// a placement and a watch (which it follows until the partition's
// clusters are sent stale).
func partitionLogs(t *testing.T) [][]byte {
	t.Helper()
	var buf syncbuf.Buffer
	log := logging.New(&buf, slog.LevelInfo)
	mem := fleetapitest.NewMemory(time.Now)
	mem.PutCluster(fleet.ClusterDocument{Cluster: "pc", Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: 1}, SnapshotParts: 1,
		IngestedAt: time.Now(), HeartbeatAt: time.Now()})
	p, err := fleetapi.NewPartitions([]fleetapi.Partition{
		{Name: "https://fleetcast-query-pc-abc-ew.a.run.app", Clusters: []string{"pc"}, API: fleetapi.NewService(mem, fleetapi.Options{Clusters: []string{"pc"}})},
		{Name: unreachablePartition, Clusters: []string{"xbox"}, API: unreachable{}},
	}, fleetapi.PartitionsOptions{Log: log})
	require.NoError(t, err)
	ctx := t.Context()
	_, err = p.ListFleets(ctx, fleetapi.Query{})
	require.NoError(t, err)
	_, err = p.GetFleet(ctx, fleet.Key{Cluster: "xbox", Namespace: "games", Name: "ranked"})
	require.Error(t, err)
	_, err = p.ListClusters(ctx)
	require.NoError(t, err)
	_, err = p.GetCluster(ctx, "xbox")
	require.Error(t, err)
	_, err = p.LabelValues(ctx, "platform", false)
	require.NoError(t, err)
	_, err = p.Place(ctx, fleetapi.PlaceRequest{})
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	stale := func(e fleetapi.Event) error {
		if e.Kind == fleetapi.ClusterChanged && e.Cluster.Cluster == "xbox" && e.Cluster.Stale {
			cancel()
		}
		return nil
	}
	require.NoError(t, p.Watch(wctx, fleetapi.Query{}, "", stale))
	var lines [][]byte
	for l := range bytes.Lines([]byte(buf.String())) {
		lines = append(lines, bytes.TrimSuffix(l, []byte("\n")))
	}
	return lines
}

// cloudRun is the monitored resource of a Cloud Run service's entries.
func cloudRun(project, service string) map[string]any {
	return map[string]any{"type": "cloud_run_revision", "labels": map[string]any{
		"project_id": project, "service_name": service, "revision_name": service + "-00001-abc",
		"configuration_name": service, "location": "europe-west1"}}
}

type logMetric struct {
	filter *logquery.Filter
	value  *logquery.Extractor
	labels map[string]*logquery.Extractor
	kind   string // metric_descriptor.value_type
}

func parseLogMetric(t *testing.T, r plannedResource) logMetric {
	t.Helper()
	f, err := logquery.Parse(r.Values["filter"].(string))
	require.NoError(t, err, r.Address)
	m := logMetric{filter: f, labels: map[string]*logquery.Extractor{}, kind: first(t, r.Values["metric_descriptor"])["value_type"].(string)}
	if v, _ := r.Values["value_extractor"].(string); v != "" {
		m.value, err = logquery.ParseExtractor(v)
		require.NoError(t, err, r.Address)
	}
	extractors, _ := r.Values["label_extractors"].(map[string]any) // none: absent
	for k, v := range extractors {
		m.labels[k], err = logquery.ParseExtractor(v.(string))
		require.NoError(t, err, r.Address)
	}
	return m
}

// TestMonitoring plans the dev environment with one cluster and checks
// what its monitoring reads: every log-based metric's filter and
// extractors against the ingest function's real log lines (and Cloud
// Run's request log, for the query latency), and every alert, SLO and
// chart against the metrics the module or Google defines.
func TestMonitoring(t *testing.T) {
	planned := planEnvironment(t, "dev", `{"pc" = {gke_project = "studio-game-pc", node_service_account = "gke-nodes@studio-game-pc.iam.gserviceaccount.com"}}`)
	byType := map[string]map[string]plannedResource{}
	for _, r := range planned {
		if byType[r.Type] == nil {
			byType[r.Type] = map[string]plannedResource{}
		}
		byType[r.Type][r.Name] = r
	}
	logMetrics := byType["google_logging_metric"]
	require.ElementsMatch(t, []string{"ingest_dropped", "ingest_outcome", "ingest_lag", "heartbeats", "query_latency", "partition_unanswered"}, slices.Collect(maps.Keys(logMetrics)))
	project := logMetrics["heartbeats"].Values["project"].(string)

	t.Run("log-based metrics count what the functions log", func(t *testing.T) {
		lines := ingestLogs(t)
		var ingestEntries, queryEntries []logquery.Entry
		for _, l := range lines {
			ingestEntries = append(ingestEntries, logquery.FromStructuredLine(l, cloudRun(project, "fleetcast-ingest"), "projects/"+project+"/logs/run.googleapis.com%2Fstdout"))
			// The same lines from the query side belong to no ingest metric.
			queryEntries = append(queryEntries, logquery.FromStructuredLine(l, cloudRun(project, "fleetcast-query"), "projects/"+project+"/logs/run.googleapis.com%2Fstdout"))
		}
		count := func(m logMetric, entries []logquery.Entry, label string) map[string]int {
			out := map[string]int{}
			for _, e := range entries {
				if !m.filter.Match(e) {
					continue
				}
				key := "matched"
				if label != "" {
					key, _ = m.labels[label].Extract(e)
				}
				out[key]++
				if m.value != nil {
					v, ok := m.value.Extract(e)
					require.True(t, ok, "%s: the value extractor finds a value in %v", m.filter, e)
					_, err := strconv.ParseFloat(v, 64)
					require.NoError(t, err, "%s: the value %q is a number", m.filter, v)
				}
			}
			return out
		}
		dropped := parseLogMetric(t, logMetrics["ingest_dropped"])
		assert.Equal(t, map[string]int{ingest.DropNotPubSub: 1, ingest.DropUnboundTopic: 1, ingest.DropInvalid: 1, ingest.DropForeignCluster: 1, ingest.DropClockSkew: 1},
			count(dropped, ingestEntries, "reason_code"), "one drop of each reason, by its code")
		assert.Equal(t, map[string]int{"ps5": 1, "pc": 1}, func() map[string]int {
			out := count(dropped, ingestEntries, "cluster")
			delete(out, "")
			return out
		}(), "a drop names the cluster it claimed once it is read")
		outcome := parseLogMetric(t, logMetrics["ingest_outcome"])
		assert.Equal(t, map[string]int{"created": 1, "updated": 1, "deleted": 1, "reconciled": 1}, count(outcome, ingestEntries, "outcome"),
			"the redelivery changed nothing: DEBUG, not counted")
		assert.Equal(t, map[string]int{"FLEET_UPSERT": 2, "FLEET_DELETE": 1, "CLUSTER_SNAPSHOT": 1}, count(outcome, ingestEntries, "kind"))
		lag := parseLogMetric(t, logMetrics["ingest_lag"])
		assert.Equal(t, "DISTRIBUTION", lag.kind)
		assert.Equal(t, map[string]int{"pc": 3}, count(lag, ingestEntries, "cluster"), "the upserts' and the delete's lag")
		heartbeats := parseLogMetric(t, logMetrics["heartbeats"])
		assert.Equal(t, map[string]int{"pc": 1}, count(heartbeats, ingestEntries, "cluster"))
		for name, r := range logMetrics {
			assert.Empty(t, count(parseLogMetric(t, r), queryEntries, ""), "%s counts the ingest function's lines only", name)
		}

		// Cloud Run's request log (run.googleapis.com/requests): one entry
		// per request, its httpRequest as the LogEntry type has it.
		latency := parseLogMetric(t, logMetrics["query_latency"])
		requests := map[string]bool{
			"/v1/fleets?selector=platform%3Dpc":       true,
			"/fleetcast.v1.InformationService/Inform": true,
			"/metrics":             true,
			"/v1/watch?cluster=pc": false,
			"/fleetcast.v1.InformationService/WatchFleets": false,
		}
		for path, counted := range requests {
			e := logquery.Entry{"resource": cloudRun(project, "fleetcast-query"), "logName": "projects/" + project + "/logs/run.googleapis.com%2Frequests",
				"severity": "INFO", "httpRequest": map[string]any{"requestMethod": "GET", "requestUrl": "https://fleetcast-query-abc-ew.a.run.app" + path,
					"status": 200.0, "latency": "0.012345s", "protocol": "HTTP/1.1"}}
			assert.Equal(t, counted, latency.filter.Match(e), path)
			if counted {
				v, ok := latency.value.Extract(e)
				assert.True(t, ok)
				assert.Equal(t, "0.012345", v, "seconds")
			}
			e["resource"] = cloudRun(project, "fleetcast-ingest")
			assert.False(t, latency.filter.Match(e), "another service's request")
		}
	})

	t.Run("partition_unanswered counts the merged query function's unanswered partitions", func(t *testing.T) {
		m := parseLogMetric(t, logMetrics["partition_unanswered"])
		counts := map[string]map[string]int{"partition": {}, "request": {}}
		for _, l := range partitionLogs(t) {
			e := logquery.FromStructuredLine(l, cloudRun(project, "fleetcast-query-merged"), "projects/"+project+"/logs/run.googleapis.com%2Fstdout")
			if !m.filter.Match(e) {
				continue
			}
			for label, by := range counts {
				v, ok := m.labels[label].Extract(e)
				require.True(t, ok, "%s in %s", label, l)
				by[v]++
			}
			assert.Equal(t, "WARNING", e["severity"])
			e["resource"] = cloudRun(project, "fleetcast-query-xbox")
			assert.False(t, m.filter.Match(e), "a partition's own lines are not the merged function's")
		}
		assert.Equal(t, map[string]int{unreachablePartition: 8}, counts["partition"], "only the partition that is down")
		assert.Equal(t, map[string]int{"fleets": 2, "fleet": 1, "clusters": 1, "cluster": 1, "labels": 1, "placements": 1, "watch": 1}, counts["request"],
			"each request once; the watch first asks a page of one fleet, as one view refuses an unknown counter before its stream")
	})

	t.Run("the exclusion drops the accepted pushes' request logs, and no metric loses a count", func(t *testing.T) {
		ex, ok := byType["google_logging_project_exclusion"]["ingest_accepted_pushes"]
		require.True(t, ok)
		filter, err := logquery.Parse(ex.Values["filter"].(string))
		require.NoError(t, err)
		request := func(service string, status float64) logquery.Entry {
			return logquery.Entry{"resource": cloudRun(project, service), "logName": "projects/" + project + "/logs/run.googleapis.com%2Frequests",
				"severity": "INFO", "httpRequest": map[string]any{"requestMethod": "POST", "requestUrl": "https://" + service + "-abc-ew.a.run.app/",
					"status": status, "latency": "0.004s", "protocol": "HTTP/1.1"}}
		}
		for status, excluded := range map[float64]bool{200: true, 204: true, 399: true, 400: false, 429: false, 500: false, 503: false} {
			assert.Equal(t, excluded, filter.Match(request("fleetcast-ingest", status)), "an ingest push answered %v", status)
			assert.False(t, filter.Match(request("fleetcast-query", status)), "the query side's requests are kept (query_latency, the SLOs)")
		}
		for _, l := range ingestLogs(t) {
			e := logquery.FromStructuredLine(l, cloudRun(project, "fleetcast-ingest"), "projects/"+project+"/logs/run.googleapis.com%2Fstdout")
			assert.False(t, filter.Match(e), "the function's own lines are kept: %s", l)
		}
		// Cloud Logging computes a project's user-defined log-based metrics
		// from every entry it receives, excluded or not; a bucket-scoped
		// one would count only what its bucket stores.
		for name, r := range logMetrics {
			assert.Empty(t, r.Values["bucket_name"], "%s: project-scoped, so that the exclusion takes nothing from it", name)
		}
	})

	t.Run("the exclusion drops the ingested events' lines below WARNING, and no metric loses a count", func(t *testing.T) {
		ex, ok := byType["google_logging_project_exclusion"]["ingest_ingested_events"]
		require.True(t, ok)
		filter, err := logquery.Parse(ex.Values["filter"].(string))
		require.NoError(t, err)
		excluded := map[string]int{}
		for _, l := range ingestLogs(t) {
			e := logquery.FromStructuredLine(l, cloudRun(project, "fleetcast-ingest"), "projects/"+project+"/logs/run.googleapis.com%2Fstdout")
			if !filter.Match(e) {
				assert.NotEqual(t, "INFO", e["severity"], "every INFO line of an event is excluded: %s", l)
				continue
			}
			excluded[e["severity"].(string)]++
			assert.Equal(t, "fleet event ingested", e["jsonPayload"].(map[string]any)["message"])
			for _, m := range []string{"ingest_outcome", "heartbeats"} {
				if parseLogMetric(t, logMetrics[m]).filter.Match(e) {
					excluded[m]++
				}
			}
			e["resource"] = cloudRun(project, "fleetcast-query")
			assert.False(t, filter.Match(e), "another service's line")
		}
		assert.Equal(t, map[string]int{"INFO": 4, "ingest_outcome": 4, "heartbeats": 1}, excluded,
			"the events that changed a document, a snapshot's among them; the metrics still count them")
		for _, l := range ingestLogs(t) {
			e := logquery.FromStructuredLine(l, cloudRun(project, "fleetcast-ingest"), "projects/"+project+"/logs/run.googleapis.com%2Fstdout")
			if e["severity"] == "WARNING" || e["severity"] == "ERROR" {
				assert.False(t, filter.Match(e), "drops and failures are kept: %s", l)
			}
		}
	})

	t.Run("every alert, SLO and chart reads a metric the module or Google defines", func(t *testing.T) {
		userLabels := map[string][]string{}
		for _, r := range logMetrics {
			var labels []string
			for _, l := range asList(first(t, r.Values["metric_descriptor"])["labels"]) {
				labels = append(labels, l.(map[string]any)["key"].(string))
			}
			userLabels["logging.googleapis.com/user/"+r.Values["name"].(string)] = labels
		}
		read := map[string]bool{}
		check := func(where, filter string, groupBy []string) {
			t.Helper()
			mt := regexp.MustCompile(`metric\.type="([^"]+)"`).FindAllStringSubmatch(filter, -1)
			if !assert.Len(t, mt, 1, "%s: one metric.type in %q", where, filter) {
				return
			}
			metric := mt[0][1]
			read[metric] = true
			var resource string
			var labels []string
			if l, ok := userLabels[metric]; ok {
				resource, labels = "cloud_run_revision", l
			} else if g, ok := googleMetrics[metric]; assert.True(t, ok, "%s: %s is neither the module's nor a Google metric listed here", where, metric) {
				resource, labels = g.resource, g.labels
			} else {
				return
			}
			rt := regexp.MustCompile(`resource\.type="([^"]+)"`).FindStringSubmatch(filter)
			if assert.NotNil(t, rt, "%s: the filter names its resource type", where) {
				assert.Equal(t, resource, rt[1], "%s: %s is written for %s", where, metric, resource)
			}
			named := regexp.MustCompile(`\b(metric|resource)\.labels?\.([a-z_]+)`).FindAllStringSubmatch(filter+" "+strings.Join(groupBy, " "), -1)
			for _, n := range named {
				if n[1] == "metric" {
					assert.Contains(t, labels, n[2], "%s: %s has no metric label %s", where, metric, n[2])
				} else {
					assert.Contains(t, resourceLabels[resource], n[2], "%s: %s has no label %s", where, resource, n[2])
				}
			}
		}
		// The bill prices the conditions this plan (one cluster) has.
		conditions := 0
		for _, r := range planned {
			if r.Type == "google_monitoring_alert_policy" {
				conditions += len(asList(r.Values["conditions"]))
			}
		}
		one := bill.Reference
		one.Clusters = 1
		assert.Equal(t, one.AlertConditions(), conditions, "alert conditions, as bill.Deployment.AlertConditions counts them")
		policies := byType["google_monitoring_alert_policy"]
		require.Subset(t, slices.Collect(maps.Keys(policies)), []string{"clusters_stale", "dead_letter", "dropped", "ingest_lag", "query_errors", "push_errors"})
		sloBurns := 0
		for _, r := range planned {
			if r.Type != "google_monitoring_alert_policy" {
				continue
			}
			assert.Empty(t, r.Values["notification_channels"], "%s: none by default", r.Address)
			for _, c := range asList(r.Values["conditions"]) {
				cond := c.(map[string]any)
				for _, kind := range []string{"condition_threshold", "condition_absent"} {
					for _, th := range asList(cond[kind]) {
						th := th.(map[string]any)
						filter, known := th["filter"].(string)
						if !known && r.Name == "slo_burn" {
							sloBurns++ // select_slo_burn_rate of an SLO's name, known once applied: checked below
							continue
						}
						require.True(t, known, "%s: the filter is known at plan", r.Address)
						var groupBy []string
						for _, a := range append(asList(th["aggregations"]), asList(th["denominator_aggregations"])...) {
							for _, g := range asList(a.(map[string]any)["group_by_fields"]) {
								groupBy = append(groupBy, g.(string))
							}
						}
						check(r.Address, filter, groupBy)
						if d, ok := th["denominator_filter"].(string); ok && d != "" {
							check(r.Address+" (denominator)", d, nil)
						}
						seconds, err := strconv.Atoi(strings.TrimSuffix(th["duration"].(string), "s"))
						require.NoError(t, err)
						assert.Zero(t, seconds%60, "%s: Cloud Monitoring takes whole minutes", r.Address)
						if kind == "condition_absent" {
							assert.GreaterOrEqual(t, seconds, 120, "%s: an absence of at least two minutes", r.Address)
						}
					}
				}
			}
		}
		assert.Equal(t, 4, sloBurns, "two windows for each of the two SLOs")
		for _, r := range byType["google_monitoring_slo"] {
			sli := first(t, r.Values["request_based_sli"])
			for _, cut := range asList(sli["distribution_cut"]) {
				check(r.Address, cut.(map[string]any)["distribution_filter"].(string), nil)
			}
			for _, ratio := range asList(sli["good_total_ratio"]) {
				for _, k := range []string{"good_service_filter", "bad_service_filter", "total_service_filter"} {
					if f, _ := ratio.(map[string]any)[k].(string); f != "" {
						check(r.Address+" "+k, f, nil)
					}
				}
			}
		}
		var dash struct {
			MosaicLayout struct {
				Tiles []struct {
					Widget struct {
						Title   string `json:"title"`
						XyChart struct {
							DataSets []struct {
								TimeSeriesQuery struct {
									TimeSeriesFilter struct {
										Filter      string `json:"filter"`
										Aggregation struct {
											GroupByFields []string `json:"groupByFields"`
										} `json:"aggregation"`
									} `json:"timeSeriesFilter"`
								} `json:"timeSeriesQuery"`
							} `json:"dataSets"`
						} `json:"xyChart"`
					} `json:"widget"`
				} `json:"tiles"`
			} `json:"mosaicLayout"`
		}
		require.NoError(t, json.Unmarshal([]byte(byType["google_monitoring_dashboard"]["fleetcast"].Values["dashboard_json"].(string)), &dash))
		require.NotEmpty(t, dash.MosaicLayout.Tiles)
		for _, tile := range dash.MosaicLayout.Tiles {
			for _, ds := range tile.Widget.XyChart.DataSets {
				f := ds.TimeSeriesQuery.TimeSeriesFilter
				check("dashboard: "+tile.Widget.Title, f.Filter, f.Aggregation.GroupByFields)
			}
		}
		for metric := range userLabels {
			assert.True(t, read[metric], "%s: a log-based metric nothing reads", metric)
		}
	})

	t.Run("the stale alert fires for each cluster without a heartbeat, and no other", func(t *testing.T) {
		q := promqlCondition(t, byType["google_monitoring_alert_policy"], "clusters_stale")
		query := q["query"].(string)
		// The heartbeats metric as Cloud Monitoring's PromQL names it
		// (the first "/" a ":", any other character not a letter, digit
		// or "_" an "_"), and the plan's one cluster, pc.
		metric := "logging.googleapis.com/user/" + logMetrics["heartbeats"].Values["name"].(string)
		domain, path, _ := strings.Cut(metric, "/")
		special := regexp.MustCompile(`[^a-zA-Z0-9_]`)
		promName := special.ReplaceAllString(domain, "_") + ":" + special.ReplaceAllString(path, "_")
		assert.Contains(t, query, promName+`{monitored_resource="cloud_run_revision"}`)
		// Evaluated by Prometheus' engine over points one a minute, as
		// Logging writes a log-based metric's: pc's stop 10 minutes in.
		var points []chunks.Sample
		for i := range 10 {
			points = append(points, heartbeatPoint{t: int64(i) * time.Minute.Milliseconds(), f: 1})
		}
		series := storage.NewListSeries(promlabels.FromStrings(promlabels.MetricName, promName,
			"monitored_resource", "cloud_run_revision", "cluster", "pc"), points)
		db := &storage.MockQueryable{MockQuerier: &storage.MockQuerier{SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*promlabels.Matcher) storage.SeriesSet {
			for _, m := range ms {
				if !m.Matches(series.Labels().Get(m.Name)) {
					return &seriesSet{}
				}
			}
			return &seriesSet{series: []storage.Series{series}}
		}}}
		engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 10_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
		stale := func(at time.Duration) []string {
			qry, err := engine.NewInstantQuery(t.Context(), db, nil, query, time.Unix(0, 0).Add(at))
			require.NoError(t, err, "%s", query)
			res := qry.Exec(t.Context())
			require.NoError(t, res.Err)
			vec, err := res.Vector()
			require.NoError(t, err)
			var out []string
			for _, s := range vec {
				out = append(out, s.Metric.Get("cluster"))
			}
			return out
		}
		assert.Empty(t, stale(5*time.Minute), "pc heartbeats")
		assert.Equal(t, []string{"pc"}, stale(20*time.Minute), "pc stopped: its own incident")
	})

	t.Run("the allocator's failover alert reads what fleetcast-allocator serves", func(t *testing.T) {
		q := promqlCondition(t, byType["google_monitoring_alert_policy"], "allocator_failover")
		query := q["query"].(string)
		// What an allocator serves once it has allocated, after a
		// failover (allocator.Metrics, as its /metrics).
		reg := prometheus.NewRegistry()
		m := allocator.NewMetrics(reg)
		m.Allocations.WithLabelValues("pc", allocator.Allocated).Inc()
		m.FailedOver.Inc()
		families, err := reg.Gather()
		require.NoError(t, err)
		served := map[string]map[string]map[string]bool{} // name → label → values
		for _, f := range families {
			name := f.GetName()
			if f.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") {
				name += "_total"
			}
			served[name] = map[string]map[string]bool{}
			for _, mt := range f.GetMetric() {
				for _, l := range mt.GetLabel() {
					if served[name][l.GetName()] == nil {
						served[name][l.GetName()] = map[string]bool{}
					}
					served[name][l.GetName()][l.GetValue()] = true
				}
			}
		}
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(query)
		require.NoError(t, err, "Prometheus' parser, as Cloud Monitoring's PromQL: %s", query)
		selected := 0
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			selected++
			labels, ok := served[vs.Name]
			if !assert.True(t, ok, "%s selects %s, which fleetcast-allocator does not serve", query, vs.Name) {
				return nil
			}
			for _, lm := range vs.LabelMatchers {
				if lm.Name == promlabels.MetricName {
					continue
				}
				assert.Contains(t, labels, lm.Name, "%s has no label %s", vs.Name, lm.Name)
				if lm.Type == promlabels.MatchEqual {
					assert.True(t, labels[lm.Name][lm.Value], "%s{%s=%q}: a value it never has", vs.Name, lm.Name, lm.Value)
				}
			}
			return nil
		})
		assert.Equal(t, 2, selected, "the failovers over the allocations: %s", query)
		cmp, ok := expr.(*parser.BinaryExpr)
		require.True(t, ok, "%s: a comparison with the threshold", query)
		assert.Equal(t, parser.ItemType(parser.GTR), cmp.Op)
		assert.Equal(t, "0.1", cmp.RHS.String(), "alert_allocator_failover_ratio's default")
		seconds, err := strconv.Atoi(strings.TrimSuffix(q["duration"].(string), "s"))
		require.NoError(t, err)
		assert.Zero(t, seconds%60, "Cloud Monitoring takes whole minutes")
	})

	t.Run("each burn-rate alert reads an SLO of the module", func(t *testing.T) {
		f, diags := hclparse.NewParser().ParseHCLFile("modules/fleetcast/monitoring.tf")
		require.False(t, diags.HasErrors(), diags.Error())
		slos := map[string]bool{}
		var burn *hclsyntax.Block
		for _, b := range f.Body.(*hclsyntax.Body).Blocks {
			if b.Type == "resource" && b.Labels[0] == "google_monitoring_slo" {
				slos[b.Labels[1]] = true
			}
			if b.Type == "resource" && b.Labels[0] == "google_monitoring_alert_policy" && b.Labels[1] == "slo_burn" {
				burn = b
			}
		}
		require.NotNil(t, burn)
		obj, ok := burn.Body.Attributes["for_each"].Expr.(*hclsyntax.ObjectConsExpr)
		require.True(t, ok)
		var read []string
		for _, item := range obj.Items {
			tr, ok := item.ValueExpr.(*hclsyntax.ScopeTraversalExpr)
			require.True(t, ok)
			require.Len(t, tr.Traversal, 3)
			assert.Equal(t, "google_monitoring_slo", tr.Traversal.RootName())
			assert.Equal(t, "name", tr.Traversal[2].(hcl.TraverseAttr).Name)
			read = append(read, tr.Traversal[1].(hcl.TraverseAttr).Name)
		}
		assert.ElementsMatch(t, slices.Collect(maps.Keys(slos)), read, "every SLO has its burn-rate alert")
	})
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// heartbeatPoint is one float point of a series, for Prometheus' engine.
type heartbeatPoint struct {
	t int64
	f float64
}

func (p heartbeatPoint) T() int64                      { return p.t }
func (p heartbeatPoint) ST() int64                     { return 0 }
func (p heartbeatPoint) F() float64                    { return p.f }
func (p heartbeatPoint) H() *histogram.Histogram       { return nil }
func (p heartbeatPoint) FH() *histogram.FloatHistogram { return nil }
func (p heartbeatPoint) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (p heartbeatPoint) Copy() chunks.Sample           { return p }

// seriesSet is a storage.SeriesSet of the series it holds.
type seriesSet struct {
	series []storage.Series
	at     int
}

func (s *seriesSet) Next() bool                        { s.at++; return s.at <= len(s.series) }
func (s *seriesSet) At() storage.Series                { return s.series[s.at-1] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// promqlCondition is the one condition of the planned alert policy name,
// a PromQL one.
func promqlCondition(t *testing.T, policies map[string]plannedResource, name string) map[string]any {
	t.Helper()
	policy, ok := policies[name]
	require.True(t, ok, "the alert policy %s", name)
	conds := asList(policy.Values["conditions"])
	require.Len(t, conds, 1)
	return first(t, conds[0].(map[string]any)["condition_prometheus_query_language"])
}
