# Development: one small cluster, small function sizes, state kept locally.

module "fleetcast" {
  source = "../../modules/fleetcast"

  project_id          = var.project_id
  project_number      = var.project_number
  region              = var.region
  function_source_zip = var.function_source_zip
  clusters = {
    "pc-dev" = {
      gke_project = var.project_id
      labels      = { platform = "pc", env = "dev" }
    }
  }
  query_invokers       = var.query_invokers
  ingest_max_instances = 3
  query_min_instances  = 0
  query_max_instances  = 2
  log_level            = "DEBUG"
}
