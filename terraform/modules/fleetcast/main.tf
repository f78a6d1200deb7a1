# fleetcast: Pub/Sub (Avro-validated) → IngestFleetEvents → Firestore → QueryFleets.

locals {
  services = [
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "artifactregistry.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "sts.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
    # Spans go to Cloud Trace through the Telemetry API (OTLP).
    "cloudtrace.googleapis.com",
    "telemetry.googleapis.com",
  ]
  # The mutual TLS load balancer's APIs, enabled only with it: a project
  # that does not use them keeps them off.
  mtls_services = [
    "certificatemanager.googleapis.com",
    "compute.googleapis.com",
    "networksecurity.googleapis.com",
  ]
  project_number = coalesce(var.project_number, one(data.google_project.this[*].number))
  pubsub_agent   = "serviceAccount:service-${local.project_number}@gcp-sa-pubsub.iam.gserviceaccount.com"
  # Both functions read these (functions/fnruntime); the cross-check test
  # compares them with what the code reads.
  firestore_env = {
    GOOGLE_CLOUD_PROJECT = var.project_id
    FIRESTORE_DATABASE   = var.firestore_database
    LOG_LEVEL            = var.log_level
    TRACE_SAMPLE_RATIO   = tostring(var.trace_sample_ratio)
    # The ingest writes each fleet's feed shard, the query side follows
    # them all: the same for both.
    FEED_SHARDS = tostring(var.feed_shards)
    # The ingest announces on it, the query side follows it (change_feed).
    CHANGE_TOPIC = var.change_feed ? local.change_topic : ""
  }
  change_topic = "${var.name_prefix}-fleet-changes"
  # What each query instance names its change feed subscription before a
  # random suffix (fleetfeed.SubscriptionPrefix): the only subscriptions
  # the query identity may delete or read.
  change_subscription_prefix = "${local.change_topic}-view-"
  # The query side's settings, the function's or the service's alike
  # (cmd/fleetcast-query reads the function's environment).
  query_env = merge(local.firestore_env, {
    STALE_AFTER          = var.stale_after
    MAX_STALENESS        = var.query_max_staleness
    CLUSTER_REFRESH      = var.query_cluster_refresh
    COMMIT_LAG           = var.query_commit_lag
    WATCH_POLL           = var.query_watch_poll
    HEARTBEAT            = var.query_heartbeat
    MAX_STREAMS          = min(var.query_max_streams, var.query_concurrency)
    STREAM_WRITE_TIMEOUT = var.query_stream_write_timeout
    VIEW_MAX_BYTES       = var.query_max_view_bytes
    FEED_MAX_BYTES       = var.query_feed_max_bytes
    METRICS_LABELS       = join(",", var.query_metrics_labels)
    METRICS_MAX_SERIES   = tostring(var.query_metrics_max_series)
    METRICS_AGGREGATE    = tostring(var.query_metrics_aggregate)
    METRICS_ACCESS       = var.query_metrics_access
    MTLS_VERIFIED_HEADER = local.mtls ? local.mtls_verified_header : ""
    PLACEMENT_POLICY     = join(";", var.query_placement_policy)
    # Every cluster; a partition's function names its own
    # (query_functions).
    VIEW_CLUSTERS = ""
    # A view of its own; the merged function names the partitions it
    # answers over (query_merged).
    PARTITIONS        = ""
    PARTITION_TIMEOUT = var.query_partition_timeout
    # Read by the Go runtime: collect garbage by the instance's memory
    # rather than by the live heap. A view of 10 000 fleets is some 20 MB
    # live, so at Go's default (GOGC=100) the garbage of the syncs and the
    # heavy reads starts 12 to 16 collections a second (measured with
    # BenchmarkReaders), and each delays the reads by name (BENCHMARKS.md
    # §5e); any GOGC paces a small view more often than a large one. With
    # GOGC=off the collector runs only as the heap nears GOMEMLIMIT, 90%
    # of query_memory, whatever the view's size. It is safe because the
    # view is bounded: query_max_view_bytes is at most half of the limit
    # (its validation), so the collector always has room to work
    # (docs/capacity.md). make bench runs BenchmarkReaders with the same
    # two (the plan test holds them equal).
    GOGC       = "off"
    GOMEMLIMIT = "${local.query_memory_limit_mib}MiB"
  })
  # The memory of a query instance, function or service, and the Go
  # runtime's limit within it (GOMEMLIMIT, 90%): query_max_view_bytes may
  # take at most half of the limit.
  query_memory = "512Mi"
  # Each partition's Cloud Run service and URL, function or service, and
  # the merged one's service.
  query_partition_services = { for k in keys(var.query_partitions) : k => (var.query_mode == "function" ?
  google_cloudfunctions2_function.query[k].service_config[0].service : google_cloud_run_v2_service.query[k].name) }
  query_partition_urls = { for k in keys(var.query_partitions) : k => (var.query_mode == "function" ?
  google_cloudfunctions2_function.query[k].service_config[0].uri : google_cloud_run_v2_service.query[k].uri) }
  query_merged_service = length(var.query_partitions) == 0 ? null : (var.query_mode == "function" ?
  google_cloudfunctions2_function.query_merged[0].service_config[0].service : google_cloud_run_v2_service.query_merged[0].name)
  query_merged_url = length(var.query_partitions) == 0 ? null : (var.query_mode == "function" ?
  google_cloudfunctions2_function.query_merged[0].service_config[0].uri : google_cloud_run_v2_service.query_merged[0].uri)
  # The merged function's or service's environment: no view of its own
  # (neither a partition's clusters nor the feed), each partition by its
  # clusters and URL.
  query_merged_env = merge(local.query_env, {
    VIEW_CLUSTERS        = ""
    CHANGE_TOPIC         = ""
    MTLS_VERIFIED_HEADER = ""
    PARTITIONS = join("; ", [for k in sort(keys(var.query_partitions)) :
    "${join(",", var.query_partitions[k])}=${local.query_partition_urls[k]}"])
  })
  query_memory_limit_mib = 460
  # Whether some side runs as a function, built from the source zip.
  functions = var.ingest_mode == "function" || var.query_mode == "function"
  # The ingest function's or service's settings (ingest_mode).
  ingest_env = merge(local.firestore_env, {
    TOMBSTONE_RETENTION  = var.tombstone_retention
    EVENT_TIMEOUT        = "50s"
    FULL_RECONCILE_EVERY = var.full_reconcile_every
    TOPIC_PREFIX         = var.topic_prefix
    MAX_CLOCK_SKEW       = var.max_clock_skew
    # Half the instance's requests at most per cluster: one cluster's
    # flood leaves room for the others' events and heartbeats.
    MAX_CLUSTER_IN_FLIGHT = max(1, floor(var.ingest_concurrency / 2))
  })
  # The Cloud Run service the pushes reach, and its URL: the function's,
  # or the ingest service's (ingest_mode).
  ingest_service = var.ingest_mode == "function" ? google_cloudfunctions2_function.ingest[0].service_config[0].service : google_cloud_run_v2_service.ingest[0].name
  ingest_url     = var.ingest_mode == "function" ? google_cloudfunctions2_function.ingest[0].service_config[0].uri : google_cloud_run_v2_service.ingest[0].uri
  # The Cloud Run service that answers queries: the function's, or the
  # query service's (query_mode).
  query_service = var.query_mode == "function" ? google_cloudfunctions2_function.query["all"].service_config[0].service : google_cloud_run_v2_service.query["all"].name
  mtls          = var.query_mode == "service" && var.query_mtls != null
  # The header in which the mutual TLS load balancer tells the service
  # whether the client's certificate chain verified.
  mtls_verified_header = "X-Client-Cert-Chain-Verified"
  query_url = (local.mtls ? "https://${var.query_mtls.domains[0]}" :
  var.query_mode == "function" ? google_cloudfunctions2_function.query["all"].service_config[0].uri : google_cloud_run_v2_service.query["all"].uri)
  # The query functions: "all" for every cluster, and each partition's,
  # by the clusters their views hold (none named: every cluster).
  query_functions = var.query_mode == "function" ? merge({ all = [] }, var.query_partitions) : {}
  # The query services (query_mode = "service"), likewise.
  query_services = var.query_mode == "service" ? merge({ all = [] }, var.query_partitions) : {}
  database       = var.create_firestore_database ? google_firestore_database.this[0].name : var.firestore_database
  # The fleet document's fields no query uses (besides annotations and
  # expireAt, which have resources of their own): google_firestore_field.
  # fleet_unindexed.
  fleet_unindexed_fields = ["uid", "labels", "spec", "status", "degraded", "rollout", "autoscalers", "publisher",
  "version", "observedAt", "ingestedAt", "lagMillis", "docID", "docIDHash", "feedShard", "writtenAt", "namespace", "name", "gameServerLabels"]
  # Every message that can still reach the ingest function — waiting in its
  # subscription, then in the dead-letter subscription, or replayed from the
  # topic — must be younger than a tombstone's lifetime: an event older than
  # that could bring back a fleet whose tombstone already expired. The
  # subscription and the dead-letter subscription each keep half of it, and
  # so does the topic (seek).
  message_retention = "${floor(tonumber(trimsuffix(var.tombstone_retention, "h")) * 3600 / 2)}s"
  # Firestore IAM conditions name the database: the functions' roles hold
  # on fleetcast's database only.
  database_condition = "resource.name == \"projects/${var.project_id}/databases/${local.database}\""
  # The clusters outside GKE, and each publisher's Kubernetes subject.
  federated         = { for name, c in var.clusters : name => c if c.workload_identity_federation != null }
  publisher_subject = { for name, c in var.clusters : name => "system:serviceaccount:${c.namespace}:${c.service_account}" }
}

# Looked up unless given (which lets plan run without API access); after
# the Resource Manager API is enabled, since a fresh project may have it off.
data "google_project" "this" {
  count      = var.project_number == null ? 1 : 0
  project_id = var.project_id
  depends_on = [time_sleep.services]
}

resource "google_project_service" "this" {
  for_each           = toset(concat(local.services, local.mtls ? local.mtls_services : []))
  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

# Enabling a service returns before every part of it answers, and the
# service agents it creates appear a little later: resources created at
# once fail on a fresh project with "API has not been used in project … or
# it is disabled". Everything below waits for this (the cross-check test in
# terraform/ proves every resource depends on it).
resource "time_sleep" "services" {
  create_duration = var.propagation_wait
  depends_on      = [google_project_service.this]
}

# --- Pub/Sub -----------------------------------------------------------------

resource "google_pubsub_schema" "fleet_event" {
  project    = var.project_id
  name       = "${var.name_prefix}-fleet-event"
  type       = "AVRO"
  definition = file("${path.module}/../../../schemas/fleet_event.avsc")
  depends_on = [time_sleep.services]
}

# One topic per cluster, <topic_prefix><cluster>: only that cluster's
# publisher may publish to it, and the ingest function lets a delivery from
# it write only that cluster's documents (TOPIC_PREFIX).
resource "google_pubsub_topic" "events" {
  for_each = var.clusters
  project  = var.project_id
  name     = "${var.topic_prefix}${each.key}"
  schema_settings {
    schema   = google_pubsub_schema.fleet_event.id
    encoding = "JSON"
  }
  message_retention_duration = local.message_retention
}

# The change feed (change_feed; fleetfeed): the ingest function announces
# each fleet document it writes, and each query instance follows it
# through a subscription of its own while streams run, rather than with a
# Firestore listener billed a read per write per instance.
resource "google_pubsub_topic" "changes" {
  count      = var.change_feed ? 1 : 0
  project    = var.project_id
  name       = local.change_topic
  depends_on = [time_sleep.services]
}

resource "google_pubsub_topic_iam_member" "changes_publisher" {
  count   = var.change_feed ? 1 : 0
  project = var.project_id
  topic   = google_pubsub_topic.changes[0].name
  role    = "roles/pubsub.publisher"
  member  = google_service_account.ingest.member
}

# A query instance attaches its subscriptions to the feed's topic
# (pubsub.topics.attachSubscription) and to no other.
resource "google_pubsub_topic_iam_member" "changes_subscriber" {
  count   = var.change_feed ? 1 : 0
  project = var.project_id
  topic   = google_pubsub_topic.changes[0].name
  role    = "roles/pubsub.subscriber"
  member  = google_service_account.query.member
}

# ... creates them in the project, and reads and deletes its own alone:
# the condition holds every subscription to the feed's prefix.
resource "google_project_iam_custom_role" "view_feed" {
  count       = var.change_feed ? 1 : 0
  project     = var.project_id
  role_id     = "${replace(var.name_prefix, "-", "_")}_view_feed"
  title       = "fleetcast query view: its change feed subscriptions"
  description = "Create, read and delete the query instances' own subscriptions to the change feed (${local.change_topic})."
  permissions = ["pubsub.subscriptions.consume", "pubsub.subscriptions.create", "pubsub.subscriptions.delete", "pubsub.subscriptions.get"]
  depends_on  = [time_sleep.services]
}

resource "google_project_iam_member" "query_view_feed" {
  count   = var.change_feed ? 1 : 0
  project = var.project_id
  role    = google_project_iam_custom_role.view_feed[0].id
  member  = google_service_account.query.member
  condition {
    title      = "its change feed subscriptions only"
    expression = "resource.type != \"pubsub.googleapis.com/Subscription\" || resource.name.startsWith(\"projects/${var.project_id}/subscriptions/${local.change_subscription_prefix}\")"
  }
}

resource "google_pubsub_topic" "dead_letter" {
  project    = var.project_id
  name       = "${var.name_prefix}-fleet-events-dead-letter"
  depends_on = [time_sleep.services]
}

# Holds what the ingest function could not apply, for inspection and replay.
resource "google_pubsub_subscription" "dead_letter" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-fleet-events-dead-letter-inspect"
  topic                      = google_pubsub_topic.dead_letter.id
  ack_deadline_seconds       = 60
  message_retention_duration = local.message_retention
  expiration_policy {
    ttl = ""
  }
}

# Each topic's own push subscription into the one ingest function, rather
# than an Eventarc trigger: the provider cannot set a dead-letter policy on
# the subscription Eventarc creates. The Functions Framework turns the push
# body into the messagePublished CloudEvent the function takes, with the
# topic — and so the cluster — taken from the push endpoint's path
# (…/projects/P/topics/T); without the path it also prints an unterminated
# warning before every JSON log line.
resource "google_pubsub_subscription" "ingest" {
  for_each                   = var.clusters
  project                    = var.project_id
  name                       = "${var.name_prefix}-ingest-${each.key}"
  topic                      = google_pubsub_topic.events[each.key].id
  ack_deadline_seconds       = 60
  enable_message_ordering    = true
  message_retention_duration = local.message_retention
  push_config {
    push_endpoint = "${local.ingest_url}/projects/${var.project_id}/topics/${google_pubsub_topic.events[each.key].name}"
    oidc_token {
      service_account_email = google_service_account.push.email
      audience              = local.ingest_url
    }
  }
  # A 429 from Cloud Run (every instance busy, or starting) counts as a
  # delivery attempt: the attempts must outlast the drain of a publisher's
  # start-up republish (terraform/README.md, "Sizing the ingest function").
  retry_policy {
    minimum_backoff = var.retry_minimum_backoff
    maximum_backoff = "600s"
  }
  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter.id
    max_delivery_attempts = var.max_delivery_attempts
  }
  expiration_policy {
    ttl = ""
  }
}

# Pub/Sub's service agent moves undeliverable messages to the dead-letter
# topic, and mints the push subscription's OIDC tokens. Google creates the
# agent once the Pub/Sub API is enabled and used; the grants come after the
# wait and after the topics and subscription that use it. (The resource
# that creates it on demand, google_project_service_identity, exists only
# in the google-beta provider.)
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.dead_letter.name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  for_each     = var.clusters
  project      = var.project_id
  subscription = google_pubsub_subscription.ingest[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}

resource "google_service_account_iam_member" "push_token_creator" {
  service_account_id = google_service_account.push.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
  depends_on         = [google_pubsub_topic.dead_letter]
}

# --- Firestore ---------------------------------------------------------------

resource "google_firestore_database" "this" {
  count                   = var.create_firestore_database ? 1 : 0
  project                 = var.project_id
  name                    = var.firestore_database
  location_id             = var.firestore_location
  type                    = "FIRESTORE_NATIVE"
  delete_protection_state = "DELETE_PROTECTION_ENABLED"
  depends_on              = [time_sleep.services]
}

# Tombstones carry expireAt; the TTL policy deletes them once it passes.
resource "google_firestore_field" "fleet_expire_at" {
  project    = var.project_id
  database   = local.database
  collection = "fleets"
  field      = "expireAt"
  ttl_config {}
  # Not queried: no index.
  index_config {}
  depends_on = [time_sleep.services]
}

# Annotations are copied for readers but never filtered on: no index
# entries (they may be long).
resource "google_firestore_field" "fleet_annotations" {
  project    = var.project_id
  database   = local.database
  collection = "fleets"
  field      = "annotations"
  index_config {}
  depends_on = [time_sleep.services]
}

# Every other field of a fleet document is exempt from Firestore's
# automatic single-field indexes: no query filters or orders on it through
# one, and an index entry is a write per field per document write. Above
# all the fields that increase with every write — ingestedAt, observedAt,
# writtenAt: an indexed field like that concentrates a collection's index
# writes on one key range, which Firestore sustains at about 500 writes a
# second (docs/capacity.md). The fields queried keep theirs: cluster and
# deleted (fleetwatch's and the views' listeners). docID, docIDHash,
# feedShard and writtenAt are queried only through the composite indexes
# below. terraform/plan_test.go checks that this list and the queried
# fields make up every field of the document.
resource "google_firestore_field" "fleet_unindexed" {
  for_each   = toset(local.fleet_unindexed_fields)
  project    = var.project_id
  database   = local.database
  collection = "fleets"
  field      = each.value
  index_config {}
  depends_on = [time_sleep.services]
}

# A snapshot part counts its range's live fleets and sums their docIDHash
# in one aggregation (deleted ==, docID range, sum of docIDHash), which
# needs an index holding the three in that order.
resource "google_firestore_index" "fleet_reconcile" {
  project    = var.project_id
  database   = local.database
  collection = "fleets"
  fields {
    field_path = "deleted"
    order      = "ASCENDING"
  }
  fields {
    field_path = "docID"
    order      = "ASCENDING"
  }
  fields {
    field_path = "docIDHash"
    order      = "ASCENDING"
  }
  depends_on = [time_sleep.services]
}

# The change feed the query side's views follow (feedShard in every shard,
# writtenAt >= a point, ordered by writtenAt): writtenAt increases with
# every write, so the index leads with the shard, as Google's "sharded
# timestamps" prescribe — each of the feed_shards shards' ranges takes
# about 500 writes a second, 15 000 at 30 (docs/capacity.md). The other queries need no composite
# index: fleetwatch's equality filters, and the range read of a part that
# disagrees, over document IDs.
resource "google_firestore_index" "fleet_feed" {
  project    = var.project_id
  database   = local.database
  collection = "fleets"
  fields {
    field_path = "feedShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "writtenAt"
    order      = "ASCENDING"
  }
  depends_on = [time_sleep.services]
}

# A query partition's change feed (cluster in its clusters, writtenAt >= a
# point, ordered by writtenAt): led by the cluster, so that each cluster's
# writes take a range of their own (about 500 a second each). Only with
# query_partitions: every index costs every write an entry.
resource "google_firestore_index" "fleet_feed_by_cluster" {
  count      = length(var.query_partitions) > 0 ? 1 : 0
  project    = var.project_id
  database   = local.database
  collection = "fleets"
  fields {
    field_path = "cluster"
    order      = "ASCENDING"
  }
  fields {
    field_path = "writtenAt"
    order      = "ASCENDING"
  }
  depends_on = [time_sleep.services]
}

# --- Service accounts --------------------------------------------------------

resource "google_service_account" "ingest" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-ingest"
  display_name = "fleetcast IngestFleetEvents"
  depends_on   = [time_sleep.services]
}

resource "google_service_account" "query" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-query"
  display_name = "fleetcast QueryFleets"
  depends_on   = [time_sleep.services]
}

resource "google_service_account" "push" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-push"
  display_name = "fleetcast Pub/Sub push into IngestFleetEvents"
  depends_on   = [time_sleep.services]
}

# Cloud Build runs the functions' builds as this account, not as the
# Compute Engine default account, which a fresh project may not have
# (Compute Engine API off) or which holds no role under the
# secure-by-default organization policy.
resource "google_service_account" "build" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-build"
  display_name = "fleetcast function builds"
  depends_on   = [time_sleep.services]
}

# The roles Google documents for a function's build service account: write
# the build log, push the image to Artifact Registry, read the source
# (which Cloud Functions copies into its own gcf-v2-sources bucket).
resource "google_project_iam_member" "build" {
  for_each = toset([
    "roles/logging.logWriter",
    "roles/artifactregistry.writer",
    "roles/storage.objectAdmin",
  ])
  project = var.project_id
  role    = each.value
  member  = google_service_account.build.member
}

# IAM grants take effect within about two minutes (Google's IAM
# documentation, "Access change propagation"); a build started at once
# fails with permission denied.
resource "time_sleep" "build_roles" {
  create_duration = var.propagation_wait
  depends_on      = [google_project_iam_member.build]
}

resource "google_project_iam_member" "ingest_firestore" {
  project = var.project_id
  role    = "roles/datastore.user"
  member  = google_service_account.ingest.member
  condition {
    title      = "fleetcast database only"
    expression = local.database_condition
  }
}

resource "google_project_iam_member" "query_firestore" {
  project = var.project_id
  role    = "roles/datastore.viewer"
  member  = google_service_account.query.member
  condition {
    title      = "fleetcast database only"
    expression = local.database_condition
  }
}

# Matchmakers and other readers: read fleetcast's database (realtime
# listeners, the Go client) and call the query API.
resource "google_project_iam_member" "readers_firestore" {
  for_each = toset(var.readers)
  project  = var.project_id
  role     = "roles/datastore.viewer"
  member   = each.value
  condition {
    title      = "fleetcast database only"
    expression = local.database_condition
  }
}

# Every identity of the pipeline writes its spans to Cloud Trace through
# the Telemetry API (telemetry.traces.write, nothing else): the functions,
# and each cluster's publisher (its Helm value traceSampleRatio).
resource "google_project_iam_member" "traces_writer" {
  for_each = merge(
    { ingest = google_service_account.ingest.member, query = google_service_account.query.member },
    { for name, sa in google_service_account.publisher : "publisher-${name}" => sa.member },
  )
  project = var.project_id
  role    = "roles/telemetry.tracesWriter"
  member  = each.value
}

resource "google_service_account" "publisher" {
  for_each     = var.clusters
  project      = var.project_id
  account_id   = "${var.name_prefix}-pub-${each.key}"
  display_name = "fleetcast publisher of cluster ${each.key}"
  depends_on   = [time_sleep.services]
}

# Each publisher may publish to its own cluster's topic, nothing else.
resource "google_pubsub_topic_iam_member" "publisher" {
  for_each = var.clusters
  project  = var.project_id
  topic    = google_pubsub_topic.events[each.key].name
  role     = "roles/pubsub.publisher"
  member   = google_service_account.publisher[each.key].member
}

# Workload Identity: the cluster's Kubernetes service account acts as its
# publisher's Google service account. The pool <gke_project>.svc.id.goog
# exists once that project has a GKE cluster with Workload Identity.
resource "google_service_account_iam_member" "publisher_workload_identity" {
  for_each           = { for name, c in var.clusters : name => c if c.gke_project != null }
  service_account_id = google_service_account.publisher[each.key].name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${each.value.gke_project}.svc.id.goog[${each.value.namespace}/${each.value.service_account}]"
}

# Workload Identity Federation, for a cluster outside GKE: a pool of its own
# (a pool per cluster, since every cluster's publisher has the same
# subject, system:serviceaccount:NAMESPACE:NAME), whose provider trusts the
# cluster's token issuer and admits the publisher's service account alone.
# Deleted pools and providers are kept for 30 days, their IDs reserved.
resource "google_iam_workload_identity_pool" "cluster" {
  for_each                  = local.federated
  project                   = var.project_id
  workload_identity_pool_id = "${var.name_prefix}-${each.key}"
  display_name              = substr("fleetcast ${each.key}", 0, 32)
  description               = "The fleetcast publisher of cluster ${each.key}."
  depends_on                = [time_sleep.services]
}

resource "google_iam_workload_identity_pool_provider" "cluster" {
  for_each                           = local.federated
  project                            = var.project_id
  workload_identity_pool_id          = google_iam_workload_identity_pool.cluster[each.key].workload_identity_pool_id
  workload_identity_pool_provider_id = "kubernetes"
  display_name                       = "Kubernetes service accounts"
  attribute_mapping                  = { "google.subject" = "assertion.sub" }
  attribute_condition                = "assertion.sub == '${local.publisher_subject[each.key]}'"
  oidc {
    issuer_uri = each.value.workload_identity_federation.issuer_uri
    jwks_json  = each.value.workload_identity_federation.jwks_json
  }
}

resource "google_service_account_iam_member" "publisher_federation" {
  for_each           = local.federated
  service_account_id = google_service_account.publisher[each.key].name
  role               = "roles/iam.workloadIdentityUser"
  member             = "principal://iam.googleapis.com/${google_iam_workload_identity_pool.cluster[each.key].name}/subject/${local.publisher_subject[each.key]}"
}

# --- Functions -----------------------------------------------------------------

# The functions' source, for as long as some side runs as a function.
resource "google_storage_bucket" "source" {
  count                       = local.functions ? 1 : 0
  project                     = var.project_id
  name                        = "${var.project_id}-${var.name_prefix}-source"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  depends_on                  = [time_sleep.services]
}

# Named by content: a changed source is a new object, which redeploys; an
# unchanged one (the zip is deterministic) changes nothing.
resource "google_storage_bucket_object" "source" {
  count  = local.functions ? 1 : 0
  name   = "functions-${filesha256(var.function_source_zip)}.zip"
  bucket = google_storage_bucket.source[0].name
  source = var.function_source_zip
}

# The source's bucket and object were single resources before the modes
# could both be services.
moved {
  from = google_storage_bucket.source
  to   = google_storage_bucket.source[0]
}

moved {
  from = google_storage_bucket_object.source
  to   = google_storage_bucket_object.source[0]
}

# The ingest function (ingest_mode = "function").
resource "google_cloudfunctions2_function" "ingest" {
  count    = var.ingest_mode == "function" ? 1 : 0
  project  = var.project_id
  location = var.region
  name     = "${var.name_prefix}-ingest"
  build_config {
    runtime         = var.go_runtime
    entry_point     = "IngestFleetEvents"
    service_account = google_service_account.build.id
    source {
      storage_source {
        bucket = google_storage_bucket.source[0].name
        object = google_storage_bucket_object.source[0].name
      }
    }
  }
  # One vCPU: Cloud Run allows concurrency above 1 only with at least one
  # vCPU, and an upsert mostly waits on Firestore, so one instance serves
  # many at once (terraform/README.md, "Sizing the ingest function").
  service_config {
    service_account_email = google_service_account.ingest.email
    # Only Pub/Sub pushes from this project reach it.
    ingress_settings                 = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision   = true
    available_cpu                    = "1"
    available_memory                 = "512Mi"
    timeout_seconds                  = 60
    max_instance_count               = var.ingest_max_instances
    max_instance_request_concurrency = var.ingest_concurrency
    environment_variables            = local.ingest_env
  }
  # Only once the indexes are built (the provider waits for their creation
  # to finish): a snapshot part's aggregation needs the reconcile index,
  # and Firestore refuses the query until then (FAILED_PRECONDITION); the
  # feed's is there before the first write it must hold; and it may
  # announce on the change feed before its first event.
  depends_on = [time_sleep.services, time_sleep.build_roles, google_firestore_index.fleet_reconcile, google_firestore_index.fleet_feed,
  google_pubsub_topic_iam_member.changes_publisher]
}

# The ingest function was one resource before ingest_mode.
moved {
  from = google_cloudfunctions2_function.ingest
  to   = google_cloudfunctions2_function.ingest[0]
}

# ingest_mode = "service": cmd/fleetcast-ingest's image (ingest_image) on
# Cloud Run, with the function's size, settings, identity and ingress.
# With instance-based billing (ingest_instance_billing), an instance is
# billed by the second while it runs, at the lower price and with no
# request fee, rather than for each busy period rounded up to 100 ms plus
# a fee per push: events arriving every few milliseconds keep an
# instance busy anyway (BENCHMARKS.md §7 prices both).
resource "google_cloud_run_v2_service" "ingest" {
  count               = var.ingest_mode == "service" ? 1 : 0
  project             = var.project_id
  location            = var.region
  name                = "${var.name_prefix}-ingest"
  deletion_protection = false
  # Only Pub/Sub pushes from this project reach it.
  ingress = "INGRESS_TRAFFIC_INTERNAL_ONLY"
  template {
    service_account                  = google_service_account.ingest.email
    timeout                          = "60s"
    max_instance_request_concurrency = var.ingest_concurrency
    scaling {
      max_instance_count = var.ingest_max_instances
    }
    containers {
      name  = "ingest"
      image = var.ingest_image
      ports {
        container_port = 8080
      }
      resources {
        limits   = { cpu = "1", memory = "512Mi" }
        cpu_idle = !var.ingest_instance_billing
      }
      dynamic "env" {
        for_each = local.ingest_env
        content {
          name  = env.key
          value = env.value
        }
      }
    }
  }
  depends_on = [time_sleep.services, google_firestore_index.fleet_reconcile, google_firestore_index.fleet_feed,
  google_pubsub_topic_iam_member.changes_publisher]
}

# The query functions (query_mode = "function"): "all", whose view holds
# every cluster, and one per query_partitions key, whose view holds that
# partition's clusters only (VIEW_CLUSTERS; docs/capacity.md, "The query
# view's memory").
resource "google_cloudfunctions2_function" "query" {
  for_each = local.query_functions
  project  = var.project_id
  location = var.region
  name     = each.key == "all" ? "${var.name_prefix}-query" : "${var.name_prefix}-query-${each.key}"
  build_config {
    runtime         = var.go_runtime
    entry_point     = "QueryFleets"
    service_account = google_service_account.build.id
    source {
      storage_source {
        bucket = google_storage_bucket.source[0].name
        object = google_storage_bucket_object.source[0].name
      }
    }
  }
  # Requests wait on Firestore: many per instance, which needs one vCPU.
  service_config {
    service_account_email          = google_service_account.query.email
    ingress_settings               = "ALLOW_ALL"
    all_traffic_on_latest_revision = true
    available_cpu                  = "1"
    available_memory               = local.query_memory
    # Watch streams last up to the timeout, then clients resume them.
    timeout_seconds                  = var.query_timeout_seconds
    min_instance_count               = var.query_min_instances
    max_instance_count               = var.query_max_instances
    max_instance_request_concurrency = var.query_concurrency
    environment_variables            = merge(local.query_env, { VIEW_CLUSTERS = join(",", each.value) })
  }
  # The views follow the fleets through the feed's index, a partition's
  # through its clusters' index: Firestore refuses the query until it is
  # built; and they may follow the change feed before their first stream.
  depends_on = [time_sleep.services, time_sleep.build_roles, google_firestore_index.fleet_feed, google_firestore_index.fleet_feed_by_cluster,
  google_pubsub_topic_iam_member.changes_subscriber, google_project_iam_member.query_view_feed]
}

# The query function was one resource with count before the partitions.
moved {
  from = google_cloudfunctions2_function.query[0]
  to   = google_cloudfunctions2_function.query["all"]
}

# Who may call the query function may call each partition.
resource "google_cloud_run_v2_service_iam_member" "query_partition_invoker" {
  for_each = { for pair in setproduct(keys(var.query_partitions), concat(var.query_invokers, var.readers)) : "${pair[0]} ${pair[1]}" => pair }
  project  = var.project_id
  location = var.region
  name     = local.query_partition_services[each.value[0]]
  role     = "roles/run.invoker"
  member   = each.value[1]
}

# With partitions, one more query function answers over all of them as
# one view (PARTITIONS; fleetapi.Partitions): it holds no view and reads
# no Firestore, but asks each partition's function, as the query
# identity, and merges their answers (docs/capacity.md, "Routing").
resource "google_cloudfunctions2_function" "query_merged" {
  count    = var.query_mode == "function" && length(var.query_partitions) > 0 ? 1 : 0
  project  = var.project_id
  location = var.region
  name     = "${var.name_prefix}-query-merged"
  build_config {
    runtime         = var.go_runtime
    entry_point     = "QueryFleets"
    service_account = google_service_account.build.id
    source {
      storage_source {
        bucket = google_storage_bucket.source[0].name
        object = google_storage_bucket_object.source[0].name
      }
    }
  }
  service_config {
    service_account_email            = google_service_account.query.email
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    available_cpu                    = "1"
    available_memory                 = local.query_memory
    timeout_seconds                  = var.query_timeout_seconds
    min_instance_count               = var.query_min_instances
    max_instance_count               = var.query_max_instances
    max_instance_request_concurrency = var.query_concurrency
    environment_variables            = local.query_merged_env
  }
  depends_on = [time_sleep.services, time_sleep.build_roles]
}

# The merged query function or service calls each partition as the
# query identity.
resource "google_cloud_run_v2_service_iam_member" "query_partition_merger" {
  for_each = toset(keys(var.query_partitions))
  project  = var.project_id
  location = var.region
  name     = local.query_partition_services[each.value]
  role     = "roles/run.invoker"
  member   = google_service_account.query.member
}

# Who may call the query function may call the merged one.
resource "google_cloud_run_v2_service_iam_member" "query_merged_invoker" {
  for_each = length(var.query_partitions) > 0 ? toset(concat(var.query_invokers, var.readers)) : toset([])
  project  = var.project_id
  location = var.region
  name     = local.query_merged_service
  role     = "roles/run.invoker"
  member   = each.value
}

# Only the push subscription's account may invoke the ingest function or
# service.
resource "google_cloud_run_v2_service_iam_member" "ingest_invoker" {
  project  = var.project_id
  location = var.region
  name     = local.ingest_service
  role     = "roles/run.invoker"
  member   = google_service_account.push.member
}

# Only the listed members (and the readers) may call the query API. Behind
# the mutual TLS load balancer, the client certificate is the credential:
# the service takes requests from the load balancer only, and checks no
# token (invoker_iam_disabled).
resource "google_cloud_run_v2_service_iam_member" "query_invoker" {
  for_each = local.mtls ? toset([]) : toset(concat(var.query_invokers, var.readers))
  project  = var.project_id
  location = var.region
  name     = local.query_service
  role     = "roles/run.invoker"
  member   = each.value
}

# query_mode = "service": cmd/fleetcast-query's image on Cloud Run, with
# HTTP/2 end to end (the port named h2c), so that native gRPC reaches it
# beside REST, Connect and gRPC-Web; the function's size, settings and
# identity.
#
# "all" holds every cluster, and each query_partitions key's service that
# partition's (VIEW_CLUSTERS), as the functions do. Only "all" is behind
# the mutual TLS load balancer: the partitions take ID tokens, the merged
# service's (query_merged) and the invokers'.
resource "google_cloud_run_v2_service" "query" {
  for_each             = local.query_services
  project              = var.project_id
  location             = var.region
  name                 = each.key == "all" ? "${var.name_prefix}-query" : "${var.name_prefix}-query-${each.key}"
  deletion_protection  = false
  ingress              = local.mtls && each.key == "all" ? "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER" : "INGRESS_TRAFFIC_ALL"
  invoker_iam_disabled = local.mtls && each.key == "all"
  # Behind the load balancer, no run.app URL: Cloud Run's "internal"
  # ingress admits the project's VPC networks (the game clusters' pods
  # among them) through it, with no certificate. What is left is the load
  # balancer, whose verdict on the client's certificate the service checks
  # on every request (MTLS_VERIFIED_HEADER).
  default_uri_disabled = local.mtls && each.key == "all"
  template {
    service_account                  = google_service_account.query.email
    timeout                          = "${var.query_timeout_seconds}s"
    max_instance_request_concurrency = var.query_concurrency
    scaling {
      min_instance_count = var.query_min_instances
      max_instance_count = var.query_max_instances
    }
    containers {
      name  = "query"
      image = var.query_image
      # h2c: Cloud Run forwards HTTP/2 to the container, which serves
      # HTTP/1.1 and h2c on PORT (set by Cloud Run from this port).
      ports {
        name           = "h2c"
        container_port = 8080
      }
      # Instance-based billing (query_instance_billing): the streams keep
      # the instances alive anyway, billed by the second at the lower
      # price and with no request fee; and the CPU stays allocated
      # between requests, so the view's change feed subscription is
      # read even while no request runs.
      resources {
        limits   = { cpu = "1", memory = local.query_memory }
        cpu_idle = !var.query_instance_billing
      }
      dynamic "env" {
        for_each = merge(local.query_env, { VIEW_CLUSTERS = join(",", each.value), MTLS_VERIFIED_HEADER = each.key == "all" ? local.query_env.MTLS_VERIFIED_HEADER : "" })
        content {
          name  = env.key
          value = env.value
        }
      }
    }
    # query_metrics_export: Google's Managed Service for Prometheus
    # sidecar scrapes /metrics on the instance (its default: port 8080,
    # every 30 s, also once at start and at shutdown) and writes the series
    # to Cloud Monitoring as prometheus.googleapis.com/<name>/gauge. It
    # starts once the query container does, and takes the API's defaults
    # for its size, as terraform-google-modules' Cloud Run module runs it.
    dynamic "containers" {
      for_each = var.query_metrics_export ? [var.query_metrics_sidecar_image] : []
      content {
        name       = "metrics"
        image      = containers.value
        depends_on = ["query"]
      }
    }
  }
  depends_on = [time_sleep.services, google_firestore_index.fleet_feed, google_firestore_index.fleet_feed_by_cluster,
  google_pubsub_topic_iam_member.changes_subscriber, google_project_iam_member.query_view_feed]
}

# The query service was one resource with count before the partitions.
moved {
  from = google_cloud_run_v2_service.query[0]
  to   = google_cloud_run_v2_service.query["all"]
}

# With partitions in service mode, the service that answers over all of
# them as one view (PARTITIONS), as the merged function does: no view, no
# Firestore, the query identity and the query service's size and billing.
resource "google_cloud_run_v2_service" "query_merged" {
  count               = var.query_mode == "service" && length(var.query_partitions) > 0 ? 1 : 0
  project             = var.project_id
  location            = var.region
  name                = "${var.name_prefix}-query-merged"
  deletion_protection = false
  ingress             = "INGRESS_TRAFFIC_ALL"
  template {
    service_account                  = google_service_account.query.email
    timeout                          = "${var.query_timeout_seconds}s"
    max_instance_request_concurrency = var.query_concurrency
    scaling {
      min_instance_count = var.query_min_instances
      max_instance_count = var.query_max_instances
    }
    containers {
      name  = "query"
      image = var.query_image
      ports {
        name           = "h2c"
        container_port = 8080
      }
      resources {
        limits   = { cpu = "1", memory = local.query_memory }
        cpu_idle = !var.query_instance_billing
      }
      dynamic "env" {
        for_each = local.query_merged_env
        content {
          name  = env.key
          value = env.value
        }
      }
    }
  }
  depends_on = [time_sleep.services]
}

# The sidecar writes the series as the query service's identity.
resource "google_project_iam_member" "query_metrics_writer" {
  count   = var.query_metrics_export ? 1 : 0
  project = var.project_id
  role    = "roles/monitoring.metricWriter"
  member  = google_service_account.query.member
}

# --- The mutual TLS load balancer (query_mode = "service", query_mtls) -------
# A global external Application Load Balancer — the only kind whose HTTPS
# proxy takes a ServerTlsPolicy with client validation — in front of the
# service through a serverless NEG, speaking HTTP/2 to it. Clients must
# present a certificate that chains to query_mtls.client_ca_pems (the
# TrustConfig); the load balancer refuses any other handshake.

resource "google_certificate_manager_trust_config" "query" {
  count    = local.mtls ? 1 : 0
  project  = var.project_id
  location = "global"
  name     = "${var.name_prefix}-query-clients"
  trust_stores {
    dynamic "trust_anchors" {
      for_each = var.query_mtls.client_ca_pems
      content {
        pem_certificate = trust_anchors.value
      }
    }
    dynamic "intermediate_cas" {
      for_each = var.query_mtls.intermediate_ca_pems
      content {
        pem_certificate = intermediate_cas.value
      }
    }
  }
  depends_on = [time_sleep.services]
}

resource "google_network_security_server_tls_policy" "query" {
  count    = local.mtls ? 1 : 0
  project  = var.project_id
  location = "global"
  name     = "${var.name_prefix}-query-mtls"
  # For an Application Load Balancer: no allow_open, no client_validation_ca
  # (Traffic Director's), a mode and a TrustConfig.
  mtls_policy {
    client_validation_mode         = "REJECT_INVALID"
    client_validation_trust_config = "projects/${local.project_number}/locations/global/trustConfigs/${google_certificate_manager_trust_config.query[0].name}"
  }
  depends_on = [time_sleep.services]
}

resource "google_certificate_manager_certificate" "query" {
  count   = local.mtls ? 1 : 0
  project = var.project_id
  name    = "${var.name_prefix}-query"
  managed {
    domains = var.query_mtls.domains
  }
  depends_on = [time_sleep.services]
}

resource "google_certificate_manager_certificate_map" "query" {
  count      = local.mtls ? 1 : 0
  project    = var.project_id
  name       = "${var.name_prefix}-query"
  depends_on = [time_sleep.services]
}

resource "google_certificate_manager_certificate_map_entry" "query" {
  for_each     = local.mtls ? toset(var.query_mtls.domains) : toset([])
  project      = var.project_id
  name         = "${var.name_prefix}-query-${substr(sha1(each.value), 0, 8)}"
  map          = google_certificate_manager_certificate_map.query[0].name
  hostname     = each.value
  certificates = [google_certificate_manager_certificate.query[0].id]
}

resource "google_compute_region_network_endpoint_group" "query" {
  count                 = local.mtls ? 1 : 0
  project               = var.project_id
  region                = var.region
  name                  = "${var.name_prefix}-query"
  network_endpoint_type = "SERVERLESS"
  cloud_run {
    service = google_cloud_run_v2_service.query["all"].name
  }
  depends_on = [time_sleep.services]
}

# A serverless NEG's backend service takes no health check, port name or
# timeout (none is set); HTTP2 keeps gRPC HTTP/2 to Cloud Run.
resource "google_compute_backend_service" "query" {
  count                 = local.mtls ? 1 : 0
  project               = var.project_id
  name                  = "${var.name_prefix}-query"
  load_balancing_scheme = "EXTERNAL_MANAGED"
  protocol              = "HTTP2"
  # The load balancer's verdict on the client certificate, which the
  # service requires on every request (MTLS_VERIFIED_HEADER): a request
  # that reached it another way carries no such header.
  custom_request_headers = [
    "${local.mtls_verified_header}: {client_cert_chain_verified}",
    "X-Client-Cert-Present: {client_cert_present}",
    "X-Client-Cert-Error: {client_cert_error}",
    "X-Client-Cert-Hash: {client_cert_sha256_fingerprint}",
  ]
  backend {
    group = google_compute_region_network_endpoint_group.query[0].id
  }
}

resource "google_compute_url_map" "query" {
  count           = local.mtls ? 1 : 0
  project         = var.project_id
  name            = "${var.name_prefix}-query"
  default_service = google_compute_backend_service.query[0].id
}

resource "google_compute_target_https_proxy" "query" {
  count             = local.mtls ? 1 : 0
  project           = var.project_id
  name              = "${var.name_prefix}-query"
  url_map           = google_compute_url_map.query[0].id
  certificate_map   = "//certificatemanager.googleapis.com/${google_certificate_manager_certificate_map.query[0].id}"
  server_tls_policy = google_network_security_server_tls_policy.query[0].id
}

resource "google_compute_global_address" "query" {
  count      = local.mtls ? 1 : 0
  project    = var.project_id
  name       = "${var.name_prefix}-query"
  depends_on = [time_sleep.services]
}

resource "google_compute_global_forwarding_rule" "query" {
  count                 = local.mtls ? 1 : 0
  project               = var.project_id
  name                  = "${var.name_prefix}-query"
  load_balancing_scheme = "EXTERNAL_MANAGED"
  ip_protocol           = "TCP"
  port_range            = "443"
  target                = google_compute_target_https_proxy.query[0].id
  ip_address            = google_compute_global_address.query[0].id
}
