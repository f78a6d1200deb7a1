mock_provider "google" {
  # Valid IAM members for every service account (the provider checks them).
  mock_resource "google_service_account" {
    defaults = {
      email  = "fleetcast-mock@studio-fleets.iam.gserviceaccount.com"
      member = "serviceAccount:fleetcast-mock@studio-fleets.iam.gserviceaccount.com"
      name   = "projects/studio-fleets/serviceAccounts/fleetcast-mock@studio-fleets.iam.gserviceaccount.com"
    }
  }
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
    }
  }
}

# time_sleep waits for nothing here.
mock_provider "time" {}

variables {
  project_id = "studio-fleets"
  # Both sides are services: no source zip.
  clusters = {
    "pc-eu"   = { gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com", labels = { platform = "pc" } }
    "ps5-us"  = { gke_project = "studio-game-us", node_service_account = "gke-nodes@studio-game-us.iam.gserviceaccount.com", labels = { platform = "ps5" } }
    "xbox-ap" = { gke_project = "studio-game-ap", node_service_account = "gke-nodes@studio-game-ap.iam.gserviceaccount.com" }
  }
  query_invokers = ["group:matchmakers@studio.example"]
  ingest_image   = "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-ingest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
  query_image    = "europe-west1-docker.pkg.dev/studio-fleets/fleetcast/fleetcast-query@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
}

run "prod_publishes_every_cluster" {
  command = apply
  assert {
    condition     = length(module.fleetcast.publisher_flags) == 3 && length(module.fleetcast.publisher_service_accounts) == 3
    error_message = "one publisher per cluster"
  }
}

run "prod_is_sized_for_production" {
  command = apply
  assert {
    condition     = module.fleetcast.query_url != ""
    error_message = "the query API has a URL"
  }
}
