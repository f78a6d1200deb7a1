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
  project_id          = "studio-fleets-dev"
  function_source_zip = "main.tf" # any existing file stands in for the zip
}

run "dev_applies_without_any_cluster" {
  command = apply
  assert {
    condition     = length(module.fleetcast.publisher_service_accounts) == 0 && length(module.fleetcast.publisher_flags) == 0
    error_message = "no cluster, no publisher account and no Workload Identity binding"
  }
}

run "dev_publishes_the_clusters_it_is_given" {
  command = apply
  variables {
    clusters = {
      "pc-dev" = {
        gke_project          = "studio-games-dev"
        node_service_account = "gke-nodes@studio-games-dev.iam.gserviceaccount.com"
        labels               = { platform = "pc", env = "dev" }
      }
    }
  }
  assert {
    condition     = module.fleetcast.publisher_flags["pc-dev"] == "--cluster=pc-dev --project=studio-fleets-dev --topic=fleet-events-pc-dev --lease-namespace=fleetcast --cluster-labels=env=dev,platform=pc --trace-sample-ratio=0.01"
    error_message = "dev publishes one cluster: ${module.fleetcast.publisher_flags["pc-dev"]}"
  }
  assert {
    condition     = length(module.fleetcast.publisher_service_accounts) == 1
    error_message = "one publisher service account"
  }
}
