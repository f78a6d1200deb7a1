# fleetcast: Pub/Sub (Avro-validated) → IngestFleetEvents → Firestore → QueryFleets.

locals {
  services = [
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "artifactregistry.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
  ]
  project_number = coalesce(var.project_number, one(data.google_project.this[*].number))
  pubsub_agent   = "serviceAccount:service-${local.project_number}@gcp-sa-pubsub.iam.gserviceaccount.com"
  # Both functions read these (functions/fnruntime); the cross-check test
  # compares them with what the code reads.
  firestore_env = {
    GOOGLE_CLOUD_PROJECT = var.project_id
    FIRESTORE_DATABASE   = var.firestore_database
    LOG_LEVEL            = var.log_level
  }
  database = var.create_firestore_database ? google_firestore_database.this[0].name : var.firestore_database
}

# Looked up unless given (which lets plan run without API access).
data "google_project" "this" {
  count      = var.project_number == null ? 1 : 0
  project_id = var.project_id
}

resource "google_project_service" "this" {
  for_each           = toset(local.services)
  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

# --- Pub/Sub -----------------------------------------------------------------

resource "google_pubsub_schema" "fleet_event" {
  project    = var.project_id
  name       = "${var.name_prefix}-fleet-event"
  type       = "AVRO"
  definition = file("${path.module}/../../../schemas/fleet_event.avsc")
  depends_on = [google_project_service.this]
}

resource "google_pubsub_topic" "events" {
  project = var.project_id
  name    = "${var.name_prefix}-fleet-events"
  schema_settings {
    schema   = google_pubsub_schema.fleet_event.id
    encoding = "JSON"
  }
  message_retention_duration = "86400s"
}

resource "google_pubsub_topic" "dead_letter" {
  project = var.project_id
  name    = "${var.name_prefix}-fleet-events-dead-letter"
}

# Holds what the ingest function could not apply, for inspection and replay.
resource "google_pubsub_subscription" "dead_letter" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-fleet-events-dead-letter-inspect"
  topic                      = google_pubsub_topic.dead_letter.id
  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"
  expiration_policy {
    ttl = ""
  }
}

# The ingest function's own push subscription rather than an Eventarc
# trigger: the provider cannot set a dead-letter policy on the subscription
# Eventarc creates. The Functions Framework turns the push body into the
# messagePublished CloudEvent the function takes.
resource "google_pubsub_subscription" "ingest" {
  project                 = var.project_id
  name                    = "${var.name_prefix}-ingest"
  topic                   = google_pubsub_topic.events.id
  ack_deadline_seconds    = 60
  enable_message_ordering = true
  push_config {
    push_endpoint = google_cloudfunctions2_function.ingest.service_config[0].uri
    oidc_token {
      service_account_email = google_service_account.push.email
      audience              = google_cloudfunctions2_function.ingest.service_config[0].uri
    }
  }
  retry_policy {
    minimum_backoff = "1s"
    maximum_backoff = "60s"
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
# topic, and mints the push subscription's OIDC tokens.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.dead_letter.name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  project      = var.project_id
  subscription = google_pubsub_subscription.ingest.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}

resource "google_service_account_iam_member" "push_token_creator" {
  service_account_id = google_service_account.push.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
}

# --- Firestore ---------------------------------------------------------------

resource "google_firestore_database" "this" {
  count                   = var.create_firestore_database ? 1 : 0
  project                 = var.project_id
  name                    = var.firestore_database
  location_id             = var.firestore_location
  type                    = "FIRESTORE_NATIVE"
  delete_protection_state = "DELETE_PROTECTION_ENABLED"
  depends_on              = [google_project_service.this]
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
}

# Annotations are copied for readers but never filtered on: no index
# entries (they may be long).
resource "google_firestore_field" "fleet_annotations" {
  project    = var.project_id
  database   = local.database
  collection = "fleets"
  field      = "annotations"
  index_config {}
}

# No composite index is needed: the query function sends only equality
# filters (deleted, cluster, namespace, labels.<key>), which Firestore
# serves by merging single-field indexes, a range on labels.<key> alone, and
# snapshot reconciliation ranges over document IDs.

# --- Service accounts --------------------------------------------------------

resource "google_service_account" "ingest" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-ingest"
  display_name = "fleetcast IngestFleetEvents"
}

resource "google_service_account" "query" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-query"
  display_name = "fleetcast QueryFleets"
}

resource "google_service_account" "push" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-push"
  display_name = "fleetcast Pub/Sub push into IngestFleetEvents"
}

resource "google_project_iam_member" "ingest_firestore" {
  project = var.project_id
  role    = "roles/datastore.user"
  member  = google_service_account.ingest.member
}

resource "google_project_iam_member" "query_firestore" {
  project = var.project_id
  role    = "roles/datastore.viewer"
  member  = google_service_account.query.member
}

resource "google_service_account" "publisher" {
  for_each     = var.clusters
  project      = var.project_id
  account_id   = "${var.name_prefix}-pub-${each.key}"
  display_name = "fleetcast publisher of cluster ${each.key}"
}

# Each publisher may publish to the fleet events topic, nothing else.
resource "google_pubsub_topic_iam_member" "publisher" {
  for_each = var.clusters
  project  = var.project_id
  topic    = google_pubsub_topic.events.name
  role     = "roles/pubsub.publisher"
  member   = google_service_account.publisher[each.key].member
}

# Workload Identity: the cluster's Kubernetes service account acts as its
# publisher's Google service account.
resource "google_service_account_iam_member" "publisher_workload_identity" {
  for_each           = var.clusters
  service_account_id = google_service_account.publisher[each.key].name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${each.value.gke_project}.svc.id.goog[${each.value.namespace}/${each.value.service_account}]"
}

# --- Functions -----------------------------------------------------------------

resource "google_storage_bucket" "source" {
  project                     = var.project_id
  name                        = "${var.project_id}-${var.name_prefix}-source"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  depends_on                  = [google_project_service.this]
}

# Named by content: a changed source is a new object, which redeploys; an
# unchanged one (the zip is deterministic) changes nothing.
resource "google_storage_bucket_object" "source" {
  name   = "functions-${filesha256(var.function_source_zip)}.zip"
  bucket = google_storage_bucket.source.name
  source = var.function_source_zip
}

resource "google_cloudfunctions2_function" "ingest" {
  project  = var.project_id
  location = var.region
  name     = "${var.name_prefix}-ingest"
  build_config {
    runtime     = var.go_runtime
    entry_point = "IngestFleetEvents"
    source {
      storage_source {
        bucket = google_storage_bucket.source.name
        object = google_storage_bucket_object.source.name
      }
    }
  }
  service_config {
    service_account_email            = google_service_account.ingest.email
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    available_memory                 = "256M"
    timeout_seconds                  = 60
    max_instance_count               = var.ingest_max_instances
    max_instance_request_concurrency = 1
    environment_variables = merge(local.firestore_env, {
      TOMBSTONE_RETENTION = var.tombstone_retention
      EVENT_TIMEOUT       = "50s"
    })
  }
  depends_on = [google_project_service.this]
}

resource "google_cloudfunctions2_function" "query" {
  project  = var.project_id
  location = var.region
  name     = "${var.name_prefix}-query"
  build_config {
    runtime     = var.go_runtime
    entry_point = "QueryFleets"
    source {
      storage_source {
        bucket = google_storage_bucket.source.name
        object = google_storage_bucket_object.source.name
      }
    }
  }
  service_config {
    service_account_email            = google_service_account.query.email
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    available_memory                 = "256M"
    timeout_seconds                  = 30
    min_instance_count               = var.query_min_instances
    max_instance_count               = var.query_max_instances
    max_instance_request_concurrency = 40
    environment_variables = merge(local.firestore_env, {
      STALE_AFTER = var.stale_after
    })
  }
  depends_on = [google_project_service.this]
}

# Only the push subscription's account may invoke the ingest function.
resource "google_cloud_run_v2_service_iam_member" "ingest_invoker" {
  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.ingest.service_config[0].service
  role     = "roles/run.invoker"
  member   = google_service_account.push.member
}

# Only the listed members may call the query API.
resource "google_cloud_run_v2_service_iam_member" "query_invoker" {
  for_each = toset(var.query_invokers)
  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.query.service_config[0].service
  role     = "roles/run.invoker"
  member   = each.value
}
