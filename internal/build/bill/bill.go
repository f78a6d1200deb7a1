package bill

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/publisher"
)

// Month is the month Google's price lists use: 730 hours.
const Month = 730 * time.Hour

// Deployment is what a bill is for: its sizes, and the intervals of both
// systems (fleetcast's defaults, the baseline's republish period).
type Deployment struct {
	Clusters, FleetsPerCluster int
	// ChangesPerSecond are the fleet status changes over all clusters;
	// HotFleets of the fleets change HotChangesPerSecond each, the rest
	// are spread evenly over the other fleets.
	ChangesPerSecond    float64
	HotFleets           int
	HotChangesPerSecond float64
	// Matchmakers follow every fleet: on the query function's stream
	// (fleetcast), or each with its own Firestore listeners (baseline).
	Matchmakers int
	// QueriesPerSecond are one-off queries (a page of 100 fleets).
	QueriesPerSecond float64
	// QueryInstances is how many query function instances serve the
	// streams; each is busy, so billed, the whole month.
	QueryInstances int
	// What each function instance is deployed with (Terraform).
	InstanceVCPU, InstanceGiB float64
	// How the ingest and the query side are billed: by instance, as
	// services (Terraform's ingest_mode and query_mode = "service", with
	// ingest_instance_billing and query_instance_billing), or by request,
	// as functions (the module's default modes).
	IngestInstanceBilled, QueryInstanceBilled bool
	// fleetcast's intervals: the publisher's; the query views' full
	// loads (every FollowResync while they follow the change feed, as
	// streams keep them doing) and checks of each cluster
	// (CheckInterval).
	SnapshotInterval, RefreshInterval, FollowResync, CheckInterval time.Duration
	// The baseline republishes every fleet this often.
	BaselineRepublish time.Duration
	// StreamLifetime is how long a stream lasts before its client
	// reconnects (the query function's timeout).
	StreamLifetime time.Duration
	// TraceSampleRatio is the share of traces sampled (Terraform's
	// trace_sample_ratio, for the functions and the publishers alike).
	TraceSampleRatio float64
	// The query side's /metrics as Managed Service for Prometheus's
	// sidecar scrapes it on each instance (query_metrics_export, off by
	// default): every MetricsScrapeInterval, MetricsSeriesPerFleet series
	// per fleet (its replicas, ready, allocated, reserved, rollout; each
	// counter or list adds one) and MetricsSeriesPerCluster per cluster, or,
	// summed (METRICS_AGGREGATE), MetricsSeriesPerFleet and the sum's
	// fleet count (fleetcast_fleets) per cluster and label value
	// (MetricsSumsPerCluster of them).
	MetricsScrapeInterval                          time.Duration
	MetricsSeriesPerFleet, MetricsSeriesPerCluster int
	MetricsSumsPerCluster                          int
	// The alert policies' conditions Terraform creates: per cluster none
	// (one condition finds every stale cluster), and the shared ones
	// (stale clusters, dead letters, drops, lag, query errors, push
	// errors, the allocator's failovers, two burn rates for each of two
	// SLOs), each returning one
	// series per execution (they reduce across series), every
	// AlertExecution (the period of Google's pricing examples).
	AlertConditionsPerCluster, AlertConditionsShared int
	AlertExecution                                   time.Duration
}

// Reference is the deployment BENCHMARKS.md prices: 10 clusters of 1 000
// fleets, 100 status changes per second of which two hot fleets make 20
// each, 20 matchmakers and 10 queries per second.
var Reference = Deployment{
	Clusters: 10, FleetsPerCluster: 1000,
	ChangesPerSecond: 100, HotFleets: 2, HotChangesPerSecond: 20,
	Matchmakers: 20, QueriesPerSecond: 10,
	QueryInstances: 2, // the prod environment's query_min_instances
	InstanceVCPU:   1, InstanceGiB: 0.5,
	// The prod environment's: both sides as services, billed by instance.
	IngestInstanceBilled: true, QueryInstanceBilled: true,
	SnapshotInterval:  publisher.DefaultConfig().SnapshotInterval,
	RefreshInterval:   publisher.DefaultConfig().RefreshInterval,
	FollowResync:      fleetapi.DefaultFollowResync,
	CheckInterval:     fleetapi.DefaultCheckInterval,
	BaselineRepublish: 15 * time.Second,
	StreamLifetime:    time.Hour,
	TraceSampleRatio:  0.01,
	// The sidecar's default interval; the fleets as BenchmarkBill's, by
	// platform (4 values).
	MetricsScrapeInterval: 30 * time.Second,
	MetricsSeriesPerFleet: 6, MetricsSeriesPerCluster: 3, MetricsSumsPerCluster: 4,
	AlertConditionsPerCluster: 0, AlertConditionsShared: 11, AlertExecution: 30 * time.Second,
}

// StreamsPerInstance is how many streams one query instance takes as
// deployed (MAX_STREAMS: query_max_streams, under query_concurrency).
const StreamsPerInstance = 500

// Scaled is d with k times its clusters, changes, hot fleets, matchmakers
// and queries (each cluster the same size), and the query instances its
// streams need (at least d's).
func (d Deployment) Scaled(k int) Deployment {
	out := d
	out.Clusters *= k
	out.ChangesPerSecond *= float64(k)
	out.HotFleets *= k
	out.Matchmakers *= k
	out.QueriesPerSecond *= float64(k)
	out.QueryInstances = max(d.QueryInstances, (out.Matchmakers+StreamsPerInstance-1)/StreamsPerInstance)
	return out
}

// AlertConditions are the conditions of the alert policies Terraform
// creates for d's clusters (terraform/monitoring_test.go counts them in
// a plan).
func (d Deployment) AlertConditions() int {
	return d.Clusters*d.AlertConditionsPerCluster + d.AlertConditionsShared
}

// RequestLogBytes is what Cloud Run's request log
// (run.googleapis.com/requests) adds to Cloud Logging for each request a
// service answers, a push as a query: one entry of about 1 KiB (its
// httpRequest, the revision's resource labels, its trace and span), billed
// as any log. A size from the entries Cloud Run writes, not a measurement:
// the emulators write none.
const RequestLogBytes = 1024

// SpansPerTracedUpsert are the spans one sampled upsert of a fleet
// document the ingest instance knows makes (its version cache spares the
// read, as in the steady state): the publisher's publish span, the Pub/Sub
// client's create, flow control and batching spans and its publish RPC's
// (a trace of its own, linking the message's), then the ingest span, the
// conditional update and its commit (counted by emulator-tests'
// TestOneTraceFromStatusPatchToFirestoreWrite). An upsert the cache
// cannot answer adds the read and its BatchGetDocuments. A query or a
// stream is one span.
const SpansPerTracedUpsert = 8

// Fleets is the deployment's fleet count.
func (d Deployment) Fleets() float64 { return float64(d.Clusters * d.FleetsPerCluster) }

// SpreadChangesPerSecond are the changes not made by the hot fleets.
func (d Deployment) SpreadChangesPerSecond() float64 {
	return d.ChangesPerSecond - float64(d.HotFleets)*d.HotChangesPerSecond
}

// Measured are the costs per unit of work one run of the bill's scenario
// measured (emulator-tests' BenchmarkBill), fleetcast's and the
// baseline's.
type Measured struct {
	Fleetcast FleetcastUnits
	Baseline  BaselineUnits
}

// FleetcastUnits are fleetcast's measured costs per unit of work.
type FleetcastUnits struct {
	// Messages per hot fleet per second; per spread change; refreshes
	// per fleet per refresh interval (the share of fleets that went a
	// whole interval unchanged, at the scenario's change rate per fleet);
	// snapshot messages (parts) per cluster per snapshot interval.
	MsgsPerHotFleetSecond, MsgsPerSpreadChange, RefreshesPerFleetInterval, PartsPerSnapshot float64
	// Pub/Sub volume per message, the 1 000-byte minimum applied.
	BilledBytesPerUpsert, BilledBytesPerPart float64
	// Firestore operations of the ingest function: reads per upsert
	// (refreshes included), writes per change message, and per snapshot
	// part the reconcile's reads and the cluster document's read and write.
	ApplyReadsPerUpsert, WritesPerChange                             float64
	ReconcileReadsPerPart, ClusterReadsPerPart, ClusterWritesPerPart float64
	FullReconcileEvery                                               float64
	// The most ingest instances busy at once on the deployment's trace
	// of pushes (InstanceTime, at the deployed ingest_concurrency): what
	// an instance-billed ingest keeps all month, at the clusters measured
	// (the reference's).
	IngestInstances float64
	// Instance seconds billed per ingest invocation (InstanceTime), log
	// bytes per invocation, and those of them the module's exclusion
	// (ingest_ingested_events) keeps out of storage.
	BilledSecondsPerInvocation, LogBytesPerInvocation, ExcludedLogBytesPerInvocation float64
	// The query function's view, which answers the queries and feeds the
	// streams (queries read nothing of their own): while streams are
	// open its listener reads each fleet document written once
	// (ViewListenReadsPerWrite), and its syncs read the cluster documents
	// and, when the listener has been quiet, the fleets
	// (ViewSyncReadsPerSecond, measured under the scenario's load).
	// Following the change feed (fleetfeed, Terraform's default) rather
	// than a listener, it reads no write (ViewListenReadsPerWrite 0).
	ViewSyncReadsPerSecond, ViewListenReadsPerWrite float64
	// The change feed: messages the ingest function announces per fleet
	// document it writes (a duplicate's re-announcement counts too), and
	// the billed Pub/Sub bytes of each, the 1 000-byte minimum applied.
	// Each query instance's subscription is delivered every one.
	AnnouncementsPerWrite, BilledBytesPerAnnouncement float64
}

// ListenerReadsPerWrite is what Firestore bills a realtime listener: one
// read for each document added to or updated in its results, so one per
// document write for a listener on every fleet (the emulator bills
// nothing, and delivers changes late under load; this is the rule).
const ListenerReadsPerWrite = 1.0

// BaselineUnits are the per-event broadcaster's measured costs per unit.
type BaselineUnits struct {
	MsgsPerChange, MsgsPerFleetRepublish, BilledBytesPerMsg, WritesPerMsg float64
	BilledSecondsPerInvocation, LogBytesPerInvocation                     float64
	ReadsPerQuery, BilledSecondsPerQuery                                  float64
}

// Line is one line of a bill.
type Line struct {
	Component, Item string
	// Formula gives Quantity from the deployment's sizes and the measured
	// units, with their values.
	Formula  string
	Quantity float64
	Unit     string
	// Price is per Unit, in US dollars; Cost = Quantity × Price.
	Price, Cost float64
	// PriceText is the price as the list gives it.
	PriceText string
}

// Bill is one system's monthly bill for a deployment.
type Bill struct {
	System string
	Lines  []Line
	// Matchmaker is what one more directly-listening matchmaker adds.
	Matchmaker Line
	// Options are what a setting that is off by default would add.
	Options []Line
}

// Total is the sum of the lines.
func (b Bill) Total() float64 {
	t := 0.0
	for _, l := range b.Lines {
		t += l.Cost
	}
	return t
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// Fleetcast is fleetcast's monthly bill for d at prices p, from the units
// u measured.
func Fleetcast(d Deployment, u FleetcastUnits, p PriceTable) Bill {
	month := seconds(Month)
	hot := float64(d.HotFleets)
	spread := d.SpreadChangesPerSecond()
	refresh := seconds(d.RefreshInterval)
	snap := seconds(d.SnapshotInterval)
	upserts := hot*u.MsgsPerHotFleetSecond + spread*u.MsgsPerSpreadChange + d.Fleets()*u.RefreshesPerFleetInterval/refresh
	parts := float64(d.Clusters) * u.PartsPerSnapshot / snap
	msgs := upserts + parts
	changes := hot*u.MsgsPerHotFleetSecond + spread*u.MsgsPerSpreadChange
	fleetWrites := changes * u.WritesPerChange
	clusterWrites := parts * u.ClusterWritesPerPart
	writes := fleetWrites + clusterWrites

	upsertsF := fmt.Sprintf("(%s hot × %s + %s spread/s × %s + %s fleets × %s ÷ %s s)",
		n(hot), n(u.MsgsPerHotFleetSecond), n(spread), n(u.MsgsPerSpreadChange), n(d.Fleets()), n(u.RefreshesPerFleetInterval), n(refresh))
	partsF := fmt.Sprintf("%s clusters × %s ÷ %s s", n(float64(d.Clusters)), n(u.PartsPerSnapshot), n(snap))
	msgsF := fmt.Sprintf("(%s + %s)", upsertsF, partsF)
	bytes := (upserts*u.BilledBytesPerUpsert + parts*u.BilledBytesPerPart) * month
	bytesF := fmt.Sprintf("(%s × %s B + %s × %s B) × %s s", upsertsF, n(u.BilledBytesPerUpsert), partsF, n(u.BilledBytesPerPart), n(month))
	instance := d.InstanceVCPU*p.RunPerVCPUSecond + d.InstanceGiB*p.RunPerGiBSecond
	instanceF := fmt.Sprintf("%s vCPU + %s GiB", n(d.InstanceVCPU), n(d.InstanceGiB))
	fullReads := float64(d.FleetsPerCluster) / max(u.PartsPerSnapshot, 1) / max(u.FullReconcileEvery, 1)
	changesF := fmt.Sprintf("(%s hot × %s + %s spread/s × %s)", n(hot), n(u.MsgsPerHotFleetSecond), n(spread), n(u.MsgsPerSpreadChange))

	b := Bill{System: "fleetcast"}
	read := readSide(d, u, fleetWrites, p)
	// The ingest billed per push (a function), and by instance (a
	// service): one is the bill's, the other its option.
	perPush := []Line{
		requests("ingest function", msgs*month, msgsF+" × "+n(month)+" s", p),
		instanceTime("ingest function", msgs*month*u.BilledSecondsPerInvocation, instance, instanceF,
			fmt.Sprintf("%s × %s s × %s s billed per invocation", msgsF, n(month), n(u.BilledSecondsPerInvocation))),
	}
	ingestInstances := math.Max(1, math.Ceil(u.IngestInstances*float64(d.Clusters)/float64(Reference.Clusters)))
	byInstance := instanceBilled(d, p, "ingest service (ingest_mode = \"service\", ingest_instance_billing)", ingestInstances,
		fmt.Sprintf("max(1, ⌈%s instances busy at once at %s clusters × %s ÷ %s clusters⌉)", n(u.IngestInstances), n(float64(Reference.Clusters)),
			n(float64(d.Clusters)), n(float64(Reference.Clusters))))
	ingestLines, ingestOption := perPush, byInstance
	ingestOption.Item = fmt.Sprintf("%s, in place of the ingest function's requests and instance time (%s)", byInstance.Item, usd(total(perPush)))
	if d.IngestInstanceBilled {
		ingestLines = []Line{byInstance}
		ingestOption = Line{Component: "Cloud Run requests and instance time",
			Item:    fmt.Sprintf("ingest_mode = \"function\" (billed per push), in place of the ingest service's instances (%s)", usd(byInstance.Cost)),
			Formula: perPush[0].Formula + " requests; " + perPush[1].Formula, Quantity: perPush[0].Quantity, Unit: "requests",
			Cost: total(perPush), PriceText: perPush[0].PriceText + "; " + perPush[1].PriceText}
	}
	b.Lines = []Line{
		pubsub("publish", bytes, bytesF, p),
		pubsub("push delivery", bytes, bytesF, p),
	}
	b.Lines = append(b.Lines, ingestLines...)
	b.Lines = append(b.Lines, []Line{
		reads("ingest: upserts", upserts*u.ApplyReadsPerUpsert*month,
			fmt.Sprintf("%s × %s × %s s", upsertsF, n(u.ApplyReadsPerUpsert), n(month)), p),
		writesLine("ingest: changes", fleetWrites*month, fmt.Sprintf("%s × %s × %s s", changesF, n(u.WritesPerChange), n(month)), p),
		reads("ingest: snapshot reconcile", parts*(u.ReconcileReadsPerPart+fullReads)*month,
			fmt.Sprintf("%s × (%s + %s fleets ÷ %s parts ÷ %s) × %s s", partsF, n(u.ReconcileReadsPerPart), n(float64(d.FleetsPerCluster)),
				n(u.PartsPerSnapshot), n(u.FullReconcileEvery), n(month)), p),
		reads("ingest: cluster documents", parts*u.ClusterReadsPerPart*month, fmt.Sprintf("%s × %s × %s s", partsF, n(u.ClusterReadsPerPart), n(month)), p),
		writesLine("ingest: cluster documents", clusterWrites*month, fmt.Sprintf("%s × %s × %s s", partsF, n(u.ClusterWritesPerPart), n(month)), p),
		{Component: "Firestore deletes", Item: "tombstones' TTL deletes", Formula: "fleets deleted per month × 1 (none in this deployment)",
			Quantity: 0, Unit: "deletes", Price: p.FirestoreDeletesPer100k / 1e5, PriceText: fmt.Sprintf("$%.2f per 100 000", p.FirestoreDeletesPer100k)},
	}...)
	b.Lines = append(b.Lines, read...)
	b.Lines = append(b.Lines, []Line{
		logging("ingest", msgs*(u.LogBytesPerInvocation-u.ExcludedLogBytesPerInvocation)*month,
			fmt.Sprintf("%s × (%s B − %s B excluded by the module) × %s s", msgsF, n(u.LogBytesPerInvocation),
				n(u.ExcludedLogBytesPerInvocation), n(month)), p),
		// Terraform excludes the accepted pushes' entries from the _Default
		// sink (ingest_accepted_pushes): not stored, not billed. A refused
		// push's is kept; refusals are not modelled.
		logging("ingest: Cloud Run request logs", 0,
			fmt.Sprintf("%s pushes × %d B, excluded by the module (refused pushes' entries kept, not modelled)", msgsF, RequestLogBytes), p),
		traces(d, msgs, msgsF, p),
	}...)
	b.Lines = append(b.Lines, alerting(d, p)...)
	b.Matchmaker = reads("one directly-listening matchmaker", writes*ListenerReadsPerWrite*month,
		fmt.Sprintf("%s writes/s × %s × %s s", n(writes), n(ListenerReadsPerWrite), n(month)), p)
	b.Options = append(metricsExport(d, p), ingestOption, queryOption(d, p),
		logging("store_ingested_event_logs = true: the ingested events' lines stored", msgs*u.ExcludedLogBytesPerInvocation*month,
			fmt.Sprintf("%s × %s B × %s s", msgsF, n(u.ExcludedLogBytesPerInvocation), n(month)), p))
	return b
}

// readSide is fleetcast's read side over a store written fleetWrites
// times a second: the change feed that announces each write to every
// query instance, the query function's views (each instance's syncs, its
// listener's reads of every fleet write when it follows none, its
// resync) serving the queries and the matchmakers' streams, and its
// instances, which the streams keep busy, billed as d bills them.
func readSide(d Deployment, u FleetcastUnits, fleetWrites float64, p PriceTable) []Line {
	month := seconds(Month)
	instances := float64(d.QueryInstances)
	feedBytes := fleetWrites * u.AnnouncementsPerWrite * u.BilledBytesPerAnnouncement * month
	feedF := fmt.Sprintf("%s fleet writes/s × %s announcements per write × %s B × %s s", n(fleetWrites), n(u.AnnouncementsPerWrite),
		n(u.BilledBytesPerAnnouncement), n(month))
	// A check of a cluster is one aggregation, billed a read per 1 000
	// fleets it counts (at least one).
	checks := float64(d.Clusters) * math.Ceil(float64(d.FleetsPerCluster)/1000) / seconds(d.CheckInterval)
	view := instances * (u.ViewSyncReadsPerSecond + u.ViewListenReadsPerWrite*fleetWrites + d.Fleets()/seconds(d.FollowResync) + checks)
	lines := []Line{
		pubsub("change feed: publish", feedBytes, feedF, p),
		pubsub("change feed: delivery to each query instance", instances*feedBytes, n(instances)+" instances × "+feedF, p),
		reads("query side's views (queries and streams)", view*month,
			fmt.Sprintf("%s instances × (%s syncs' reads/s + %s listener reads per fleet write × %s fleet writes/s + %s fleets ÷ %s s full load + %s clusters × ⌈%s fleets ÷ 1 000⌉ ÷ %s s checks) × %s s",
				n(instances), n(u.ViewSyncReadsPerSecond), n(u.ViewListenReadsPerWrite), n(fleetWrites), n(d.Fleets()), n(seconds(d.FollowResync)),
				n(float64(d.Clusters)), n(float64(d.FleetsPerCluster)), n(seconds(d.CheckInterval)), n(month)), p),
	}
	lines = append(lines, queryInstances(d, p)...)
	return append(lines,
		logging("query side: Cloud Run request logs", (d.QueriesPerSecond+float64(d.Matchmakers)/seconds(d.StreamLifetime))*RequestLogBytes*month,
			fmt.Sprintf("(%s queries/s + %s streams ÷ %s s) × %d B × %s s", n(d.QueriesPerSecond), n(float64(d.Matchmakers)), n(seconds(d.StreamLifetime)), RequestLogBytes, n(month)), p),
	)
}

// queryPerRequest is the query side billed by request (the functions):
// its requests, and its instances' time, which the streams keep busy.
func queryPerRequest(d Deployment, p PriceTable) []Line {
	month := seconds(Month)
	instance := d.InstanceVCPU*p.RunPerVCPUSecond + d.InstanceGiB*p.RunPerGiBSecond
	return []Line{
		requests("query function", (d.QueriesPerSecond+float64(d.Matchmakers)/seconds(d.StreamLifetime))*month,
			fmt.Sprintf("(%s queries/s + %s streams ÷ %s s) × %s s", n(d.QueriesPerSecond), n(float64(d.Matchmakers)), n(seconds(d.StreamLifetime)), n(month)), p),
		instanceTime("query function", float64(d.QueryInstances)*month, instance, fmt.Sprintf("%s vCPU + %s GiB", n(d.InstanceVCPU), n(d.InstanceGiB)),
			fmt.Sprintf("%s instances × %s s (streams keep them busy)", n(float64(d.QueryInstances)), n(month))),
	}
}

// queryByInstance is the query side as a service billed by instance
// (query_mode = "service", query_instance_billing): its instances, which
// the streams keep alive the whole month anyway, billed every second at
// the lower price, and no request fee.
func queryByInstance(d Deployment, p PriceTable) Line {
	return instanceBilled(d, p, "query service (query_mode = \"service\", query_instance_billing)", float64(d.QueryInstances), "")
}

// queryInstances are the query side's instance lines as d bills them.
func queryInstances(d Deployment, p PriceTable) []Line {
	if d.QueryInstanceBilled {
		return []Line{queryByInstance(d, p)}
	}
	return queryPerRequest(d, p)
}

// queryOption is the query side billed the other way than d bills it,
// in place of what d pays.
func queryOption(d Deployment, p PriceTable) Line {
	perRequest, byInstance := queryPerRequest(d, p), queryByInstance(d, p)
	if d.QueryInstanceBilled {
		return Line{Component: "Cloud Run requests and instance time",
			Item:    fmt.Sprintf("query_mode = \"function\" (billed by request), in place of the query service's instances (%s)", usd(byInstance.Cost)),
			Formula: perRequest[0].Formula + " requests; " + perRequest[1].Formula, Quantity: perRequest[0].Quantity, Unit: "requests",
			Cost: total(perRequest), PriceText: perRequest[0].PriceText + "; " + perRequest[1].PriceText}
	}
	byInstance.Item = fmt.Sprintf("%s, in place of the query function's instance time and requests (%s)", byInstance.Item, usd(total(perRequest)))
	return byInstance
}

// instanceBilled is a Cloud Run service's instances billed by instance:
// every second of each instance's life at the instance-based price, no
// request fee. instancesF says where the count comes from, if anywhere.
func instanceBilled(d Deployment, p PriceTable, item string, instances float64, instancesF string) Line {
	month := seconds(Month)
	price := d.InstanceVCPU*p.RunInstancePerVCPUSecond + d.InstanceGiB*p.RunInstancePerGiBSecond
	count := n(instances) + " instances"
	if instancesF != "" {
		count = n(instances) + " instances (" + instancesF + ")"
	}
	return Line{Component: "Cloud Run instance time", Item: fmt.Sprintf("%s (%s vCPU + %s GiB)", item, n(d.InstanceVCPU), n(d.InstanceGiB)),
		Formula: fmt.Sprintf("%s × %s s × (%s vCPU × $%s + %s GiB × $%s)", count, n(month), n(d.InstanceVCPU), n(p.RunInstancePerVCPUSecond),
			n(d.InstanceGiB), n(p.RunInstancePerGiBSecond)),
		Quantity: instances * month, Unit: "instance-seconds", Price: price,
		PriceText: fmt.Sprintf("$%s per instance-second", n(price))}.costed()
}

// total is the lines' cost.
func total(lines []Line) float64 {
	return Bill{Lines: lines}.Total()
}

// usd formats a cost in dollars and cents.
func usd(v float64) string { return fmt.Sprintf("$%.2f", v) }

// traces is Cloud Trace's line: the sampled share of the messages' and the
// queries' spans.
func traces(d Deployment, msgs float64, msgsF string, p PriceTable) Line {
	month := seconds(Month)
	queries := d.QueriesPerSecond + float64(d.Matchmakers)/seconds(d.StreamLifetime)
	spans := d.TraceSampleRatio * (msgs*SpansPerTracedUpsert + queries) * month
	return Line{Component: "Cloud Trace", Item: fmt.Sprintf("spans sampled (trace_sample_ratio %s)", n(d.TraceSampleRatio)),
		Formula: fmt.Sprintf("%s × (%s messages/s × %d spans + (%s queries/s + %s streams ÷ %s s) × 1) × %s s",
			n(d.TraceSampleRatio), msgsF, SpansPerTracedUpsert, n(d.QueriesPerSecond), n(float64(d.Matchmakers)), n(seconds(d.StreamLifetime)), n(month)),
		Quantity: spans, Unit: "spans", Price: p.TracePerMillionSpans / 1e6,
		PriceText: fmt.Sprintf("$%.2f per million", p.TracePerMillionSpans)}.costed()
}

// alerting is what Cloud Monitoring bills for the alert policies.
func alerting(d Deployment, p PriceTable) []Line {
	month := seconds(Month)
	conditions := float64(d.AlertConditions())
	condF := fmt.Sprintf("%s clusters × %d + %d", n(float64(d.Clusters)), d.AlertConditionsPerCluster, d.AlertConditionsShared)
	executions := month / seconds(d.AlertExecution)
	return []Line{
		Line{Component: "Cloud Monitoring alerting", Item: "alert conditions", Formula: condF, Quantity: conditions, Unit: "conditions",
			Price: p.AlertPerCondition, PriceText: fmt.Sprintf("$%.2f per condition a month", p.AlertPerCondition)}.costed(),
		Line{Component: "Cloud Monitoring alerting", Item: "time series returned", Formula: fmt.Sprintf("(%s) × 1 series × %s s ÷ %s s", condF, n(month), n(seconds(d.AlertExecution))),
			Quantity: conditions * executions, Unit: "series", Price: p.AlertPerMillionSeries / 1e6,
			PriceText: fmt.Sprintf("$%.2f per million", p.AlertPerMillionSeries)}.costed(),
	}
}

// metricsExport is what query_metrics_export adds: each query instance's
// sidecar writes every series of /metrics each scrape, per fleet and
// summed.
func metricsExport(d Deployment, p PriceTable) []Line {
	month := seconds(Month)
	scrape := seconds(d.MetricsScrapeInterval)
	clusters, instances := float64(d.Clusters), float64(d.QueryInstances)
	line := func(item string, series float64, seriesF string) Line {
		return Line{Component: "Managed Service for Prometheus", Item: item,
			Formula:  fmt.Sprintf("%s instances × %s series ÷ %s s × %s s", n(instances), seriesF, n(scrape), n(month)),
			Quantity: instances * series / scrape * month, Unit: "samples", Price: p.PrometheusPerMillionSamples / 1e6,
			PriceText: fmt.Sprintf("$%.2f per million", p.PrometheusPerMillionSamples)}.costed()
	}
	perCluster := float64(d.MetricsSeriesPerCluster)
	perFleet := float64(d.MetricsSeriesPerFleet)
	return []Line{
		line("query_metrics_export, per fleet", d.Fleets()*perFleet+clusters*perCluster,
			fmt.Sprintf("(%s fleets × %s + %s clusters × %s)", n(d.Fleets()), n(perFleet), n(clusters), n(perCluster))),
		line("query_metrics_export, summed (METRICS_AGGREGATE)", clusters*(float64(d.MetricsSumsPerCluster)*(perFleet+1)+perCluster),
			fmt.Sprintf("%s clusters × (%s sums × (%s + 1) + %s)", n(clusters), n(float64(d.MetricsSumsPerCluster)), n(perFleet), n(perCluster))),
	}
}

// FairBaseline is the per-event broadcaster's bill with fleetcast's read
// side: its publishers, messages, consumer and writes as Baseline's, and
// its readers served as fleetcast serves them (readSide, with fleetcast's
// measured view costs over the baseline's writes) instead of each
// matchmaker listening to Firestore and each query reading it. What is
// left between it and fleetcast is what coalescing saves.
func FairBaseline(d Deployment, m Measured, p PriceTable) Bill {
	full := Baseline(d, m.Baseline, p)
	b := Bill{System: "baseline with fleetcast's read side"}
	for _, l := range full.Lines {
		if l.Item == "matchmakers' listeners" || l.Item == "one-off queries" || strings.HasPrefix(l.Item, "query function") {
			continue // the read side, replaced
		}
		b.Lines = append(b.Lines, l)
	}
	b.Lines = append(b.Lines, readSide(d, m.Fleetcast, baselineWrites(d, m.Baseline), p)...)
	b.Matchmaker = full.Matchmaker
	return b
}

// baselineWrites are the broadcaster's Firestore writes per second.
func baselineWrites(d Deployment, u BaselineUnits) float64 {
	return (d.ChangesPerSecond*u.MsgsPerChange + d.Fleets()*u.MsgsPerFleetRepublish/seconds(d.BaselineRepublish)) * u.WritesPerMsg
}

// Baseline is the per-event broadcaster's monthly bill for d at prices p,
// from the units u measured: every informer event and every fleet each
// republish period is a message, written to Firestore as it comes; the
// matchmakers listen to Firestore, and queries read it.
func Baseline(d Deployment, u BaselineUnits, p PriceTable) Bill {
	month := seconds(Month)
	republish := seconds(d.BaselineRepublish)
	msgs := d.ChangesPerSecond*u.MsgsPerChange + d.Fleets()*u.MsgsPerFleetRepublish/republish
	msgsF := fmt.Sprintf("(%s changes/s × %s + %s fleets × %s ÷ %s s)", n(d.ChangesPerSecond), n(u.MsgsPerChange), n(d.Fleets()),
		n(u.MsgsPerFleetRepublish), n(republish))
	writes := msgs * u.WritesPerMsg
	instance := d.InstanceVCPU*p.RunPerVCPUSecond + d.InstanceGiB*p.RunPerGiBSecond
	instanceF := fmt.Sprintf("%s vCPU + %s GiB", n(d.InstanceVCPU), n(d.InstanceGiB))
	bytesF := fmt.Sprintf("%s × %s B × %s s", msgsF, n(u.BilledBytesPerMsg), n(month))
	b := Bill{System: "baseline"}
	b.Lines = []Line{
		pubsub("publish", msgs*u.BilledBytesPerMsg*month, bytesF, p),
		pubsub("push delivery", msgs*u.BilledBytesPerMsg*month, bytesF, p),
		requests("consumer function", msgs*month, msgsF+" × "+n(month)+" s", p),
		instanceTime("consumer function", msgs*month*u.BilledSecondsPerInvocation, instance, instanceF,
			fmt.Sprintf("%s × %s s × %s s billed per invocation", msgsF, n(month), n(u.BilledSecondsPerInvocation))),
		writesLine("consumer: every message", writes*month, fmt.Sprintf("%s × %s × %s s", msgsF, n(u.WritesPerMsg), n(month)), p),
		reads("matchmakers' listeners", float64(d.Matchmakers)*writes*ListenerReadsPerWrite*month,
			fmt.Sprintf("%s matchmakers × %s writes/s × %s × %s s", n(float64(d.Matchmakers)), n(writes), n(ListenerReadsPerWrite), n(month)), p),
		reads("one-off queries", d.QueriesPerSecond*u.ReadsPerQuery*month,
			fmt.Sprintf("%s/s × %s × %s s", n(d.QueriesPerSecond), n(u.ReadsPerQuery), n(month)), p),
		requests("query function", d.QueriesPerSecond*month, fmt.Sprintf("%s/s × %s s", n(d.QueriesPerSecond), n(month)), p),
		instanceTime("query function", d.QueriesPerSecond*month*u.BilledSecondsPerQuery, instance, instanceF,
			fmt.Sprintf("%s/s × %s s × %s s billed per query", n(d.QueriesPerSecond), n(month), n(u.BilledSecondsPerQuery))),
		logging("consumer function", msgs*u.LogBytesPerInvocation*month,
			fmt.Sprintf("%s × %s B × %s s", msgsF, n(u.LogBytesPerInvocation), n(month)), p),
		logging("consumer function: Cloud Run request logs", msgs*RequestLogBytes*month,
			fmt.Sprintf("%s pushes × %d B × %s s", msgsF, RequestLogBytes, n(month)), p),
		logging("query function: Cloud Run request logs", d.QueriesPerSecond*RequestLogBytes*month,
			fmt.Sprintf("%s/s × %d B × %s s", n(d.QueriesPerSecond), RequestLogBytes, n(month)), p),
	}
	b.Matchmaker = reads("one directly-listening matchmaker", writes*ListenerReadsPerWrite*month,
		fmt.Sprintf("%s writes/s × %s × %s s", n(writes), n(ListenerReadsPerWrite), n(month)), p)
	return b
}

func pubsub(item string, bytes float64, formula string, p PriceTable) Line {
	return Line{Component: "Pub/Sub", Item: item, Formula: formula, Quantity: bytes / (1 << 40), Unit: "TiB", Price: p.PubSubPerTiB,
		PriceText: fmt.Sprintf("$%s per TiB", n(p.PubSubPerTiB))}.costed()
}

func requests(item string, n float64, formula string, p PriceTable) Line {
	return Line{Component: "Cloud Run requests", Item: item, Formula: formula, Quantity: n, Unit: "requests", Price: p.RunPerMillionRequests / 1e6,
		PriceText: fmt.Sprintf("$%.2f per million", p.RunPerMillionRequests)}.costed()
}

func instanceTime(item string, instanceSeconds, pricePerSecond float64, size, formula string) Line {
	return Line{Component: "Cloud Run instance time", Item: item + " (" + size + ")", Formula: formula, Quantity: instanceSeconds,
		Unit: "instance-seconds", Price: pricePerSecond, PriceText: fmt.Sprintf("$%s per instance-second", n(pricePerSecond))}.costed()
}

func reads(item string, n float64, formula string, p PriceTable) Line {
	return Line{Component: "Firestore reads", Item: item, Formula: formula, Quantity: n, Unit: "reads", Price: p.FirestoreReadsPer100k / 1e5,
		PriceText: fmt.Sprintf("$%.2f per 100 000", p.FirestoreReadsPer100k)}.costed()
}

func writesLine(item string, n float64, formula string, p PriceTable) Line {
	return Line{Component: "Firestore writes", Item: item, Formula: formula, Quantity: n, Unit: "writes", Price: p.FirestoreWritesPer100k / 1e5,
		PriceText: fmt.Sprintf("$%.2f per 100 000", p.FirestoreWritesPer100k)}.costed()
}

func logging(item string, bytes float64, formula string, p PriceTable) Line {
	return Line{Component: "Cloud Logging", Item: item, Formula: formula, Quantity: bytes / (1 << 30), Unit: "GiB", Price: p.LoggingPerGiB,
		PriceText: fmt.Sprintf("$%.2f per GiB", p.LoggingPerGiB)}.costed()
}

func (l Line) costed() Line {
	l.Cost = l.Quantity * l.Price
	return l
}

// n formats a number of a formula: up to four significant digits, digits
// grouped by three.
func n(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return group(strconv.FormatFloat(v, 'f', 0, 64))
	}
	return group(strconv.FormatFloat(v, 'f', max(0, 3-int(math.Floor(math.Log10(math.Abs(v))))), 64))
}

// group separates a number's whole digits by threes with a space.
func group(s string) string {
	whole, frac, _ := strings.Cut(s, ".")
	frac = strings.TrimRight(frac, "0")
	neg := strings.HasPrefix(whole, "-")
	whole = strings.TrimPrefix(whole, "-")
	var b strings.Builder
	if neg {
		b.WriteString("-")
	}
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteString(" ")
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return b.String()
}

// metrics names each measured unit as BenchmarkBill reports it.
func (m *Measured) metrics() []struct {
	name string
	v    *float64
} {
	f, b := &m.Fleetcast, &m.Baseline
	return []struct {
		name string
		v    *float64
	}{
		{"fc-msgs/hot-fleet-s", &f.MsgsPerHotFleetSecond},
		{"fc-msgs/spread-change", &f.MsgsPerSpreadChange},
		{"fc-refreshes/fleet-interval", &f.RefreshesPerFleetInterval},
		{"fc-parts/snapshot", &f.PartsPerSnapshot},
		{"fc-billed-bytes/upsert", &f.BilledBytesPerUpsert},
		{"fc-billed-bytes/part", &f.BilledBytesPerPart},
		{"fc-apply-reads/upsert", &f.ApplyReadsPerUpsert},
		{"fc-writes/change", &f.WritesPerChange},
		{"fc-reconcile-reads/part", &f.ReconcileReadsPerPart},
		{"fc-cluster-reads/part", &f.ClusterReadsPerPart},
		{"fc-cluster-writes/part", &f.ClusterWritesPerPart},
		{"fc-full-reconcile-every", &f.FullReconcileEvery},
		{"fc-billed-s/invocation", &f.BilledSecondsPerInvocation},
		{"fc-ingest-instances", &f.IngestInstances},
		{"fc-log-bytes/invocation", &f.LogBytesPerInvocation},
		{"fc-excluded-log-bytes/invocation", &f.ExcludedLogBytesPerInvocation},
		{"fc-view-sync-reads/s", &f.ViewSyncReadsPerSecond},
		{"fc-view-listen-reads/write", &f.ViewListenReadsPerWrite},
		{"fc-announcements/write", &f.AnnouncementsPerWrite},
		{"fc-billed-bytes/announcement", &f.BilledBytesPerAnnouncement},
		{"bl-msgs/change", &b.MsgsPerChange},
		{"bl-msgs/fleet-republish", &b.MsgsPerFleetRepublish},
		{"bl-billed-bytes/msg", &b.BilledBytesPerMsg},
		{"bl-writes/msg", &b.WritesPerMsg},
		{"bl-billed-s/invocation", &b.BilledSecondsPerInvocation},
		{"bl-log-bytes/invocation", &b.LogBytesPerInvocation},
		{"bl-reads/query", &b.ReadsPerQuery},
		{"bl-billed-s/query", &b.BilledSecondsPerQuery},
	}
}

// Report passes each measured unit to report, under the metric name
// FromMetrics reads it back by.
func (m Measured) Report(report func(name string, v float64)) {
	for _, f := range m.metrics() {
		report(f.name, *f.v)
	}
}

// FromMetrics reads the measured units from a benchmark run's metrics;
// a missing metric is an error.
func FromMetrics(get func(name string) (float64, error)) (Measured, error) {
	var m Measured
	for _, f := range m.metrics() {
		v, err := get(f.name)
		if err != nil {
			return Measured{}, err
		}
		*f.v = v
	}
	return m, nil
}
