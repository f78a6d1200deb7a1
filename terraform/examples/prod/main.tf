# fleetcast in production: every game cluster, warm query instances, the
# ingest and the query side as Cloud Run services billed by instance, state
# in a GCS bucket (backend.tf). Every other setting is the module's default.

terraform {
  required_version = ">= 1.9"
  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 8.0, < 9.0"
    }
    time = {
      source  = "hashicorp/time"
      version = ">= 0.14, < 1.0"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}

module "fleetcast" {
  source = "../../modules/fleetcast"

  project_id          = var.project_id
  project_number      = var.project_number
  region              = var.region
  function_source_zip = var.function_source_zip
  clusters            = var.clusters
  query_invokers      = var.query_invokers
  readers             = var.readers

  # Pushes every few milliseconds and streams open all month keep both
  # sides' instances busy: billed by instance, they cost less than billed
  # per request (BENCHMARKS.md §7 prices this deployment). Their images
  # are in the module's registry before the services are created
  # (terraform/README.md, "Production").
  ingest_mode  = "service"
  ingest_image = var.ingest_image
  query_mode   = "service"
  query_image  = var.query_image

  ingest_max_instances = 100
  query_min_instances  = 2
  query_max_instances  = 50
  tombstone_retention  = "72h"
}

# What differs from one deployment to the next; the module's variables say
# what each means.
variable "project_id" { type = string }
# Unused while both sides run as services.
variable "function_source_zip" {
  type    = string
  default = null
}
variable "project_number" {
  type    = string
  default = null
}
variable "region" {
  type    = string
  default = "europe-west1"
}
variable "clusters" { type = any }
# The fleetcast-ingest and fleetcast-query images (make cloudbuild), by
# digest: REGION-docker.pkg.dev/PROJECT/fleetcast/fleetcast-ingest@sha256:…
variable "ingest_image" { type = string }
variable "query_image" { type = string }
variable "query_invokers" {
  type    = list(string)
  default = []
}
variable "readers" {
  type    = list(string)
  default = []
}

# Every output of the module, by its name:
#   terraform output -json fleetcast | jq -r .query_url
output "fleetcast" {
  description = "The module's outputs (modules/fleetcast/outputs.tf)."
  value       = module.fleetcast
}
