variable "project_id" {
  type        = string
  description = "Google Cloud project that hosts fleetcast."
}

variable "project_number" {
  type        = string
  description = "The project's number; looked up when null."
  default     = null
}

variable "region" {
  type        = string
  description = "Region of the functions."
  default     = "europe-west1"
}

variable "function_source_zip" {
  type        = string
  description = "The functions' source zip: go run ./internal/cmd/source -o PATH."
}

variable "query_invokers" {
  type        = list(string)
  description = "Members allowed to call the query API."
  default     = []
}

variable "clusters" {
  type = map(object({
    gke_project = optional(string)
    workload_identity_federation = optional(object({
      issuer_uri = string
      jwks_json  = optional(string)
    }))
    namespace       = optional(string, "fleetcast")
    service_account = optional(string, "fleetcast-publisher")
    labels          = optional(map(string), {})
  }))
  description = "Every game cluster: see the module's clusters variable."
}

variable "readers" {
  type        = list(string)
  description = "Members that read fleet state (Firestore and the query API), such as matchmakers' service accounts."
  default     = []
}
