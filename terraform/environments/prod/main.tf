# Production: every game cluster, warm query instances, state in GCS
# (backend.tf).

module "fleetcast" {
  source = "../../modules/fleetcast"

  project_id           = var.project_id
  project_number       = var.project_number
  region               = var.region
  function_source_zip  = var.function_source_zip
  clusters             = var.clusters
  query_invokers       = var.query_invokers
  readers              = var.readers
  ingest_max_instances = 100
  query_min_instances  = 2
  query_max_instances  = 50
  tombstone_retention  = "72h"
}
