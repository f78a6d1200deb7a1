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

variables {
  project_id          = "studio-fleets-dev"
  function_source_zip = "main.tf" # any existing file stands in for the zip
}

run "dev_is_small_and_has_one_cluster" {
  command = apply
  assert {
    condition     = module.fleetcast.publisher_flags["pc-dev"] == "--cluster=pc-dev --project=studio-fleets-dev --topic=fleetcast-fleet-events --lease-namespace=fleetcast --cluster-labels=env=dev,platform=pc"
    error_message = "dev publishes one cluster: ${module.fleetcast.publisher_flags["pc-dev"]}"
  }
  assert {
    condition     = length(module.fleetcast.publisher_service_accounts) == 1
    error_message = "one publisher service account"
  }
}
