# Development: small function sizes, verbose logs, state kept locally. The
# game clusters are an input (none by default): each names the project of
# its GKE cluster, whose Workload Identity pool exists only once that
# project has a cluster.

module "fleetcast" {
  source = "../../modules/fleetcast"

  project_id           = var.project_id
  project_number       = var.project_number
  region               = var.region
  function_source_zip  = var.function_source_zip
  clusters             = var.clusters
  query_invokers       = var.query_invokers
  readers              = var.readers
  ingest_max_instances = 3
  query_min_instances  = 0
  query_max_instances  = 2
  log_level            = "DEBUG"
}
