mock_provider "google" {}

variables {
  project_id          = "studio-fleets"
  function_source_zip = "main.tf" # any existing file stands in for the zip
  clusters = {
    "pc-eu"   = { gke_project = "studio-game-eu", labels = { platform = "pc" } }
    "ps5-us"  = { gke_project = "studio-game-us", labels = { platform = "ps5" } }
    "xbox-ap" = { gke_project = "studio-game-ap" }
  }
  query_invokers = ["group:matchmakers@studio.example"]
}

run "prod_publishes_every_cluster" {
  command = apply
  assert {
    condition     = length(module.fleetcast.publisher_flags) == 3 && length(module.fleetcast.publisher_service_accounts) == 3
    error_message = "one publisher per cluster"
  }
}
