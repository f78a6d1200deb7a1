# --- Monitoring: log-based metrics, alerts, SLOs, a dashboard -----------------
#
# The log-based metrics count what the functions log (package logging's
# keys): terraform/monitoring_test.go runs the ingest function on the
# emulator, turns its log lines into the entries Cloud Run's agent writes,
# and evaluates every filter and extractor here against them, so that a
# renamed log field fails `make test`. docs/operations.md says what each
# alert means and what to do.

locals {
  ingest_name = "${var.name_prefix}-ingest"
  query_name  = "${var.name_prefix}-query"
  user_metric = "logging.googleapis.com/user"
  # The ingest function's structured lines: Cloud Run's agent parses each
  # JSON line of its stdout into jsonPayload, and its service is named
  # after the function.
  ingest_logs = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=\"${local.ingest_name}\""
  ingested    = "${local.ingest_logs} AND jsonPayload.message=\"fleet event ingested\""
  # Cloud Run's own log of each request the query side served; watch
  # streams last until the client or the timeout ends them, so they are no
  # request latency.
  query_requests = join(" AND ", [
    "resource.type=\"cloud_run_revision\"",
    "resource.labels.service_name=\"${local.query_name}\"",
    "logName=\"projects/${var.project_id}/logs/run.googleapis.com%2Frequests\"",
    "NOT httpRequest.requestUrl:\"/v1/watch\"",
    "NOT httpRequest.requestUrl:\"/WatchFleets\"",
  ])
  # Cloud Run's count of the query side's answers, and Pub/Sub's of its
  # pushes into the ingest function.
  query_request_count = "metric.type=\"run.googleapis.com/request_count\" AND resource.type=\"cloud_run_revision\" AND resource.labels.service_name=\"${local.query_name}\""
  # Every query service: the function (or the Cloud Run service), each
  # partition's (NAME_PREFIX-query-KEY) and the merged one.
  query_services_request_count = "metric.type=\"run.googleapis.com/request_count\" AND resource.type=\"cloud_run_revision\" AND resource.labels.service_name=starts_with(\"${local.query_name}\")"
  ingest_pushes                = "metric.type=\"pubsub.googleapis.com/subscription/push_request_count\" AND resource.type=\"pubsub_subscription\" AND resource.labels.subscription_id=starts_with(\"${var.name_prefix}-ingest-\")"
  # Cloud Monitoring counts an absence in whole minutes, at least two.
  stale_after_seconds = tonumber(trimsuffix(trimsuffix(var.stale_after, "s"), "m")) * (endswith(var.stale_after, "m") ? 60 : 1)
  stale_alert_after   = "${max(120, ceil(local.stale_after_seconds / 60) * 60)}s"
  lag_bound_ms        = tonumber(trimsuffix(trimsuffix(var.alert_ingest_lag_p99, "ms"), "s")) * (endswith(var.alert_ingest_lag_p99, "ms") ? 1 : 1000)
  alert_documentation = "See docs/operations.md, \"Alerts\", in the fleetcast repository."
  # The heartbeats metric in PromQL, and the clusters with none in the
  # stale window: each known cluster as a series of its own, less those
  # the metric has a point of.
  heartbeats_parts  = regex("^([^/]*)/(.*)$", "${local.user_metric}/${google_logging_metric.heartbeats.name}")
  heartbeats_promql = "${replace(local.heartbeats_parts[0], "/[^a-zA-Z0-9_]/", "_")}:${replace(local.heartbeats_parts[1], "/[^a-zA-Z0-9_]/", "_")}"
  stale_clusters_query = join("", [
    "(", join(" or ", [for c in sort(keys(var.clusters)) : "label_replace(vector(1), \"cluster\", \"${c}\", \"\", \"\")"]), ")",
    " unless on (cluster) count by (cluster) (count_over_time(${local.heartbeats_promql}{monitored_resource=\"cloud_run_revision\"}[${local.stale_alert_after}]))",
  ])
}

# Cloud Run's request log of each push the ingest function accepted: one
# entry of about 1 KiB per fleet event (bill.RequestLogBytes) that says
# nothing the function's own lines do not. Excluded from the _Default
# sink, they are neither stored nor billed; a refused push's entry (status
# 400 or more) is kept. The log-based metrics above still count every entry
# the project receives, excluded or not ("user-defined log-based metrics
# are calculated from all logs received by the Logging API ... regardless
# of any inclusion filters or exclusion filters", Cloud Logging's
# log-based metrics overview); none of them reads these entries anyway.
resource "google_logging_project_exclusion" "ingest_accepted_pushes" {
  project     = var.project_id
  name        = "${var.name_prefix}-ingest-accepted-pushes"
  description = "Cloud Run's request log entries of the pushes ${local.ingest_name} accepted (about 1 KiB each, one per fleet event); refused pushes' entries are kept."
  filter = join(" AND ", [
    "resource.type=\"cloud_run_revision\"",
    "resource.labels.service_name=\"${local.ingest_name}\"",
    "logName=\"projects/${var.project_id}/logs/run.googleapis.com%2Frequests\"",
    "httpRequest.status<400",
  ])
  depends_on = [time_sleep.services]
}

# The ingest function's "fleet event ingested" lines below WARNING: one
# per event that changed a document (about 600 bytes), the source of the
# log-based metrics ingest_outcome, ingest_lag and heartbeats, which count
# every entry the project receives, excluded or not (as above). Excluded
# from the _Default sink unless store_ingested_event_logs: the metrics,
# alerts and charts stay whole, the lines are not stored. Drops, failures
# and refusals are WARNING or ERROR lines, and kept.
resource "google_logging_project_exclusion" "ingest_ingested_events" {
  count       = var.store_ingested_event_logs ? 0 : 1
  project     = var.project_id
  name        = "${var.name_prefix}-ingest-ingested-events"
  description = "The \"fleet event ingested\" lines of ${local.ingest_name} below WARNING (one per event that changed a document); the log-based metrics still count them."
  filter      = "${local.ingested} AND severity<WARNING"
  depends_on  = [time_sleep.services]
}

resource "google_logging_metric" "ingest_dropped" {
  project = var.project_id
  name    = "${var.name_prefix}/ingest_dropped"
  filter  = "${local.ingest_logs} AND jsonPayload.reasonCode:*"
  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "fleetcast: fleet events dropped"
    labels {
      key         = "reason_code"
      description = "Why: not-pubsub, unbound-topic, invalid, foreign-cluster, clock-skew or store-refused."
    }
    labels {
      key         = "cluster"
      description = "The cluster the event claimed, when it could be read."
    }
  }
  label_extractors = {
    reason_code = "EXTRACT(jsonPayload.reasonCode)"
    cluster     = "EXTRACT(jsonPayload.cluster)"
  }
  depends_on = [time_sleep.services]
}

resource "google_logging_metric" "ingest_outcome" {
  project = var.project_id
  name    = "${var.name_prefix}/ingest_outcome"
  filter  = local.ingested
  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "fleetcast: fleet events that changed the state"
    labels {
      key         = "outcome"
      description = "created, updated, deleted, reconciled, …: what the event did to Firestore."
    }
    labels {
      key         = "kind"
      description = "FLEET_UPSERT, FLEET_DELETE or CLUSTER_SNAPSHOT."
    }
    labels {
      key         = "cluster"
      description = "The event's cluster."
    }
  }
  label_extractors = {
    outcome = "EXTRACT(jsonPayload.outcome)"
    kind    = "EXTRACT(jsonPayload.kind)"
    cluster = "EXTRACT(jsonPayload.cluster)"
  }
  depends_on = [time_sleep.services]
}

resource "google_logging_metric" "ingest_lag" {
  project         = var.project_id
  name            = "${var.name_prefix}/ingest_lag"
  filter          = "${local.ingested} AND jsonPayload.kind=(\"FLEET_UPSERT\" OR \"FLEET_DELETE\")"
  value_extractor = "EXTRACT(jsonPayload.lagMillis)"
  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "DISTRIBUTION"
    unit         = "ms"
    display_name = "fleetcast: ingest lag, publisher observation to Firestore write"
    labels {
      key         = "cluster"
      description = "The event's cluster."
    }
  }
  label_extractors = {
    cluster = "EXTRACT(jsonPayload.cluster)"
  }
  bucket_options {
    exponential_buckets {
      num_finite_buckets = 48
      growth_factor      = 1.5
      scale              = 1
    }
  }
  depends_on = [time_sleep.services]
}

resource "google_logging_metric" "heartbeats" {
  project = var.project_id
  name    = "${var.name_prefix}/heartbeats"
  filter  = "${local.ingested} AND jsonPayload.kind=\"CLUSTER_SNAPSHOT\""
  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "fleetcast: snapshot parts reconciled (heartbeats)"
    labels {
      key         = "cluster"
      description = "The snapshot's cluster."
    }
  }
  label_extractors = {
    cluster = "EXTRACT(jsonPayload.cluster)"
  }
  depends_on = [time_sleep.services]
}

resource "google_logging_metric" "query_latency" {
  project         = var.project_id
  name            = "${var.name_prefix}/query_latency"
  filter          = local.query_requests
  value_extractor = "REGEXP_EXTRACT(httpRequest.latency, \"^([0-9.]+)s$\")"
  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "DISTRIBUTION"
    unit         = "s"
    display_name = "fleetcast: query latency (requests, not streams)"
  }
  bucket_options {
    exponential_buckets {
      num_finite_buckets = 40
      growth_factor      = 1.4
      scale              = 0.001
    }
  }
  depends_on = [time_sleep.services]
}

# --- Alerts ------------------------------------------------------------------

# A cluster's heartbeats stopped (no snapshot part reconciled for
# STALE_AFTER), so the query side reports it stale and leaves its fleets
# out. One condition for every cluster, an incident per stale one: the
# clusters Terraform knows, less those with a heartbeat in the window, in
# PromQL over the heartbeats metric (Cloud Monitoring's name for it: the
# first "/" a ":", every other character not a letter, digit or "_" an
# "_"). A cluster that never sent one alerts too. One condition rather
# than one per cluster: Cloud Monitoring bills each condition a month.
resource "google_monitoring_alert_policy" "clusters_stale" {
  count                 = length(var.clusters) > 0 ? 1 : 0
  project               = var.project_id
  display_name          = "fleetcast: a cluster is stale"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  conditions {
    display_name = "A cluster with no heartbeat for ${local.stale_alert_after}"
    condition_prometheus_query_language {
      query               = local.stale_clusters_query
      duration            = "60s"
      evaluation_interval = "60s"
    }
  }
  documentation {
    content   = "The publisher of cluster $${metric.label.cluster} sent no snapshot for ${local.stale_alert_after}: its fleets are left out of every answer. ${local.alert_documentation}"
    mime_type = "text/markdown"
  }
  depends_on = [time_sleep.services]
}

# The stale alert replaced one policy per cluster.
removed {
  from = google_monitoring_alert_policy.cluster_stale
  lifecycle {
    destroy = true
  }
}

resource "google_monitoring_alert_policy" "dead_letter" {
  project               = var.project_id
  display_name          = "fleetcast: fleet events dead-lettered"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  conditions {
    display_name = "Messages in ${google_pubsub_subscription.dead_letter.name}"
    condition_threshold {
      filter          = "metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type=\"pubsub_subscription\" AND resource.labels.subscription_id=\"${google_pubsub_subscription.dead_letter.name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"
      aggregations {
        alignment_period   = "300s"
        per_series_aligner = "ALIGN_MAX"
      }
    }
  }
  documentation {
    content   = "Pub/Sub gave up on fleet events after ${var.max_delivery_attempts} attempts: the ingest function could not apply them. ${local.alert_documentation}"
    mime_type = "text/markdown"
  }
  depends_on = [time_sleep.services]
}

resource "google_monitoring_alert_policy" "dropped" {
  project               = var.project_id
  display_name          = "fleetcast: fleet events dropped"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  conditions {
    display_name = "Drops above ${var.alert_drops_per_minute} a minute, by reason"
    condition_threshold {
      filter          = "metric.type=\"${local.user_metric}/${google_logging_metric.ingest_dropped.name}\" AND resource.type=\"cloud_run_revision\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_drops_per_minute / 60
      duration        = "300s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["metric.label.reason_code"]
      }
    }
  }
  documentation {
    content   = "The ingest function acknowledged fleet events without applying them. ${local.alert_documentation}"
    mime_type = "text/markdown"
  }
  depends_on = [time_sleep.services]
}

# The merged query function's lines of a partition that did not answer
# (fleetapi.UnansweredMessage): it answers without that partition's
# clusters, with a 200, so no 5xx counts it. Matches nothing without
# partitions.
resource "google_logging_metric" "partition_unanswered" {
  project = var.project_id
  name    = "${var.name_prefix}/partition_unanswered"
  filter  = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=\"${local.query_name}-merged\" AND jsonPayload.message=\"a partition did not answer\""
  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "fleetcast: a partition did not answer the merged query function"
    labels {
      key         = "partition"
      description = "The partition's query function URL."
    }
    labels {
      key         = "request"
      description = "What it was asked: fleets, fleet, clusters, cluster, labels, placements or watch."
    }
  }
  label_extractors = {
    partition = "EXTRACT(jsonPayload.partition)"
    request   = "EXTRACT(jsonPayload.request)"
  }
  depends_on = [time_sleep.services]
}

# A partition the merged function cannot reach for 5 minutes: its
# clusters are stale in every merged answer.
resource "google_monitoring_alert_policy" "partition_unanswered" {
  count                 = length(var.query_partitions) > 0 ? 1 : 0
  project               = var.project_id
  display_name          = "fleetcast: a query partition does not answer"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  conditions {
    display_name = "Unanswered requests to a partition, every minute for 5 minutes"
    condition_threshold {
      filter          = "metric.type=\"${local.user_metric}/${google_logging_metric.partition_unanswered.name}\" AND resource.type=\"cloud_run_revision\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "300s"
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["metric.label.partition"]
      }
    }
  }
  documentation {
    content   = "The merged query function answers without a partition's clusters: they are stale in every merged answer. ${local.alert_documentation}"
    mime_type = "text/markdown"
  }
  depends_on = [time_sleep.services]
}

resource "google_monitoring_alert_policy" "ingest_lag" {
  project               = var.project_id
  display_name          = "fleetcast: ingest lag p99 above ${var.alert_ingest_lag_p99}"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  conditions {
    display_name = "p99 of publisher observation to Firestore write"
    condition_threshold {
      filter          = "metric.type=\"${local.user_metric}/${google_logging_metric.ingest_lag.name}\" AND resource.type=\"cloud_run_revision\""
      comparison      = "COMPARISON_GT"
      threshold_value = local.lag_bound_ms
      duration        = "300s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_PERCENTILE_99"
      }
    }
  }
  documentation {
    content   = "Fleet changes take longer than ${var.alert_ingest_lag_p99} to reach Firestore. ${local.alert_documentation}"
    mime_type = "text/markdown"
  }
  depends_on = [time_sleep.services]
}

resource "google_monitoring_alert_policy" "query_errors" {
  project               = var.project_id
  display_name          = "fleetcast: query 5xx ratio above ${var.alert_query_5xx_ratio}"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  # Each query service on its own (the function, each partition's, the
  # merged one): a partition failing is not diluted by the others.
  conditions {
    display_name = "5xx answers of a ${local.query_name} service"
    condition_threshold {
      filter             = "${local.query_services_request_count} AND metric.labels.response_code_class=\"5xx\""
      denominator_filter = local.query_services_request_count
      comparison         = "COMPARISON_GT"
      threshold_value    = var.alert_query_5xx_ratio
      duration           = "300s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.labels.service_name"]
      }
      denominator_aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.labels.service_name"]
      }
    }
  }
  documentation {
    content   = "More than ${var.alert_query_5xx_ratio * 100}% of the query side's answers are server errors. ${local.alert_documentation}"
    mime_type = "text/markdown"
  }
  depends_on = [time_sleep.services]
}

# fleetcast-allocator's failovers: allocations made by another cluster
# than the first tried, after it was full, unreachable or refused the
# certificate (fleetcast_allocator_failed_over_total), as a share of its
# allocations. Read from Google Cloud Managed Service for Prometheus, which
# scrapes the allocator when its chart's metrics.podMonitoring is on; with
# no allocator the series do not exist and it never fires.
resource "google_monitoring_alert_policy" "allocator_failover" {
  project               = var.project_id
  display_name          = "fleetcast: allocations failing over above ${var.alert_allocator_failover_ratio}"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  conditions {
    display_name = "Share of fleetcast-allocator's allocations not made by the first cluster tried, over 10 minutes"
    condition_prometheus_query_language {
      query               = "sum(rate(fleetcast_allocator_failed_over_total[10m])) / sum(rate(fleetcast_allocator_allocations_total{outcome=\"allocated\"}[10m])) > ${var.alert_allocator_failover_ratio}"
      duration            = "600s"
      evaluation_interval = "60s"
    }
  }
  documentation {
    content   = "More than ${var.alert_allocator_failover_ratio * 100}% of the allocations fleetcast-allocator made came from another cluster than the first it tried: the clusters it tries first are full before fleetcast's view says so, unreachable, or refuse its certificate. ${local.alert_documentation}"
    mime_type = "text/markdown"
  }
  depends_on = [time_sleep.services]
}

# Pub/Sub's pushes that the ingest function did not acknowledge. Some are
# by design — 429 while instances start, 500 when a cluster is over its
# share (MAX_CLUSTER_IN_FLIGHT) — so the bound is a ratio, over 15 minutes.
resource "google_monitoring_alert_policy" "push_errors" {
  project               = var.project_id
  display_name          = "fleetcast: push deliveries failing above ${var.alert_push_error_ratio}"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  conditions {
    display_name = "Pushes into ${local.ingest_name} not acknowledged"
    condition_threshold {
      filter             = "${local.ingest_pushes} AND NOT metric.labels.response_class=\"ack\""
      denominator_filter = local.ingest_pushes
      comparison         = "COMPARISON_GT"
      threshold_value    = var.alert_push_error_ratio
      duration           = "900s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
      }
      denominator_aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }
  documentation {
    content   = "Pub/Sub cannot deliver fleet events to the ingest function. ${local.alert_documentation}"
    mime_type = "text/markdown"
  }
  depends_on = [time_sleep.services]
}

# --- SLOs on the query side, with burn-rate alerts ------------------------------

resource "google_monitoring_custom_service" "query" {
  project      = var.project_id
  service_id   = local.query_name
  display_name = "fleetcast query side (${local.query_name})"
  depends_on   = [time_sleep.services]
}

resource "google_monitoring_slo" "query_availability" {
  project             = var.project_id
  service             = google_monitoring_custom_service.query.service_id
  slo_id              = "availability"
  display_name        = "${var.slo_query_availability * 100}% of answers are not server errors, over 28 days"
  goal                = var.slo_query_availability
  rolling_period_days = 28
  request_based_sli {
    good_total_ratio {
      bad_service_filter   = "${local.query_request_count} AND metric.labels.response_code_class=\"5xx\""
      total_service_filter = local.query_request_count
    }
  }
}

resource "google_monitoring_slo" "query_latency" {
  project             = var.project_id
  service             = google_monitoring_custom_service.query.service_id
  slo_id              = "latency"
  display_name        = "${var.slo_query_latency_goal * 100}% of requests answered within ${var.slo_query_latency_seconds} s, over 28 days"
  goal                = var.slo_query_latency_goal
  rolling_period_days = 28
  request_based_sli {
    distribution_cut {
      distribution_filter = "metric.type=\"${local.user_metric}/${google_logging_metric.query_latency.name}\" AND resource.type=\"cloud_run_revision\""
      range {
        max = var.slo_query_latency_seconds
      }
    }
  }
}

# Google's multiwindow burn rates for a 28-day budget: 2% of it in an
# hour (14.4×), or 5% in six hours (6×).
resource "google_monitoring_alert_policy" "slo_burn" {
  for_each = {
    availability = google_monitoring_slo.query_availability.name
    latency      = google_monitoring_slo.query_latency.name
  }
  project               = var.project_id
  display_name          = "fleetcast: query ${each.key} SLO burning its error budget"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  conditions {
    display_name = "Burn rate over 14.4 for 1 h"
    condition_threshold {
      filter          = "select_slo_burn_rate(\"${each.value}\", \"3600s\")"
      comparison      = "COMPARISON_GT"
      threshold_value = 14.4
      duration        = "0s"
    }
  }
  conditions {
    display_name = "Burn rate over 6 for 6 h"
    condition_threshold {
      filter          = "select_slo_burn_rate(\"${each.value}\", \"21600s\")"
      comparison      = "COMPARISON_GT"
      threshold_value = 6
      duration        = "0s"
    }
  }
  documentation {
    content   = "The query side's ${each.key} SLO spends its 28-day error budget too fast. ${local.alert_documentation}"
    mime_type = "text/markdown"
  }
}

# --- Dashboard ---------------------------------------------------------------

locals {
  dashboard_charts = [
    ["Heartbeats by cluster (snapshot parts / s)", "metric.type=\"${local.user_metric}/${google_logging_metric.heartbeats.name}\" AND resource.type=\"cloud_run_revision\"", "ALIGN_RATE", "REDUCE_SUM", ["metric.label.cluster"]],
    ["Ingest lag p99 (ms)", "metric.type=\"${local.user_metric}/${google_logging_metric.ingest_lag.name}\" AND resource.type=\"cloud_run_revision\"", "ALIGN_DELTA", "REDUCE_PERCENTILE_99", ["metric.label.cluster"]],
    ["Ingest lag p50 (ms)", "metric.type=\"${local.user_metric}/${google_logging_metric.ingest_lag.name}\" AND resource.type=\"cloud_run_revision\"", "ALIGN_DELTA", "REDUCE_PERCENTILE_50", ["metric.label.cluster"]],
    ["Events dropped by reason (/ s)", "metric.type=\"${local.user_metric}/${google_logging_metric.ingest_dropped.name}\" AND resource.type=\"cloud_run_revision\"", "ALIGN_RATE", "REDUCE_SUM", ["metric.label.reason_code"]],
    ["Events ingested by outcome (/ s)", "metric.type=\"${local.user_metric}/${google_logging_metric.ingest_outcome.name}\" AND resource.type=\"cloud_run_revision\"", "ALIGN_RATE", "REDUCE_SUM", ["metric.label.outcome"]],
    ["Query requests by response class (/ s)", local.query_request_count, "ALIGN_RATE", "REDUCE_SUM", ["metric.label.response_code_class"]],
    ["Query latency p99, requests (s)", "metric.type=\"${local.user_metric}/${google_logging_metric.query_latency.name}\" AND resource.type=\"cloud_run_revision\"", "ALIGN_DELTA", "REDUCE_PERCENTILE_99", []],
    ["Instances", "metric.type=\"run.googleapis.com/container/instance_count\" AND resource.type=\"cloud_run_revision\" AND resource.labels.service_name=one_of(\"${local.ingest_name}\", \"${local.query_name}\")", "ALIGN_MAX", "REDUCE_SUM", ["resource.label.service_name"]],
    ["Dead-lettered events waiting", "metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type=\"pubsub_subscription\" AND resource.labels.subscription_id=\"${google_pubsub_subscription.dead_letter.name}\"", "ALIGN_MAX", "REDUCE_SUM", []],
    ["Partitions not answering the merged query side (/ s)", "metric.type=\"${local.user_metric}/${google_logging_metric.partition_unanswered.name}\" AND resource.type=\"cloud_run_revision\"", "ALIGN_RATE", "REDUCE_SUM", ["metric.label.partition"]],
  ]
}

resource "google_monitoring_dashboard" "fleetcast" {
  project = var.project_id
  dashboard_json = jsonencode({
    displayName = "fleetcast (${var.name_prefix})"
    mosaicLayout = {
      columns = 12
      tiles = [for i, c in local.dashboard_charts : {
        xPos   = (i % 2) * 6
        yPos   = floor(i / 2) * 4
        width  = 6
        height = 4
        widget = {
          title = c[0]
          xyChart = {
            dataSets = [{
              plotType = "LINE"
              timeSeriesQuery = {
                timeSeriesFilter = {
                  filter = c[1]
                  aggregation = {
                    alignmentPeriod    = "60s"
                    perSeriesAligner   = c[2]
                    crossSeriesReducer = c[3]
                    groupByFields      = c[4]
                  }
                }
              }
            }]
          }
        }
      }]
    }
  })
  depends_on = [time_sleep.services]
}
