# Offline tests of the module: a mock Google provider, applied in memory.

mock_provider "google" {
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
    }
  }
}

# time_sleep waits for nothing here.
mock_provider "time" {}

# What Google would compute, so that IAM members are real ones the
# provider's validation accepts and the assertions can name.
override_resource {
  target = google_service_account.ingest
  values = {
    email  = "fleetcast-ingest@studio-fleets.iam.gserviceaccount.com"
    member = "serviceAccount:fleetcast-ingest@studio-fleets.iam.gserviceaccount.com"
    name   = "projects/studio-fleets/serviceAccounts/fleetcast-ingest@studio-fleets.iam.gserviceaccount.com"
  }
}

override_resource {
  target = google_service_account.query
  values = {
    email  = "fleetcast-query@studio-fleets.iam.gserviceaccount.com"
    member = "serviceAccount:fleetcast-query@studio-fleets.iam.gserviceaccount.com"
    name   = "projects/studio-fleets/serviceAccounts/fleetcast-query@studio-fleets.iam.gserviceaccount.com"
  }
}

override_resource {
  target = google_service_account.push
  values = {
    email  = "fleetcast-push@studio-fleets.iam.gserviceaccount.com"
    member = "serviceAccount:fleetcast-push@studio-fleets.iam.gserviceaccount.com"
    name   = "projects/studio-fleets/serviceAccounts/fleetcast-push@studio-fleets.iam.gserviceaccount.com"
  }
}

override_resource {
  target = google_service_account.build
  values = {
    email  = "fleetcast-build@studio-fleets.iam.gserviceaccount.com"
    member = "serviceAccount:fleetcast-build@studio-fleets.iam.gserviceaccount.com"
    name   = "projects/studio-fleets/serviceAccounts/fleetcast-build@studio-fleets.iam.gserviceaccount.com"
    id     = "projects/studio-fleets/serviceAccounts/fleetcast-build@studio-fleets.iam.gserviceaccount.com"
  }
}

override_resource {
  target = google_service_account.publisher
  values = {
    email  = "fleetcast-pub@studio-fleets.iam.gserviceaccount.com"
    member = "serviceAccount:fleetcast-pub@studio-fleets.iam.gserviceaccount.com"
    name   = "projects/studio-fleets/serviceAccounts/fleetcast-pub@studio-fleets.iam.gserviceaccount.com"
  }
}

override_resource {
  target = google_iam_workload_identity_pool.cluster
  values = {
    name = "projects/123456789012/locations/global/workloadIdentityPools/fleetcast-eks-us"
  }
}

override_resource {
  target = google_iam_workload_identity_pool_provider.cluster
  values = {
    name = "projects/123456789012/locations/global/workloadIdentityPools/fleetcast-eks-us/providers/kubernetes"
  }
}

variables {
  project_id          = "studio-fleets"
  function_source_zip = "tests/fleetcast.tftest.hcl" # any existing file stands in for the zip
  clusters = {
    "pc-eu" = {
      gke_project          = "studio-game-eu"
      node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com"
      labels               = { platform = "pc", region = "europe-west1" }
    }
    "ps5-us" = {
      gke_project          = "studio-game-us"
      node_service_account = "gke-nodes@studio-game-us.iam.gserviceaccount.com"
      namespace            = "agents"
      service_account      = "publisher"
    }
  }
  query_invokers = ["serviceAccount:matchmaker@studio-fleets.iam.gserviceaccount.com"]
}

run "topic_validates_events_against_the_avro_schema" {
  command = apply
  assert {
    condition     = google_pubsub_schema.fleet_event.type == "AVRO"
    error_message = "the topic's schema must be Avro"
  }
  assert {
    condition     = google_pubsub_schema.fleet_event.definition == file("${path.module}/../../../schemas/fleet_event.avsc")
    error_message = "the schema must be schemas/fleet_event.avsc"
  }
  assert {
    condition     = alltrue([for t in google_pubsub_topic.events : t.schema_settings[0].schema == google_pubsub_schema.fleet_event.id && t.schema_settings[0].encoding == "JSON"])
    error_message = "every topic must validate messages against the schema with JSON encoding"
  }
  assert {
    condition     = keys(google_pubsub_topic.events) == ["pc-eu", "ps5-us"] && google_pubsub_topic.events["pc-eu"].name == "fleet-events-pc-eu" && google_pubsub_topic.events["ps5-us"].name == "fleet-events-ps5-us"
    error_message = "one topic per cluster, fleet-events-<cluster>"
  }
}

run "undeliverable_events_go_to_the_dead_letter_topic" {
  command = apply
  assert {
    condition     = alltrue([for sub in google_pubsub_subscription.ingest : sub.dead_letter_policy[0].dead_letter_topic == google_pubsub_topic.dead_letter.id]) && google_pubsub_subscription.ingest["ps5-us"].topic == google_pubsub_topic.events["ps5-us"].id
    error_message = "the ingest subscription must dead-letter to the dead-letter topic"
  }
  assert {
    condition     = google_pubsub_subscription.ingest["pc-eu"].dead_letter_policy[0].max_delivery_attempts == 20
    error_message = "twenty deliveries before dead-lettering by default"
  }
  assert {
    condition     = google_pubsub_subscription.ingest["pc-eu"].retry_policy[0].minimum_backoff == "10s" && google_pubsub_subscription.ingest["pc-eu"].retry_policy[0].maximum_backoff == "600s" && google_pubsub_subscription.ingest["pc-eu"].enable_message_ordering
    error_message = "retries back off from 10 s to 600 s and keep each fleet's order"
  }
  assert {
    condition     = google_pubsub_subscription.dead_letter.topic == google_pubsub_topic.dead_letter.id
    error_message = "a subscription must hold dead letters for inspection"
  }
  assert {
    condition     = google_pubsub_topic_iam_member.dead_letter_publisher.member == "serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com" && alltrue([for k, m in google_pubsub_subscription_iam_member.dead_letter_subscriber : m.role == "roles/pubsub.subscriber" && m.subscription == google_pubsub_subscription.ingest[k].name])
    error_message = "Pub/Sub's service agent must be able to move messages to the dead-letter topic"
  }
}

run "tombstones_expire_through_a_ttl_policy" {
  command = apply
  assert {
    condition     = google_firestore_field.fleet_expire_at.collection == "fleets" && google_firestore_field.fleet_expire_at.field == "expireAt" && length(google_firestore_field.fleet_expire_at.ttl_config) == 1
    error_message = "fleets.expireAt must carry a TTL policy"
  }
}

run "each_service_account_has_exactly_its_roles" {
  command = apply
  assert {
    condition     = google_project_iam_member.ingest_firestore.role == "roles/datastore.user" && google_project_iam_member.ingest_firestore.member == "serviceAccount:fleetcast-ingest@studio-fleets.iam.gserviceaccount.com"
    error_message = "the ingest function writes Firestore: roles/datastore.user"
  }
  assert {
    condition     = google_project_iam_member.query_firestore.role == "roles/datastore.viewer" && google_project_iam_member.query_firestore.member == "serviceAccount:fleetcast-query@studio-fleets.iam.gserviceaccount.com"
    error_message = "the query function only reads Firestore: roles/datastore.viewer"
  }
  assert {
    condition     = alltrue([for k, m in google_pubsub_topic_iam_member.publisher : m.role == "roles/pubsub.publisher" && m.topic == google_pubsub_topic.events[k].name && m.member == google_service_account.publisher[k].member])
    error_message = "each cluster's publisher may publish to its own topic only"
  }
  assert {
    condition     = length(google_pubsub_topic_iam_member.publisher) == 2 && length(google_service_account.publisher) == 2
    error_message = "one publisher service account per cluster"
  }
  assert {
    condition     = google_service_account_iam_member.publisher_workload_identity["ps5-us"].member == "serviceAccount:studio-game-us.svc.id.goog[agents/publisher]" && google_service_account_iam_member.publisher_workload_identity["pc-eu"].member == "serviceAccount:studio-game-eu.svc.id.goog[fleetcast/fleetcast-publisher]"
    error_message = "Workload Identity binds each cluster's Kubernetes service account"
  }
  assert {
    condition     = google_cloud_run_v2_service_iam_member.ingest_invoker.member == "serviceAccount:fleetcast-push@studio-fleets.iam.gserviceaccount.com" && google_cloud_run_v2_service_iam_member.ingest_invoker.role == "roles/run.invoker"
    error_message = "only the push subscription's account invokes the ingest function"
  }
  assert {
    condition     = keys(google_cloud_run_v2_service_iam_member.query_invoker) == ["serviceAccount:matchmaker@studio-fleets.iam.gserviceaccount.com"]
    error_message = "only the listed members invoke the query function"
  }
  assert {
    condition     = toset(keys(google_project_iam_member.traces_writer)) == toset(["ingest", "query", "publisher-pc-eu", "publisher-ps5-us"]) && alltrue([for m in google_project_iam_member.traces_writer : m.role == "roles/telemetry.tracesWriter"]) && google_project_iam_member.traces_writer["ingest"].member == "serviceAccount:fleetcast-ingest@studio-fleets.iam.gserviceaccount.com"
    error_message = "the functions and each publisher write their spans, nothing else"
  }
  assert {
    condition     = google_cloudfunctions2_function.ingest[0].service_config[0].environment_variables["TRACE_SAMPLE_RATIO"] == "0.01" && google_cloudfunctions2_function.query["all"].service_config[0].environment_variables["TRACE_SAMPLE_RATIO"] == "0.01"
    error_message = "both functions sample trace_sample_ratio"
  }
  assert {
    condition     = google_cloudfunctions2_function.ingest[0].service_config[0].service_account_email == "fleetcast-ingest@studio-fleets.iam.gserviceaccount.com" && google_cloudfunctions2_function.query["all"].service_config[0].service_account_email == "fleetcast-query@studio-fleets.iam.gserviceaccount.com"
    error_message = "each function runs as its own service account"
  }
}

run "functions_run_the_code_entry_points" {
  command = apply
  assert {
    condition     = google_cloudfunctions2_function.ingest[0].build_config[0].entry_point == "IngestFleetEvents" && google_cloudfunctions2_function.query["all"].build_config[0].entry_point == "QueryFleets"
    error_message = "entry points must be the registered function names"
  }
  assert {
    condition     = startswith(google_storage_bucket_object.source[0].name, "functions-") && google_cloudfunctions2_function.ingest[0].build_config[0].source[0].storage_source[0].object == google_storage_bucket_object.source[0].name
    error_message = "the functions deploy the uploaded source, named by its content"
  }
}

run "the_push_endpoint_names_the_topic" {
  command = apply
  assert {
    # The Functions Framework takes the CloudEvent's source from
    # /projects/P/topics/T in the request path.
    condition     = google_pubsub_subscription.ingest["pc-eu"].push_config[0].push_endpoint == "${google_cloudfunctions2_function.ingest[0].service_config[0].uri}/projects/studio-fleets/topics/fleet-events-pc-eu"
    error_message = "push to <function URL>/projects/<project>/topics/<topic>: ${google_pubsub_subscription.ingest["pc-eu"].push_config[0].push_endpoint}"
  }
  assert {
    condition     = google_pubsub_subscription.ingest["pc-eu"].push_config[0].oidc_token[0].audience == google_cloudfunctions2_function.ingest[0].service_config[0].uri
    error_message = "the push token's audience is the function's URL"
  }
}

run "no_message_outlives_a_tombstone" {
  command = apply
  variables {
    tombstone_retention = "72h"
  }
  assert {
    condition     = google_pubsub_subscription.ingest["pc-eu"].message_retention_duration == "129600s" && google_pubsub_subscription.dead_letter.message_retention_duration == "129600s" && google_pubsub_topic.events["pc-eu"].message_retention_duration == "129600s"
    error_message = "the subscription, the dead letters and the topic each keep half of the 72 h tombstone retention"
  }
  assert {
    condition     = google_cloudfunctions2_function.ingest[0].service_config[0].environment_variables["TOMBSTONE_RETENTION"] == "72h"
    error_message = "the function keeps tombstones as long as the module says"
  }
}

run "tombstone_retention_within_what_pubsub_can_keep" {
  command = plan
  variables {
    tombstone_retention = "720h"
  }
  expect_failures = [var.tombstone_retention]
}

run "every_attempt_before_the_subscription_drops_the_message" {
  command = plan
  variables {
    tombstone_retention   = "12h"
    max_delivery_attempts = 40
  }
  expect_failures = [var.max_delivery_attempts]
}

run "builds_run_as_their_own_account" {
  command = apply
  assert {
    condition     = google_cloudfunctions2_function.ingest[0].build_config[0].service_account == "projects/studio-fleets/serviceAccounts/fleetcast-build@studio-fleets.iam.gserviceaccount.com" && google_cloudfunctions2_function.query["all"].build_config[0].service_account == google_cloudfunctions2_function.ingest[0].build_config[0].service_account
    error_message = "both functions build as the build service account"
  }
  assert {
    condition     = toset([for m in google_project_iam_member.build : m.role]) == toset(["roles/logging.logWriter", "roles/artifactregistry.writer", "roles/storage.objectAdmin"]) && alltrue([for m in google_project_iam_member.build : m.member == "serviceAccount:fleetcast-build@studio-fleets.iam.gserviceaccount.com"])
    error_message = "the build account holds the roles a function build needs"
  }
}

run "the_apis_a_fresh_project_lacks_are_enabled" {
  command = apply
  assert {
    condition     = length(setsubtract(["cloudresourcemanager.googleapis.com", "iamcredentials.googleapis.com", "cloudbuild.googleapis.com", "run.googleapis.com", "pubsub.googleapis.com", "firestore.googleapis.com"], keys(google_project_service.this))) == 0
    error_message = "every API the module uses is enabled: ${join(", ", keys(google_project_service.this))}"
  }
}

run "functions_run_on_a_valid_cloud_run_size" {
  command = apply
  assert {
    # Cloud Run: concurrency above 1 needs at least one vCPU, and one vCPU
    # takes 512 MiB to 4 GiB (terraform/crosscheck_test.go checks the rule
    # on the planned environments too).
    condition     = alltrue([for f in [google_cloudfunctions2_function.ingest[0], google_cloudfunctions2_function.query["all"]] : f.service_config[0].available_cpu == "1" && contains(["512Mi", "1Gi", "2Gi", "4Gi"], f.service_config[0].available_memory)])
    error_message = "both functions run on one vCPU with 512 MiB to 4 GiB"
  }
}

run "the_longest_cluster_name_fits_its_service_account" {
  command = apply
  variables {
    # fleetcast-pub- is 14 characters: 16 remain of the 30.
    clusters = { "abcdefghij-12345" = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com" } }
  }
  assert {
    condition     = alltrue([for id in concat([for sa in google_service_account.publisher : sa.account_id], [google_service_account.ingest.account_id, google_service_account.query.account_id, google_service_account.push.account_id, google_service_account.build.account_id]) : can(regex("^[a-z][-a-z0-9]{4,28}[a-z0-9]$", id))])
    error_message = "every service account ID is a valid one: 6 to 30 characters"
  }
}

run "a_cluster_name_too_long_for_its_service_account" {
  command = plan
  variables {
    clusters = { "abcdefghij-123456" = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com" } }
  }
  expect_failures = [var.clusters]
}

run "the_longest_prefix_leaves_room_for_a_short_cluster_name" {
  command = plan
  variables {
    name_prefix = "fleetcast-abcde"
    clusters    = { "pc-eu-west" = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com" } }
  }
  assert {
    condition     = length(google_service_account.publisher["pc-eu-west"].account_id) == 30 && length(google_service_account.build.account_id) <= 30
    error_message = "a 15-character prefix and a 10-character cluster name make a 30-character ID"
  }
}

run "a_longer_cluster_name_with_the_longest_prefix_is_refused" {
  command = plan
  variables {
    name_prefix = "fleetcast-abcde"
    clusters    = { "pc-eu-west1" = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com" } }
  }
  expect_failures = [var.clusters]
}

run "outputs_give_each_cluster_its_publisher_flags" {
  command = apply
  assert {
    condition     = output.publisher_flags["pc-eu"] == "--cluster=pc-eu --project=studio-fleets --topic=fleet-events-pc-eu --lease-namespace=fleetcast --cluster-labels=platform=pc,region=europe-west1 --trace-sample-ratio=0.01"
    error_message = "publisher flags for pc-eu: ${output.publisher_flags["pc-eu"]}"
  }
  assert {
    condition     = output.publisher_service_accounts["pc-eu"] == google_service_account.publisher["pc-eu"].email
    error_message = "the publisher's service account per cluster"
  }
  assert {
    condition     = output.publisher_chart_values["pc-eu"].traceSampleRatio == 0.01
    error_message = "the chart samples as the functions do"
  }
}

run "the_ingest_function_knows_the_topics_and_is_internal" {
  command = apply
  assert {
    condition     = google_cloudfunctions2_function.ingest[0].service_config[0].environment_variables["TOPIC_PREFIX"] == "fleet-events-" && google_cloudfunctions2_function.ingest[0].service_config[0].environment_variables["MAX_CLOCK_SKEW"] == "10m"
    error_message = "the function binds each topic to its cluster with the module's prefix"
  }
  assert {
    condition     = google_cloudfunctions2_function.ingest[0].service_config[0].ingress_settings == "ALLOW_INTERNAL_ONLY"
    error_message = "only Pub/Sub pushes from the project reach the ingest function"
  }
}

# ingest_mode = "service": the same handler from cmd/fleetcast-ingest's
# image, with the function's settings, identity and ingress, billed by
# instance; the pushes reach it instead. Cloud Run refuses PORT among a
# container's variables.
run "the_ingest_service_takes_the_functions_place" {
  command = apply
  variables {
    ingest_mode  = "service"
    ingest_image = "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-ingest:0.3.0"
  }
  assert {
    condition     = length(google_cloudfunctions2_function.ingest) == 0 && length(google_cloud_run_v2_service.ingest) == 1
    error_message = "ingest_mode = service replaces the ingest function by the Cloud Run service"
  }
  assert {
    condition     = google_cloud_run_v2_service.ingest[0].template[0].containers[0].resources[0].cpu_idle == false && google_cloud_run_v2_service.ingest[0].ingress == "INGRESS_TRAFFIC_INTERNAL_ONLY"
    error_message = "billed by instance (ingest_instance_billing), and only Pub/Sub pushes from the project reach it"
  }
  assert {
    condition = (
      { for e in google_cloud_run_v2_service.ingest[0].template[0].containers[0].env : e.name => e.value } ==
      { for k, v in local.ingest_env : k => tostring(v) }
    ) && !contains([for e in google_cloud_run_v2_service.ingest[0].template[0].containers[0].env : e.name], "PORT")
    error_message = "the service reads the function's variables, never PORT (Cloud Run's own)"
  }
  assert {
    condition     = google_cloud_run_v2_service.ingest[0].template[0].service_account == "fleetcast-ingest@studio-fleets.iam.gserviceaccount.com" && google_cloud_run_v2_service.ingest[0].template[0].timeout == "60s" && google_cloud_run_v2_service.ingest[0].template[0].max_instance_request_concurrency == 8 && google_cloud_run_v2_service.ingest[0].template[0].containers[0].resources[0].limits.cpu == "1"
    error_message = "the function's identity, timeout, concurrency and one vCPU"
  }
  assert {
    condition     = google_pubsub_subscription.ingest["pc-eu"].push_config[0].push_endpoint == "${google_cloud_run_v2_service.ingest[0].uri}/projects/studio-fleets/topics/fleet-events-pc-eu" && google_pubsub_subscription.ingest["pc-eu"].push_config[0].oidc_token[0].audience == google_cloud_run_v2_service.ingest[0].uri
    error_message = "the pushes reach the service, with a token for it"
  }
  assert {
    condition     = google_cloud_run_v2_service_iam_member.ingest_invoker.name == google_cloud_run_v2_service.ingest[0].name && output.ingest_url == google_cloud_run_v2_service.ingest[0].uri
    error_message = "only the push account may invoke the service"
  }
}

run "two_services_need_no_source" {
  command = apply
  variables {
    function_source_zip = null
    ingest_mode         = "service"
    ingest_image        = "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-ingest:0.3.0"
    query_mode          = "service"
    query_image         = "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-query:0.3.0"
  }
  assert {
    condition     = length(google_storage_bucket.source) == 0 && length(google_storage_bucket_object.source) == 0
    error_message = "no function, no source to upload"
  }
}

run "a_function_needs_the_source" {
  command = plan
  variables {
    function_source_zip = null
    ingest_mode         = "service"
    ingest_image        = "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-ingest:0.3.0"
  }
  expect_failures = [var.function_source_zip]
}

run "the_ingest_service_needs_its_image" {
  command = plan
  variables {
    ingest_mode = "service"
  }
  expect_failures = [var.ingest_image]
}

run "firestore_roles_hold_on_the_fleetcast_database_only" {
  command = apply
  assert {
    condition     = alltrue([for m in [google_project_iam_member.ingest_firestore, google_project_iam_member.query_firestore] : m.condition[0].expression == "resource.name == \"projects/studio-fleets/databases/(default)\""])
    error_message = "the functions' Datastore roles are conditioned on the database"
  }
}

run "readers_read_firestore_and_call_the_query_api" {
  command = apply
  variables {
    readers = ["serviceAccount:matchmaker-eu@studio-fleets.iam.gserviceaccount.com"]
  }
  assert {
    condition     = google_project_iam_member.readers_firestore["serviceAccount:matchmaker-eu@studio-fleets.iam.gserviceaccount.com"].role == "roles/datastore.viewer" && length(google_project_iam_member.readers_firestore["serviceAccount:matchmaker-eu@studio-fleets.iam.gserviceaccount.com"].condition) == 1
    error_message = "a reader views the fleetcast database"
  }
  assert {
    condition     = contains(keys(google_cloud_run_v2_service_iam_member.query_invoker), "serviceAccount:matchmaker-eu@studio-fleets.iam.gserviceaccount.com")
    error_message = "a reader may call the query API"
  }
}

run "durations_are_positive_as_the_functions_require" {
  command = plan
  variables {
    stale_after                = "0s"
    max_clock_skew             = "0m"
    query_cluster_refresh      = "0ms"
    query_commit_lag           = "0s"
    query_max_staleness        = "-1s"
    query_watch_poll           = "0ms"
    query_heartbeat            = "0s"
    query_stream_write_timeout = "0s"
  }
  expect_failures = [var.stale_after, var.max_clock_skew, var.query_cluster_refresh, var.query_commit_lag, var.query_max_staleness, var.query_watch_poll, var.query_heartbeat, var.query_stream_write_timeout]
}

run "a_sample_ratio_is_a_share" {
  command = plan
  variables {
    trace_sample_ratio = 1.5
  }
  expect_failures = [var.trace_sample_ratio]
}

run "query_limits_are_cloud_runs" {
  command = plan
  variables {
    query_timeout_seconds = 7200
    query_concurrency     = 1001
  }
  expect_failures = [var.query_timeout_seconds, var.query_concurrency]
}

run "a_cluster_name_must_be_a_dns_label" {
  command = plan
  variables {
    clusters = { "PC_EU" = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com" } }
  }
  expect_failures = [var.clusters]
}

run "all_users_may_never_query" {
  command = plan
  variables {
    query_invokers = ["allUsers"]
  }
  expect_failures = [var.query_invokers]
}

run "project_id_must_be_a_project_id" {
  command = plan
  variables {
    project_id = "Studio Fleets"
  }
  expect_failures = [var.project_id]
}

run "delivery_attempts_within_pubsub_limits" {
  command = plan
  variables {
    max_delivery_attempts = 3
  }
  expect_failures = [var.max_delivery_attempts]
}

run "the_source_zip_must_exist" {
  command = plan
  variables {
    function_source_zip = "does-not-exist.zip"
  }
  expect_failures = [var.function_source_zip]
}

run "a_cluster_outside_gke_federates_its_own_pool" {
  command = apply
  variables {
    clusters = {
      "pc-eu" = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com" }
      "eks-us" = {
        workload_identity_federation = { issuer_uri = "https://oidc.eks.us-east-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE" }
        labels                       = { platform = "pc", region = "us-east-1" }
      }
    }
  }
  assert {
    condition     = keys(google_iam_workload_identity_pool.cluster) == ["eks-us"] && google_iam_workload_identity_pool.cluster["eks-us"].workload_identity_pool_id == "fleetcast-eks-us"
    error_message = "the cluster outside GKE, and it alone, gets a pool of its own"
  }
  assert {
    condition     = google_iam_workload_identity_pool_provider.cluster["eks-us"].oidc[0].issuer_uri == "https://oidc.eks.us-east-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"
    error_message = "the provider trusts the cluster's token issuer"
  }
  assert {
    condition     = google_iam_workload_identity_pool_provider.cluster["eks-us"].attribute_condition == "assertion.sub == 'system:serviceaccount:fleetcast:fleetcast-publisher'" && google_iam_workload_identity_pool_provider.cluster["eks-us"].attribute_mapping["google.subject"] == "assertion.sub"
    error_message = "the provider admits the publisher's Kubernetes service account alone"
  }
  assert {
    condition     = google_service_account_iam_member.publisher_federation["eks-us"].member == "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/fleetcast-eks-us/subject/system:serviceaccount:fleetcast:fleetcast-publisher" && google_service_account_iam_member.publisher_federation["eks-us"].role == "roles/iam.workloadIdentityUser"
    error_message = "the federated publisher may act as its cluster's Google service account"
  }
  assert {
    condition     = keys(google_service_account_iam_member.publisher_workload_identity) == ["pc-eu"]
    error_message = "GKE Workload Identity only for the GKE cluster"
  }
  assert {
    condition     = output.publisher_chart_values["eks-us"].identity.type == "workloadIdentityFederation" && output.publisher_chart_values["eks-us"].identity.workloadIdentityFederation.provider == "//iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/fleetcast-eks-us/providers/kubernetes"
    error_message = "the chart's values name the provider as the credential configuration's audience"
  }
  assert {
    condition     = output.publisher_chart_values["eks-us"].identity.serviceAccount == "fleetcast-pub@studio-fleets.iam.gserviceaccount.com" && output.publisher_chart_values["eks-us"].topic == "fleet-events-eks-us" && output.publisher_chart_values["eks-us"].clusterLabels["region"] == "us-east-1"
    error_message = "the chart's values name the cluster's service account, topic and labels"
  }
  assert {
    condition     = output.publisher_chart_values["pc-eu"].identity == { type = "gke", serviceAccount = "fleetcast-pub@studio-fleets.iam.gserviceaccount.com", namespace = "fleetcast" }
    error_message = "a GKE cluster's chart values use Workload Identity, in the namespace the binding names"
  }
  assert {
    condition     = output.publisher_chart_values["pc-eu"].serviceAccount.name == "fleetcast-publisher" && output.publisher_chart_values["eks-us"].serviceAccount.name == "fleetcast-publisher"
    error_message = "the chart's Kubernetes service account is the one the Workload Identity binding names"
  }
}

run "images_live_in_one_repository_every_cluster_can_pull_from" {
  command = apply
  variables {
    clusters = {
      "pc-eu"  = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com", allocator_endpoint = "34.1.2.3:443" }
      "own-eu" = { gke_project = "studio-fleets" }
      "eks-us" = { workload_identity_federation = { issuer_uri = "https://oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE" } }
    }
  }
  assert {
    condition     = google_artifact_registry_repository.images.format == "DOCKER" && google_artifact_registry_repository.images.location == "europe-west1" && google_artifact_registry_repository.images.repository_id == "fleetcast" && google_artifact_registry_repository.images.docker_config[0].immutable_tags
    error_message = "one Docker repository in the functions' region, its tags immutable"
  }
  assert {
    condition     = output.registry == "europe-west1-docker.pkg.dev/studio-fleets/fleetcast" && output.publisher_image == "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-publisher"
    error_message = "the registry and the publisher's image are named as Artifact Registry names them"
  }
  assert {
    condition     = google_artifact_registry_repository_iam_member.pull["pc-eu"].member == "serviceAccount:gke-nodes@studio-game-eu.iam.gserviceaccount.com" && google_artifact_registry_repository_iam_member.pull["pc-eu"].role == "roles/artifactregistry.reader"
    error_message = "a GKE cluster of another project pulls as its nodes' service account"
  }
  assert {
    condition     = google_artifact_registry_repository_iam_member.pull["own-eu"].member == "serviceAccount:123456789012-compute@developer.gserviceaccount.com"
    error_message = "a GKE cluster of this project pulls as the Compute Engine default account unless told otherwise"
  }
  assert {
    condition     = google_artifact_registry_repository_iam_member.pull["eks-us"].member == "serviceAccount:fleetcast-pub@studio-fleets.iam.gserviceaccount.com" && output.publisher_chart_values["eks-us"].imagePullSecrets == [{ name = "fleetcast-registry" }]
    error_message = "a cluster outside GKE pulls with a secret minted as its publisher's identity, which the chart's values name"
  }
  assert {
    condition     = alltrue([for name in ["pc-eu", "own-eu", "eks-us"] : output.publisher_chart_values[name].image.repository == output.publisher_image])
    error_message = "every cluster's chart values name the repository's image"
  }
  assert {
    condition     = google_artifact_registry_repository_iam_member.build_push.member == "serviceAccount:fleetcast-build@studio-fleets.iam.gserviceaccount.com" && google_artifact_registry_repository_iam_member.build_push.role == "roles/artifactregistry.writer" && output.image_build_service_account == "fleetcast-build@studio-fleets.iam.gserviceaccount.com"
    error_message = "Cloud Build pushes as the build account"
  }
  assert {
    condition     = output.publisher_chart_values["pc-eu"].allocatorEndpoint == "34.1.2.3:443" && strcontains(output.publisher_flags["pc-eu"], "--allocator-endpoint=34.1.2.3:443") && output.publisher_chart_values["own-eu"].allocatorEndpoint == "" && !strcontains(output.publisher_flags["own-eu"], "--allocator-endpoint")
    error_message = "a cluster's allocator endpoint reaches its publisher, which advertises it"
  }
}

run "an_allocator_endpoint_is_host_and_port" {
  command = plan
  variables {
    clusters = { "own-eu" = { gke_project = "studio-fleets", allocator_endpoint = "https://34.1.2.3" } }
  }
  expect_failures = [var.clusters]
}

run "a_multi_region_registry" {
  command = plan
  variables {
    registry_location = "europe"
  }
  assert {
    condition     = output.registry == "europe-docker.pkg.dev/studio-fleets/fleetcast"
    error_message = "a multi-region repository is named by its multi-region"
  }
}

run "a_gke_cluster_of_another_project_names_its_nodes_account" {
  command = plan
  variables {
    clusters = { "pc-eu" = { gke_project = "studio-game-eu" } }
  }
  expect_failures = [var.clusters]
}

run "a_cluster_outside_gke_has_no_node_account" {
  command = plan
  variables {
    clusters = { "eks-us" = { workload_identity_federation = { issuer_uri = "https://issuer.example.com" }, node_service_account = "x@p.iam.gserviceaccount.com" } }
  }
  expect_failures = [var.clusters]
}

run "a_cluster_needs_exactly_one_identity" {
  command = plan
  variables {
    clusters = {
      "both" = {
        gke_project                  = "studio-game-eu"
        node_service_account         = "gke-nodes@studio-game-eu.iam.gserviceaccount.com"
        workload_identity_federation = { issuer_uri = "https://issuer.example.com" }
      }
    }
  }
  expect_failures = [var.clusters]
}

run "a_cluster_without_identity" {
  command = plan
  variables {
    clusters = { "neither" = {} }
  }
  expect_failures = [var.clusters]
}

run "an_issuer_must_be_https" {
  command = plan
  variables {
    clusters = { "aks-eu" = { workload_identity_federation = { issuer_uri = "http://issuer.example.com" } } }
  }
  expect_failures = [var.clusters]
}

run "jwks_must_hold_keys" {
  command = plan
  variables {
    clusters = { "onprem" = { workload_identity_federation = { issuer_uri = "https://kubernetes.default.svc", jwks_json = "{}" } } }
  }
  expect_failures = [var.clusters]
}

run "streams_per_instance_are_whole_and_within_cloud_run" {
  command = plan
  variables {
    query_max_streams = 1001
  }
  expect_failures = [var.query_max_streams]
}

run "two_gke_clusters_of_one_project_cannot_share_an_identity" {
  command = plan
  variables {
    clusters = {
      "pc-eu"  = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com" }
      "ps5-eu" = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com" }
    }
  }
  expect_failures = [var.clusters]
}

run "two_gke_clusters_of_one_project_with_their_own_accounts" {
  command = plan
  variables {
    clusters = {
      "pc-eu"  = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com" }
      "ps5-eu" = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com", service_account = "fleetcast-publisher-ps5-eu" }
      "pc-us"  = { gke_project = "studio-game-us", node_service_account = "gke-nodes@studio-game-us.iam.gserviceaccount.com" }
    }
  }
  assert {
    condition     = google_service_account_iam_member.publisher_workload_identity["ps5-eu"].member == "serviceAccount:studio-game-eu.svc.id.goog[fleetcast/fleetcast-publisher-ps5-eu]" && output.publisher_chart_values["ps5-eu"].serviceAccount.name == "fleetcast-publisher-ps5-eu"
    error_message = "each cluster's binding and chart values name its own account"
  }
}

# --- The query service (query_mode = "service") and its mTLS load balancer --
# The rules are the APIs': Cloud Run refuses PORT among the variables and
# forwards HTTP/2 only to a port named h2c; a ServerTlsPolicy validates
# clients on an Application Load Balancer only as a global policy with a
# TrustConfig, no client_validation_ca (Traffic Director's) and no
# allow_open, on an EXTERNAL_MANAGED (not classic) load balancer; a
# serverless NEG's backend service takes no health check.

run "the_query_service_speaks_http2_end_to_end" {
  command = apply
  variables {
    query_mode  = "service"
    query_image = "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-query:0.3.0"
  }
  assert {
    condition     = length(google_cloudfunctions2_function.query) == 0 && length(google_cloud_run_v2_service.query) == 1
    error_message = "query_mode = service replaces the query function by the Cloud Run service"
  }
  assert {
    condition     = google_cloud_run_v2_service.query["all"].template[0].containers[0].ports[0].name == "h2c" && google_cloud_run_v2_service.query["all"].template[0].containers[0].ports[0].container_port == 8080 && google_cloud_run_v2_service.query["all"].template[0].containers[0].resources[0].cpu_idle == false
    error_message = "HTTP/2 end to end: the container's port is named h2c; billed by instance (query_instance_billing)"
  }
  assert {
    condition     = !contains([for e in google_cloud_run_v2_service.query["all"].template[0].containers[0].env : e.name], "PORT") && contains([for e in google_cloud_run_v2_service.query["all"].template[0].containers[0].env : e.name], "MAX_STREAMS")
    error_message = "the service reads the function's variables, never PORT (Cloud Run's own)"
  }
  assert {
    condition     = google_cloud_run_v2_service.query["all"].template[0].timeout == "3600s" && google_cloud_run_v2_service.query["all"].template[0].service_account == "fleetcast-query@studio-fleets.iam.gserviceaccount.com"
    error_message = "the service runs as the query account, with the function's timeout"
  }
  assert {
    condition     = google_cloud_run_v2_service.query["all"].ingress == "INGRESS_TRAFFIC_ALL" && !google_cloud_run_v2_service.query["all"].invoker_iam_disabled && keys(google_cloud_run_v2_service_iam_member.query_invoker) == ["serviceAccount:matchmaker@studio-fleets.iam.gserviceaccount.com"] && google_cloud_run_v2_service_iam_member.query_invoker["serviceAccount:matchmaker@studio-fleets.iam.gserviceaccount.com"].name == google_cloud_run_v2_service.query["all"].name
    error_message = "without the load balancer, IAM decides who calls the service, as for the function"
  }
  assert {
    condition     = length(google_compute_global_forwarding_rule.query) == 0 && !contains(keys(google_project_service.this), "compute.googleapis.com")
    error_message = "no load balancer, and no Compute API, unless query_mtls asks"
  }
}

run "mutual_tls_in_front_of_the_service" {
  command = apply
  variables {
    query_mode  = "service"
    query_image = "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-query@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    query_mtls = {
      domains        = ["fleets.studio.example"]
      client_ca_pems = ["-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"]
    }
  }
  assert {
    condition     = google_cloud_run_v2_service.query["all"].ingress == "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER" && google_cloud_run_v2_service.query["all"].invoker_iam_disabled && length(google_cloud_run_v2_service_iam_member.query_invoker) == 0
    error_message = "behind the load balancer the service takes its requests only, and the client certificate is the credential"
  }
  assert {
    condition     = google_cloud_run_v2_service.query["all"].default_uri_disabled
    error_message = "no run.app URL behind the load balancer: internal ingress would admit the project's VPC networks through it, with no certificate"
  }
  assert {
    condition     = contains(google_compute_backend_service.query[0].custom_request_headers, "X-Client-Cert-Chain-Verified: {client_cert_chain_verified}") && contains([for e in google_cloud_run_v2_service.query["all"].template[0].containers[0].env : "${e.name}=${e.value}"], "MTLS_VERIFIED_HEADER=X-Client-Cert-Chain-Verified")
    error_message = "the load balancer sends its verdict on the client certificate, and the service requires it on every request"
  }
  assert {
    condition     = google_network_security_server_tls_policy.query[0].location == "global" && google_network_security_server_tls_policy.query[0].mtls_policy[0].client_validation_mode == "REJECT_INVALID" && length(google_network_security_server_tls_policy.query[0].mtls_policy[0].client_validation_ca) == 0 && !coalesce(google_network_security_server_tls_policy.query[0].allow_open, false)
    error_message = "an Application Load Balancer's policy: global, a mode, no client_validation_ca, not open"
  }
  assert {
    condition     = google_network_security_server_tls_policy.query[0].mtls_policy[0].client_validation_trust_config == "projects/123456789012/locations/global/trustConfigs/fleetcast-query-clients" && google_certificate_manager_trust_config.query[0].location == "global" && length(google_certificate_manager_trust_config.query[0].trust_stores[0].trust_anchors) == 1
    error_message = "the policy validates against the global TrustConfig of the clients' CAs"
  }
  assert {
    condition     = google_compute_global_forwarding_rule.query[0].load_balancing_scheme == "EXTERNAL_MANAGED" && google_compute_global_forwarding_rule.query[0].port_range == "443" && google_compute_backend_service.query[0].load_balancing_scheme == "EXTERNAL_MANAGED"
    error_message = "mutual TLS needs the global external Application Load Balancer, not the classic one"
  }
  assert {
    condition     = google_compute_backend_service.query[0].protocol == "HTTP2" && google_compute_backend_service.query[0].health_checks == null
    error_message = "a serverless NEG's backend: HTTP/2 to Cloud Run, no health check"
  }
  assert {
    condition     = google_compute_region_network_endpoint_group.query[0].network_endpoint_type == "SERVERLESS" && google_compute_region_network_endpoint_group.query[0].cloud_run[0].service == google_cloud_run_v2_service.query["all"].name
    error_message = "the serverless NEG points at the query service"
  }
  assert {
    condition     = google_compute_target_https_proxy.query[0].server_tls_policy == google_network_security_server_tls_policy.query[0].id && join(",", google_certificate_manager_certificate.query[0].managed[0].domains) == "fleets.studio.example"
    error_message = "the HTTPS proxy validates clients and serves a managed certificate for the domains"
  }
  assert {
    condition     = output.query_url == "https://fleets.studio.example" && alltrue([for s in ["compute.googleapis.com", "certificatemanager.googleapis.com", "networksecurity.googleapis.com"] : contains(keys(google_project_service.this), s)])
    error_message = "the query URL is the load balancer's, and its APIs are enabled"
  }
}

run "the_service_needs_its_image" {
  command = plan
  variables {
    query_mode = "service"
  }
  expect_failures = [var.query_image]
}

run "mutual_tls_needs_the_service" {
  command = plan
  variables {
    query_mtls = {
      domains        = ["fleets.studio.example"]
      client_ca_pems = ["-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"]
    }
  }
  expect_failures = [var.query_mtls]
}

run "mutual_tls_needs_a_domain_and_a_ca" {
  command = plan
  variables {
    query_mode  = "service"
    query_image = "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-query:0.3.0"
    query_mtls = {
      domains        = ["Fleets"]
      client_ca_pems = ["not a certificate"]
    }
  }
  expect_failures = [var.query_mtls, var.query_mtls]
}

run "every_cluster_has_its_stale_alert_and_the_alerts_notify_the_channels" {
  command = plan
  variables {
    notification_channels = ["projects/studio-fleets/notificationChannels/42"]
    stale_after           = "150s"
  }
  assert {
    condition     = length(google_monitoring_alert_policy.clusters_stale) == 1 && length(google_monitoring_alert_policy.clusters_stale[0].conditions) == 1
    error_message = "one stale alert, one condition, for every cluster"
  }
  assert {
    condition     = alltrue([for c in ["pc-eu", "ps5-us"] : strcontains(google_monitoring_alert_policy.clusters_stale[0].conditions[0].condition_prometheus_query_language[0].query, "\"cluster\", \"${c}\"")])
    error_message = "the stale alert names every cluster"
  }
  assert {
    condition     = strcontains(google_monitoring_alert_policy.clusters_stale[0].conditions[0].condition_prometheus_query_language[0].query, "[180s]")
    error_message = "STALE_AFTER rounded up to whole minutes, as Cloud Monitoring writes a log-based metric's points"
  }
  assert {
    condition     = alltrue([for p in concat([google_monitoring_alert_policy.dead_letter, google_monitoring_alert_policy.query_errors], values(google_monitoring_alert_policy.slo_burn)) : length(p.notification_channels) == 1 && contains(p.notification_channels, "projects/studio-fleets/notificationChannels/42")])
    error_message = "the alerts notify the channels given"
  }
}

run "a_notification_channel_that_is_no_channel_name" {
  command = plan
  variables {
    notification_channels = ["alerts@studio.example"]
  }
  expect_failures = [var.notification_channels]
}

run "metrics_labels_that_name_one_prometheus_label_twice" {
  command = plan
  variables {
    query_metrics_labels = ["app.kubernetes.io/version", "app_kubernetes_io/version"]
  }
  expect_failures = [var.query_metrics_labels]
}

# --- Query partitions (docs/capacity.md, "The query view's memory") --------

run "each_partition_is_a_query_function_of_its_clusters" {
  command = apply
  variables {
    query_partitions = { pc = ["pc-eu"], consoles = ["ps5-us"] }
  }
  assert {
    condition     = google_cloudfunctions2_function.query["pc"].name == "fleetcast-query-pc" && google_cloudfunctions2_function.query["pc"].service_config[0].environment_variables["VIEW_CLUSTERS"] == "pc-eu" && google_cloudfunctions2_function.query["consoles"].service_config[0].environment_variables["VIEW_CLUSTERS"] == "ps5-us"
    error_message = "a partition's function holds its clusters (VIEW_CLUSTERS)"
  }
  assert {
    condition     = google_cloudfunctions2_function.query["pc"].build_config[0].entry_point == "QueryFleets" && google_cloudfunctions2_function.query["pc"].service_config[0].service_account_email == google_cloudfunctions2_function.query["all"].service_config[0].service_account_email && google_cloudfunctions2_function.query["pc"].service_config[0].environment_variables["MAX_STREAMS"] == google_cloudfunctions2_function.query["all"].service_config[0].environment_variables["MAX_STREAMS"]
    error_message = "a partition runs QueryFleets as the query account, with the query function's settings"
  }
  assert {
    condition     = google_cloudfunctions2_function.query["all"].service_config[0].environment_variables["VIEW_CLUSTERS"] == ""
    error_message = "query_url still answers for every cluster"
  }
  assert {
    condition     = length(google_firestore_index.fleet_feed_by_cluster) == 1 && [for f in google_firestore_index.fleet_feed_by_cluster[0].fields : f.field_path] == ["cluster", "writtenAt"]
    error_message = "the partitions' feed has its index, led by the cluster"
  }
  assert {
    condition     = length(google_cloud_run_v2_service_iam_member.query_partition_invoker) == 2 && alltrue([for m in google_cloud_run_v2_service_iam_member.query_partition_invoker : m.member == "serviceAccount:matchmaker@studio-fleets.iam.gserviceaccount.com" && m.role == "roles/run.invoker"])
    error_message = "who may call the query function may call each partition"
  }
  assert {
    condition     = google_cloudfunctions2_function.query_merged[0].name == "fleetcast-query-merged" && google_cloudfunctions2_function.query_merged[0].build_config[0].entry_point == "QueryFleets" && google_cloudfunctions2_function.query_merged[0].service_config[0].environment_variables["PARTITIONS"] == "ps5-us=${google_cloudfunctions2_function.query["consoles"].service_config[0].uri}; pc-eu=${google_cloudfunctions2_function.query["pc"].service_config[0].uri}"
    error_message = "the merged function answers over every partition, each by its clusters and URL (PARTITIONS)"
  }
  assert {
    condition     = google_cloudfunctions2_function.query_merged[0].service_config[0].environment_variables["VIEW_CLUSTERS"] == "" && google_cloudfunctions2_function.query_merged[0].service_config[0].environment_variables["CHANGE_TOPIC"] == "" && google_cloudfunctions2_function.query_merged[0].service_config[0].environment_variables["PARTITION_TIMEOUT"] == "2s"
    error_message = "the merged function holds no view (the query function refuses PARTITIONS beside VIEW_CLUSTERS or CHANGE_TOPIC)"
  }
  assert {
    condition     = length(google_cloud_run_v2_service_iam_member.query_partition_merger) == 2 && alltrue([for m in google_cloud_run_v2_service_iam_member.query_partition_merger : m.member == "serviceAccount:fleetcast-query@studio-fleets.iam.gserviceaccount.com" && m.role == "roles/run.invoker"])
    error_message = "the merged function calls each partition as the query identity"
  }
  assert {
    condition     = length(google_cloud_run_v2_service_iam_member.query_merged_invoker) == 1 && output.query_merged_url == google_cloudfunctions2_function.query_merged[0].service_config[0].uri
    error_message = "who may call the query function may call the merged one, at query_merged_url"
  }
  assert {
    condition     = length(google_monitoring_alert_policy.partition_unanswered) == 1 && strcontains(google_logging_metric.partition_unanswered.filter, "resource.labels.service_name=\"${google_cloudfunctions2_function.query_merged[0].name}\"")
    error_message = "an alert covers the partitions the merged function cannot reach, counting its lines"
  }
}

run "no_partitions_no_partition_index" {
  command = plan
  assert {
    condition     = length(google_firestore_index.fleet_feed_by_cluster) == 0 && keys(google_cloudfunctions2_function.query) == ["all"] && length(google_cloudfunctions2_function.query_merged) == 0 && output.query_merged_url == null && length(google_monitoring_alert_policy.partition_unanswered) == 0
    error_message = "an index costs every write an entry: none that no query uses"
  }
}

run "a_partition_of_an_unknown_cluster" {
  command = plan
  variables {
    query_partitions = { pc = ["pc-eu", "pc-us"] }
  }
  expect_failures = [var.query_partitions]
}

run "a_cluster_in_two_partitions" {
  command = plan
  variables {
    query_partitions = { a = ["pc-eu"], b = ["pc-eu", "ps5-us"] }
  }
  expect_failures = [var.query_partitions]
}

run "partitions_in_service_mode_are_services" {
  command = apply
  variables {
    query_mode       = "service"
    query_image      = "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-query:0.3.0"
    query_partitions = { pc = ["pc-eu"], consoles = ["ps5-us"] }
    query_mtls = {
      domains        = ["fleets.studio.example"]
      client_ca_pems = ["-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"]
    }
  }
  assert {
    condition     = google_cloud_run_v2_service.query["pc"].name == "fleetcast-query-pc" && [for e in google_cloud_run_v2_service.query["pc"].template[0].containers[0].env : e.value if e.name == "VIEW_CLUSTERS"] == ["pc-eu"] && [for e in google_cloud_run_v2_service.query["all"].template[0].containers[0].env : e.value if e.name == "VIEW_CLUSTERS"] == [""]
    error_message = "a partition's service holds its clusters (VIEW_CLUSTERS); the query service every cluster"
  }
  assert {
    condition     = google_cloud_run_v2_service.query["all"].ingress == "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER" && google_cloud_run_v2_service.query["pc"].ingress == "INGRESS_TRAFFIC_ALL" && !google_cloud_run_v2_service.query["pc"].invoker_iam_disabled && [for e in google_cloud_run_v2_service.query["pc"].template[0].containers[0].env : e.value if e.name == "MTLS_VERIFIED_HEADER"] == [""]
    error_message = "only the query service is behind the mutual TLS load balancer; the partitions take ID tokens"
  }
  assert {
    condition     = google_cloud_run_v2_service.query_merged[0].name == "fleetcast-query-merged" && length(google_cloudfunctions2_function.query_merged) == 0 && [for e in google_cloud_run_v2_service.query_merged[0].template[0].containers[0].env : e.value if e.name == "PARTITIONS"] == ["ps5-us=${google_cloud_run_v2_service.query["consoles"].uri}; pc-eu=${google_cloud_run_v2_service.query["pc"].uri}"] && google_cloud_run_v2_service.query_merged[0].template[0].containers[0].resources[0].cpu_idle == false
    error_message = "the merged service answers over every partition's service (PARTITIONS), billed by instance as the query service"
  }
  assert {
    condition     = length(google_cloud_run_v2_service_iam_member.query_partition_merger) == 2 && google_cloud_run_v2_service_iam_member.query_partition_merger["pc"].name == google_cloud_run_v2_service.query["pc"].name && output.query_merged_url == google_cloud_run_v2_service.query_merged[0].uri && output.query_partition_urls["pc"] == google_cloud_run_v2_service.query["pc"].uri
    error_message = "the merged service calls each partition as the query identity, at the outputs' URLs"
  }
  assert {
    condition     = length(google_monitoring_alert_policy.partition_unanswered) == 1
    error_message = "an alert covers the partitions the merged service cannot reach"
  }
}

run "a_partition_named_merged" {
  command = plan
  variables {
    query_partitions = { merged = ["pc-eu"] }
  }
  expect_failures = [var.query_partitions]
}

run "a_placement_rule_without_a_priority" {
  command = plan
  variables {
    query_placement_policy = ["region=eu-west:0:100", "region=eu-north"]
  }
  expect_failures = [var.query_placement_policy]
}

run "an_slo_goal_cloud_monitoring_refuses" {
  command = plan
  variables {
    slo_query_availability = 0.9999
  }
  expect_failures = [var.slo_query_availability]
}

run "metrics_export_runs_the_prometheus_sidecar_beside_the_query_service" {
  command = plan
  variables {
    query_mode           = "service"
    query_image          = "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-query:0.3.0"
    query_metrics_export = true
  }
  assert {
    condition     = length(google_cloud_run_v2_service.query["all"].template[0].containers) == 2 && google_cloud_run_v2_service.query["all"].template[0].containers[1].depends_on == tolist(["query"])
    error_message = "the sidecar runs beside the query container and starts after it"
  }
  assert {
    condition     = length(google_cloud_run_v2_service.query["all"].template[0].containers[1].ports) == 0
    error_message = "only the query container takes requests"
  }
  assert {
    condition     = google_project_iam_member.query_metrics_writer[0].role == "roles/monitoring.metricWriter" && google_project_iam_member.query_metrics_writer[0].member == "serviceAccount:fleetcast-query@studio-fleets.iam.gserviceaccount.com"
    error_message = "the query identity writes the series"
  }
}

run "metrics_export_needs_the_service" {
  command = plan
  variables {
    query_metrics_export = true
  }
  expect_failures = [var.query_metrics_export]
}

run "metrics_answer_the_instance_unless_told" {
  command = plan
  assert {
    condition     = google_cloudfunctions2_function.query["all"].service_config[0].environment_variables["METRICS_ACCESS"] == "local" && google_cloudfunctions2_function.query["all"].service_config[0].environment_variables["MTLS_VERIFIED_HEADER"] == ""
    error_message = "/metrics answers only the instance's own scraper by default; no load balancer, no certificate check"
  }
}

run "metrics_access_is_local_all_or_off" {
  command = plan
  variables {
    query_metrics_access = "public"
  }
  expect_failures = [var.query_metrics_access]
}
