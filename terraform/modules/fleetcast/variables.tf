variable "project_id" {
  type        = string
  description = "Google Cloud project that hosts the pipeline."
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a Google Cloud project ID: 6 to 30 lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "project_number" {
  type        = string
  description = "The project's number, for Pub/Sub's service agent; looked up when null. Set it to plan without API access."
  default     = null
  validation {
    condition     = var.project_number == null || can(regex("^[0-9]{6,20}$", var.project_number))
    error_message = "project_number must be the project's number (digits)."
  }
}

variable "region" {
  type        = string
  description = "Region of the functions, the source bucket and the Eventarc/Cloud Run services."
  default     = "europe-west1"
  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]$", var.region))
    error_message = "region must be a Google Cloud region such as europe-west1."
  }
}

variable "name_prefix" {
  type        = string
  description = "Prefix of every resource name (topic, functions, service accounts)."
  default     = "fleetcast"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,14}$", var.name_prefix))
    error_message = "name_prefix must be 2 to 15 lowercase letters, digits or hyphens, starting with a letter (service account IDs are at most 30 characters)."
  }
}

variable "create_firestore_database" {
  type        = bool
  description = "Create the Firestore database; false to use an existing one named firestore_database."
  default     = true
}

variable "firestore_database" {
  type        = string
  description = "Firestore database ID the functions use."
  default     = "(default)"
  validation {
    condition     = var.firestore_database == "(default)" || can(regex("^[a-z][a-z0-9-]{2,61}[a-z0-9]$", var.firestore_database))
    error_message = "firestore_database must be (default) or 4 to 63 lowercase letters, digits or hyphens."
  }
}

variable "firestore_location" {
  type        = string
  description = "Location of a created Firestore database (a region or multi-region such as eur3)."
  default     = "eur3"
}

variable "function_source_zip" {
  type        = string
  description = "Path of the functions' source zip built by `go run ./internal/cmd/source` (deterministic: an unchanged source does not redeploy). Not needed, and not uploaded, when ingest_mode and query_mode are both service."
  default     = null
  validation {
    condition     = var.function_source_zip != null ? fileexists(var.function_source_zip) : var.ingest_mode == "service" && var.query_mode == "service"
    error_message = "function_source_zip must be an existing file, unless ingest_mode and query_mode are both service: build it with go run ./internal/cmd/source -o PATH."
  }
}

variable "go_runtime" {
  type        = string
  description = "Cloud Functions Go runtime; at least the go.mod's Go version."
  default     = "go126"
  validation {
    condition     = can(regex("^go1[2-9][0-9]$", var.go_runtime))
    error_message = "go_runtime must be a Go runtime such as go126."
  }
}

variable "clusters" {
  type = map(object({
    gke_project = optional(string)
    workload_identity_federation = optional(object({
      issuer_uri = string
      jwks_json  = optional(string)
    }))
    namespace            = optional(string, "fleetcast")
    service_account      = optional(string, "fleetcast-publisher")
    labels               = optional(map(string), {})
    node_service_account = optional(string)
    allocator_endpoint   = optional(string, "")
  }))
  description = <<-EOT
    Game clusters, by fleetcast cluster name (a DNS-1123 label), each with its Kubernetes namespace and service account, labels describing it, and exactly one identity:
    gke_project, the project of a GKE cluster whose Workload Identity pool <gke_project>.svc.id.goog the publisher runs in;
    or workload_identity_federation, for a cluster elsewhere (EKS, AKS, on-premises): the issuer of its service account tokens (kubectl get --raw /.well-known/openid-configuration), and, when that issuer is not reachable from the internet, its JWKS (kubectl get --raw /openid/v1/jwks). Such a cluster gets a workload identity pool and provider of its own.
    allocator_endpoint: the cluster's Agones allocator service, HOST:PORT, which its publisher advertises on the cluster's record (allocatorEndpoint) so that matchmakers learn where to allocate.
    node_service_account: a GKE cluster's nodes' service account, granted to pull the publisher's image (gcloud container node-pools describe POOL --cluster CLUSTER --format='value(config.serviceAccount)'); required when gke_project is another project, the project's Compute Engine default account otherwise.
  EOT
  default     = {}
  validation {
    condition     = alltrue([for name in keys(var.clusters) : can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", name))])
    error_message = "Every cluster name must be a DNS-1123 label: lowercase letters, digits and hyphens, at most 63 characters, starting and ending with a letter or digit."
  }
  validation {
    # Each cluster gets the service account <name_prefix>-pub-<cluster>,
    # whose ID Google limits to 30 characters.
    condition     = alltrue([for name in keys(var.clusters) : length("${var.name_prefix}-pub-${name}") <= 30])
    error_message = "Cluster names must fit the publisher's service account ID <name_prefix>-pub-<cluster> in 30 characters: at most ${30 - length("${var.name_prefix}-pub-")} characters with name_prefix \"${var.name_prefix}\"."
  }
  validation {
    # GKE's Workload Identity pool is the project's: every pod of every
    # cluster of gke_project running as namespace/service_account is the
    # one member PROJECT.svc.id.goog[NAMESPACE/NAME]. Two clusters sharing
    # it would each be able to act as the other's publisher.
    condition = alltrue([for member, names in {
      for name, c in var.clusters : "${c.gke_project}.svc.id.goog[${c.namespace}/${c.service_account}]" => name... if c.gke_project != null
    } : length(names) == 1])
    error_message = "Clusters of one GKE project that share a namespace and Kubernetes service account share one Workload Identity member, and could publish as each other: ${join("; ", [for member, names in {
      for name, c in var.clusters : "${c.gke_project}.svc.id.goog[${c.namespace}/${c.service_account}]" => name... if c.gke_project != null
    } : "${join(" and ", names)} are all ${member}" if length(names) > 1])}. Give each its own service_account (such as \"fleetcast-publisher-<cluster>\") or namespace; the chart values Terraform outputs carry it."
  }
  validation {
    condition     = alltrue([for c in values(var.clusters) : can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", c.namespace)) && can(regex("^[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$", c.service_account))])
    error_message = "Every cluster's namespace must be a DNS-1123 label and its service_account a DNS-1123 subdomain, as Kubernetes names them."
  }
  validation {
    condition     = alltrue([for c in values(var.clusters) : c.gke_project == null || c.gke_project == var.project_id || c.node_service_account != null])
    error_message = "A GKE cluster in another project pulls the publisher's image as its nodes' service account, which Terraform cannot look up offline: set node_service_account for ${join(", ", [for name, c in var.clusters : name if c.gke_project != null && c.gke_project != var.project_id && c.node_service_account == null])} (gcloud container node-pools describe POOL --cluster CLUSTER --project GKE_PROJECT --format='value(config.serviceAccount)'; \"default\" is GKE_PROJECT_NUMBER-compute@developer.gserviceaccount.com)."
  }
  validation {
    condition     = alltrue([for c in values(var.clusters) : c.allocator_endpoint == "" || can(regex("^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*|\\[[0-9A-Fa-f:.]+\\]):[0-9]{1,5}$", c.allocator_endpoint))])
    error_message = "Every cluster's allocator_endpoint must be empty or HOST:PORT, the agones-allocator Service's address (a DNS name or an IP address, IPv6 in brackets) and port."
  }
  validation {
    condition     = alltrue([for c in values(var.clusters) : c.node_service_account == null || (c.gke_project != null && can(regex("^[^@]+@[^@]+\\.gserviceaccount\\.com$", c.node_service_account)))])
    error_message = "node_service_account is a GKE cluster's nodes' service account email (NAME@PROJECT.iam.gserviceaccount.com, or NUMBER-compute@developer.gserviceaccount.com); a cluster outside GKE pulls with an image pull secret instead."
  }
  validation {
    condition     = alltrue([for c in values(var.clusters) : (c.gke_project == null) != (c.workload_identity_federation == null)])
    error_message = "Every cluster needs exactly one of gke_project (a GKE cluster) and workload_identity_federation (any other cluster)."
  }
  validation {
    condition     = alltrue([for c in values(var.clusters) : c.gke_project == null || can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", c.gke_project))])
    error_message = "Every cluster's gke_project must be the ID of the Google Cloud project holding its GKE cluster (Workload Identity pool <gke_project>.svc.id.goog)."
  }
  validation {
    condition     = alltrue([for c in values(var.clusters) : c.workload_identity_federation == null || can(regex("^https://[^/?#]+(/[^?#]*)?$", c.workload_identity_federation.issuer_uri))])
    error_message = "Every cluster's workload_identity_federation.issuer_uri must be the https URL of its service account token issuer (the iss of its tokens)."
  }
  validation {
    # Conditionals, not ||: Terraform evaluates both sides of ||.
    condition = alltrue([for c in values(var.clusters) : (
      c.workload_identity_federation == null ? true :
      c.workload_identity_federation.jwks_json == null ? true :
      try(length(jsondecode(c.workload_identity_federation.jwks_json).keys) > 0, false)
    )])
    error_message = "workload_identity_federation.jwks_json, when set, must be the cluster's JWKS document, with its keys (kubectl get --raw /openid/v1/jwks)."
  }
}

variable "query_invokers" {
  type        = list(string)
  description = "IAM members allowed to call the query function, e.g. serviceAccount:matchmaker@p.iam.gserviceaccount.com. Never allUsers."
  default     = []
  validation {
    condition     = alltrue([for m in var.query_invokers : !contains(["allUsers", "allAuthenticatedUsers"], m) && can(regex("^(user|serviceAccount|group|domain|principal|principalSet):", m))])
    error_message = "query_invokers must be IAM members such as serviceAccount:x@p.iam.gserviceaccount.com; allUsers and allAuthenticatedUsers are refused."
  }
}

variable "ingest_max_instances" {
  type        = number
  description = "Most instances of the ingest function (each has one vCPU)."
  default     = 20
  validation {
    condition     = var.ingest_max_instances >= 1 && var.ingest_max_instances <= 1000
    error_message = "ingest_max_instances must be from 1 to 1000."
  }
}

variable "ingest_concurrency" {
  type        = number
  description = "Push requests one ingest instance serves at once; each mostly waits on Firestore."
  default     = 8
  validation {
    condition     = var.ingest_concurrency >= 1 && var.ingest_concurrency <= 1000
    error_message = "ingest_concurrency must be from 1 to 1000 (Cloud Run's limit)."
  }
}

variable "query_min_instances" {
  type        = number
  description = "Instances of the query function kept warm."
  default     = 0
  validation {
    condition     = var.query_min_instances >= 0 && var.query_min_instances <= 100
    error_message = "query_min_instances must be from 0 to 100."
  }
}

variable "query_max_instances" {
  type        = number
  description = "Most instances of the query function."
  default     = 10
  validation {
    condition     = var.query_max_instances >= 1 && var.query_max_instances <= 1000
    error_message = "query_max_instances must be from 1 to 1000."
  }
}

variable "max_delivery_attempts" {
  type        = number
  description = "Deliveries of a fleet event before it goes to the dead-letter topic; a 429 from a busy function counts as one."
  default     = 20
  validation {
    condition     = var.max_delivery_attempts >= 5 && var.max_delivery_attempts <= 100
    error_message = "max_delivery_attempts must be from 5 to 100 (Pub/Sub's limits)."
  }
  validation {
    # Every attempt, even at the longest backoff (600 s), must come before
    # the subscription drops the message (half the tombstone retention).
    condition     = var.max_delivery_attempts * 600 <= tonumber(trimsuffix(var.tombstone_retention, "h")) * 3600 / 2
    error_message = "max_delivery_attempts × 600 s (the longest retry backoff) must fit in the subscription's retention, half of tombstone_retention: at most ${floor(tonumber(trimsuffix(var.tombstone_retention, "h")) * 3600 / 2 / 600)} attempts with tombstone_retention = ${var.tombstone_retention}."
  }
}

variable "retry_minimum_backoff" {
  type        = string
  description = "Least wait before Pub/Sub retries a failed push (the backoff grows to 600 s); with max_delivery_attempts it sets how long a burst may be refused before anything is dead-lettered."
  default     = "10s"
  validation {
    condition     = can(regex("^[0-9]+s$", var.retry_minimum_backoff)) && tonumber(trimsuffix(var.retry_minimum_backoff, "s")) >= 1 && tonumber(trimsuffix(var.retry_minimum_backoff, "s")) <= 600
    error_message = "retry_minimum_backoff must be whole seconds from 1s to 600s, such as 10s."
  }
}

variable "propagation_wait" {
  type        = string
  description = "How long to wait after enabling the APIs and after granting the build account its roles, before using them (a fresh project needs it)."
  default     = "120s"
  validation {
    condition     = can(regex("^[0-9]+s$", var.propagation_wait))
    error_message = "propagation_wait must be whole seconds such as 120s (0s in tests only)."
  }
}

variable "tombstone_retention" {
  type        = string
  description = "How long a deleted fleet's tombstone is kept (Go duration). Messages are kept half of it in the ingest subscription and half in the dead-letter subscription, so no event can outlive a tombstone."
  default     = "24h"
  validation {
    # Pub/Sub keeps a subscription's messages 10 minutes to 7 days: half of
    # it must be in that range.
    condition     = can(regex("^[0-9]+h$", var.tombstone_retention)) && tonumber(trimsuffix(var.tombstone_retention, "h")) >= 2 && tonumber(trimsuffix(var.tombstone_retention, "h")) <= 336
    error_message = "tombstone_retention must be whole hours from 2h to 336h, such as 24h: half of it is the subscriptions' message retention, which Pub/Sub allows up to 7 days."
  }
}

variable "stale_after" {
  type        = string
  description = "A cluster whose last heartbeat is older is stale (Go duration): three of the publishers' --snapshot-interval."
  default     = "90s"
  validation {
    # The function refuses a duration that is not positive.
    condition     = can(regex("^[0-9]+(s|m)$", var.stale_after)) && can(regex("[1-9]", var.stale_after))
    error_message = "stale_after must be a positive duration in seconds or minutes such as 90s."
  }
}

variable "query_max_staleness" {
  type        = string
  description = "How long before a request the query view's newest sync may have begun for the request to be answered without waiting for one (Go duration; 0: every answer waits, read-your-writes)."
  default     = "250ms"
  validation {
    condition     = can(regex("^([0-9]+(ms|s|m)|0)$", var.query_max_staleness))
    error_message = "query_max_staleness must be 0 or a duration in ms, s or m such as 250ms."
  }
}

variable "query_cluster_refresh" {
  type        = string
  description = "How often the query view reads the cluster documents written since its last read of them (Go duration): how old heartbeats, cluster labels and totals may be in an answer."
  default     = "1s"
  validation {
    # The function refuses a duration that is not positive.
    condition     = can(regex("^[0-9]+(ms|s|m)$", var.query_cluster_refresh)) && can(regex("[1-9]", var.query_cluster_refresh))
    error_message = "query_cluster_refresh must be a positive duration in ms, s or m such as 1s."
  }
}

variable "query_commit_lag" {
  type        = string
  description = "How long after its server timestamp a Firestore write may become visible to queries, plus the functions' clock error: each sync of the query view reads again what was written that long before the previous one (Go duration)."
  default     = "250ms"
  validation {
    condition     = can(regex("^[0-9]+(ms|s|m)$", var.query_commit_lag)) && can(regex("[1-9]", var.query_commit_lag))
    error_message = "query_commit_lag must be a positive duration in ms, s or m such as 250ms."
  }
}

variable "full_reconcile_every" {
  type        = number
  description = "One snapshot part in this many, on average, reads its range's fleet documents although the count and hash sum of its range agree (FULL_RECONCILE_EVERY): 240 is a full check of each range about every 2 hours at the default 30 s snapshot interval, about 4 reads added to the average part of 1000 fleets; 1 checks every part."
  default     = 240
  validation {
    condition     = var.full_reconcile_every >= 1 && floor(var.full_reconcile_every) == var.full_reconcile_every
    error_message = "full_reconcile_every must be a whole number of at least 1."
  }
}

variable "query_watch_poll" {
  type        = string
  description = "While watches (WatchFleets, /v1/watch) are open on an instance and its view's Firestore listener is down, how often the view reads what was written since its last read instead: the delay a change waits to reach the streams, and one billed query per poll (Go duration)."
  default     = "250ms"
  validation {
    condition     = can(regex("^[0-9]+(ms|s|m)$", var.query_watch_poll)) && can(regex("[1-9]", var.query_watch_poll))
    error_message = "query_watch_poll must be a positive duration in ms, s or m such as 250ms."
  }
}

variable "query_heartbeat" {
  type        = string
  description = "How often a watch stream sends a heartbeat, so that clients detect a dead stream (Go duration)."
  default     = "15s"
  validation {
    condition     = can(regex("^[0-9]+(ms|s|m)$", var.query_heartbeat)) && can(regex("[1-9]", var.query_heartbeat))
    error_message = "query_heartbeat must be a positive duration in ms, s or m such as 15s."
  }
}

variable "query_max_streams" {
  type        = number
  description = "Watch streams (WatchFleets, /v1/watch) one query instance serves at once (MAX_STREAMS); past it a stream is refused with resource_exhausted / 503 and Retry-After, and the client retries, most likely on another instance. At most query_concurrency, which counts streams and queries together."
  default     = 500
  validation {
    condition     = var.query_max_streams >= 1 && var.query_max_streams <= 1000 && floor(var.query_max_streams) == var.query_max_streams
    error_message = "query_max_streams must be a whole number from 1 to 1000 (Cloud Run's most requests per instance)."
  }
}

variable "query_max_view_bytes" {
  type        = string
  description = "The fleet documents one query instance holds in memory (VIEW_MAX_BYTES, a quantity such as 160Mi): 10 000 fleets at their largest take about 130 MiB. Past it the cluster whose fleets take the most is left out, reported stale and overBudget, until a full load finds room. At most 230Mi, half of the instance's memory limit, which the garbage collector needs to work in (docs/capacity.md)."
  default     = "160Mi"
  validation {
    condition     = can(regex("^[1-9][0-9]*(Ki|Mi|Gi)?$", var.query_max_view_bytes))
    error_message = "query_max_view_bytes must be a positive number of bytes or a quantity in Ki, Mi or Gi, such as 160Mi."
  }
  validation {
    # A query instance's collector runs by its memory limit (GOGC=off,
    # GOMEMLIMIT): it needs the view to leave it half of the limit.
    condition     = try(tonumber(regex("^[0-9]+", var.query_max_view_bytes)) * lookup({ Ki = 1024, Mi = 1048576, Gi = 1073741824 }, try(regex("(Ki|Mi|Gi)$", var.query_max_view_bytes)[0], ""), 1) <= local.query_memory_limit_mib / 2 * 1048576, false)
    error_message = "query_max_view_bytes must be at most half of a query instance's memory limit (GOMEMLIMIT, ${local.query_memory_limit_mib}MiB): the garbage collector, paced by that limit, needs the other half to work in."
  }
}

variable "feed_shards" {
  type        = number
  description = "Shards of the fleets' change feed (FEED_SHARDS, both functions): Firestore takes about 500 writes a second into the index range of a field that grows with every write, such as writtenAt, so the feed's index leads with a shard and the collection takes about 500 fleet writes a second per shard — 1 for up to 500 (five times the reference deployment), 30 (Firestore's limit on an \"in\" filter) for 15 000 (docs/capacity.md). Raise it before the writes need it; lowering it hides the dropped shards' fleets from the query side until they are written again or its next full load."
  default     = 1
  validation {
    condition     = var.feed_shards >= 1 && var.feed_shards <= 30 && floor(var.feed_shards) == var.feed_shards
    error_message = "feed_shards must be a whole number from 1 to 30 (Firestore's limit on the values of an \"in\" filter)."
  }
}

variable "store_ingested_event_logs" {
  type        = bool
  description = "Whether Cloud Logging stores the ingest function's \"fleet event ingested\" lines below WARNING, one of about 600 bytes per event that changed a document (BENCHMARKS.md §7). By default an exclusion drops them from the _Default sink: the log-based metrics built on them (ingest_outcome, ingest_lag, heartbeats) still count every one, and drops, failures and refusals, at WARNING or above, are kept. true: store them, to read each event's line in Logs Explorer."
  default     = false
}

variable "query_instance_billing" {
  type        = bool
  description = "With query_mode = \"service\": bill the query service's instances by instance (CPU always allocated) rather than by request. Its instances serve streams the whole month, so they are billed for their lives either way; by instance it is $0.000018 per vCPU-second and $0.000002 per GiB-second with no request fee, against $0.000024, $0.0000025 and $0.40 per million requests (Tier 1 regions; BENCHMARKS.md §7 prices both), and the view's change feed subscription is read between requests too. false: request-based billing, cheaper only for a query side idle most of the month (query_min_instances = 0). The functions (query_mode = \"function\") are billed by request."
  default     = true
}

variable "change_feed" {
  type        = bool
  description = "Whether the query instances follow the fleets on a Pub/Sub change feed (CHANGE_TOPIC, both functions; topic NAME_PREFIX-fleet-changes) rather than with a Firestore realtime listener each. A listener is billed one Firestore read per fleet document written, per query instance; the feed costs a message per write and per instance at Pub/Sub's price per byte, an order of magnitude less (BENCHMARKS.md §7). The ingest function announces each write before it acknowledges its event; each query instance creates a subscription of its own while streams run, and deletes it after (Pub/Sub deletes one left behind after a day unused)."
  default     = true
}

variable "query_partitions" {
  type        = map(list(string))
  description = "Partitions of the query side, for a deployment whose fleets do not fit one instance's view (query_max_view_bytes; docs/capacity.md): each key names one more query function (or, with query_mode = service, service), NAME_PREFIX-query-KEY, whose view holds the listed clusters only (VIEW_CLUSTERS, at most 30) and reads only their documents. A matchmaker asks the partition of its clusters (output query_partition_urls), or NAME_PREFIX-query-merged (query_merged_url), which answers over every partition as one view; a partition refuses a request about another cluster. The query_url function or service still answers for every cluster. Empty: no partitions."
  default     = {}
  validation {
    condition     = alltrue([for k, cs in var.query_partitions : can(regex("^[a-z]([-a-z0-9]{0,18}[a-z0-9])?$", k)) && !contains(["all", "merged"], k) && length(cs) >= 1 && length(cs) <= 30 && length(distinct(cs)) == length(cs)])
    error_message = "query_partitions: each key must be a lowercase name of at most 20 characters (letters, digits, hyphens) other than all (the query function of every cluster) and merged (the one over every partition), each partition 1 to 30 distinct clusters (Firestore's limit on an \"in\" filter)."
  }
  validation {
    condition     = length(flatten(values(var.query_partitions))) == length(distinct(flatten(values(var.query_partitions))))
    error_message = "query_partitions: a cluster belongs to one partition at most."
  }
  validation {
    condition     = alltrue([for c in flatten(values(var.query_partitions)) : contains(keys(var.clusters), c)])
    error_message = "query_partitions names a cluster that is not in clusters."
  }
}

variable "query_partition_timeout" {
  type        = string
  default     = "2s"
  description = "With query_partitions: how long the merged query function (query_merged_url) waits for each partition before answering without that partition's clusters, which it names unavailable (PARTITION_TIMEOUT)."
  validation {
    condition     = can(regex("^[1-9][0-9]*(ms|s)$", var.query_partition_timeout))
    error_message = "query_partition_timeout: a duration in ms or s, such as 2s."
  }
}

variable "query_feed_max_bytes" {
  type        = string
  description = "The replaced fleet states one query instance keeps for resuming streams (FEED_MAX_BYTES, a quantity such as 32Mi); a stream further behind restarts."
  default     = "32Mi"
  validation {
    condition     = can(regex("^[1-9][0-9]*(Ki|Mi|Gi)?$", var.query_feed_max_bytes))
    error_message = "query_feed_max_bytes must be a positive number of bytes or a quantity in Ki, Mi or Gi, such as 32Mi."
  }
}

variable "query_metrics_labels" {
  type        = list(string)
  description = "Fleet label keys (such as platform, version) that the query side's /metrics labels its series with, as label_<key>, and sums by past query_metrics_max_series (METRICS_LABELS)."
  default     = []
  validation {
    condition     = length(var.query_metrics_labels) <= 10 && alltrue([for k in var.query_metrics_labels : can(regex("^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", k))])
    error_message = "query_metrics_labels must hold at most 10 Kubernetes label keys, such as platform or app.kubernetes.io/version."
  }
  validation {
    condition     = length(distinct([for k in var.query_metrics_labels : replace(k, "/[^a-zA-Z0-9_]/", "_")])) == length(var.query_metrics_labels)
    error_message = "query_metrics_labels holds two keys that name the same Prometheus label (label_<key>, every character outside [a-zA-Z0-9_] an underscore), such as a.b and a_b."
  }
}

variable "query_placement_policy" {
  type        = list(string)
  description = "The placement policy of a Place request (GET /v1/placements) that gives none (PLACEMENT_POLICY): rules SELECTOR:PRIORITY[:WEIGHT] over cluster labels, in order, such as [\"region=eu-west:0:100\", \"region=eu-north:1:100\"]. Each cluster takes the first rule its labels match; a cluster none matches takes no match. Empty: every cluster alike."
  default     = []
  validation {
    condition     = length(var.query_placement_policy) <= 30 && alltrue([for r in var.query_placement_policy : can(regex("^[^;:]*:[0-9]{1,10}(:[0-9]{1,7})?$", r))])
    error_message = "query_placement_policy must hold at most 30 rules SELECTOR:PRIORITY[:WEIGHT] (a label selector over cluster labels, possibly empty; a priority of 0 or more; a weight from 0 to 1000000), such as region=eu-west:0:100 or :1."
  }
}

variable "query_metrics_max_series" {
  type        = number
  description = "The fleet series /metrics answers at most (METRICS_MAX_SERIES): past it, sums by cluster and query_metrics_labels. Each series scraped every 30 s is 86 400 samples a month that Managed Service for Prometheus bills."
  default     = 10000
  validation {
    condition     = var.query_metrics_max_series >= 1 && floor(var.query_metrics_max_series) == var.query_metrics_max_series
    error_message = "query_metrics_max_series must be a whole number of at least 1."
  }
}

variable "query_metrics_aggregate" {
  type        = bool
  description = "Whether /metrics always sums by cluster and query_metrics_labels (METRICS_AGGREGATE), however few the fleets."
  default     = false
}

variable "query_metrics_access" {
  type        = string
  description = "Who the query side's /metrics answers (METRICS_ACCESS): local, only the instance's own scraper (the query_metrics_export sidecar, on localhost; every request from outside is refused, 403); all, every caller the service admits (its invoker IAM or the mutual TLS load balancer), for a Prometheus that scrapes the service from outside; off, no one."
  default     = "local"
  validation {
    condition     = contains(["local", "all", "off"], var.query_metrics_access)
    error_message = "query_metrics_access must be local, all or off."
  }
}

variable "query_metrics_export" {
  type        = bool
  description = "Export /metrics to Cloud Monitoring (Managed Service for Prometheus) through Google's Prometheus sidecar for Cloud Run, which scrapes each query instance every 30 s: KEDA's gcp-stackdriver scaler, Grafana and Cloud Monitoring then read them as prometheus.googleapis.com/<name>/gauge. Needs query_mode = service (a function runs no sidecar). Each series is billed as a sample per scrape."
  default     = false
  validation {
    condition     = !var.query_metrics_export || var.query_mode == "service"
    error_message = "query_metrics_export needs query_mode = service: Cloud Functions run no sidecar container."
  }
}

variable "query_metrics_sidecar_image" {
  type        = string
  description = "The Managed Service for Prometheus sidecar's image for query_metrics_export."
  default     = "us-docker.pkg.dev/cloud-ops-agents-artifacts/cloud-run-gmp-sidecar/cloud-run-gmp-sidecar:1.2.0"
}

variable "query_stream_write_timeout" {
  type        = string
  description = "How long one message of a watch stream may take to write (STREAM_WRITE_TIMEOUT): a client that reads nothing for that long is dropped, and resumes (Go duration)."
  default     = "10s"
  validation {
    condition     = can(regex("^[0-9]+(ms|s|m)$", var.query_stream_write_timeout)) && can(regex("[1-9]", var.query_stream_write_timeout))
    error_message = "query_stream_write_timeout must be a positive duration in ms, s or m such as 10s."
  }
}

variable "query_timeout_seconds" {
  type        = number
  description = "The query function's request timeout: the longest a watch stream lasts before the client resumes it. Cloud Run allows up to 3600 s."
  default     = 3600
  validation {
    condition     = var.query_timeout_seconds >= 10 && var.query_timeout_seconds <= 3600
    error_message = "query_timeout_seconds must be from 10 to 3600 (Cloud Run's maximum request timeout)."
  }
}

variable "query_concurrency" {
  type        = number
  description = "Requests one query instance serves at once, open watch streams included; they share the instance's one view."
  default     = 1000
  validation {
    condition     = var.query_concurrency >= 1 && var.query_concurrency <= 1000
    error_message = "query_concurrency must be from 1 to 1000 (Cloud Run's maximum)."
  }
}

variable "topic_prefix" {
  type        = string
  description = "Each cluster's topic is <topic_prefix><cluster> (the ingest function's TOPIC_PREFIX, the publisher's default --topic)."
  default     = "fleet-events-"
  validation {
    # A topic ID starts with a letter, is 3 to 255 characters of letters,
    # digits and -_.~+%, and does not start with goog.
    condition     = can(regex("^[a-zA-Z][-a-zA-Z0-9_.~+%]{0,190}$", var.topic_prefix)) && !startswith(lower(var.topic_prefix), "goog")
    error_message = "topic_prefix must start a valid topic ID: a letter, then letters, digits or -_.~+%, not goog."
  }
}

variable "max_clock_skew" {
  type        = string
  description = "How far ahead of the ingest function's clock a publisher's may run before its events are refused (MAX_CLOCK_SKEW, Go duration)."
  default     = "10m"
  validation {
    condition     = can(regex("^[0-9]+(s|m|h)$", var.max_clock_skew)) && can(regex("[1-9]", var.max_clock_skew))
    error_message = "max_clock_skew must be a positive duration in seconds, minutes or hours such as 10m."
  }
}

variable "readers" {
  type        = list(string)
  description = "IAM members that read fleet state: Firestore read on the fleetcast database (realtime listeners, the Go client, the CLI) and the query API. Never allUsers."
  default     = []
  validation {
    condition     = alltrue([for m in var.readers : !contains(["allUsers", "allAuthenticatedUsers"], m) && can(regex("^(user|serviceAccount|group|domain|principal|principalSet):", m))])
    error_message = "readers must be IAM members such as serviceAccount:x@p.iam.gserviceaccount.com or a Workload Identity Federation principal; allUsers and allAuthenticatedUsers are refused."
  }
}

variable "log_level" {
  type        = string
  description = "Minimum severity the functions log."
  default     = "INFO"
  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR"], var.log_level)
    error_message = "log_level must be DEBUG, INFO, WARNING or ERROR."
  }
}

variable "trace_sample_ratio" {
  type        = number
  description = "Share of traces sampled and exported to Cloud Trace where they begin: the publishers' publishes (their chart values), the query side's requests, pushes without trace context; 0 to 1. An event's trace is sampled as its publisher decided. Cloud Trace bills spans past its free allotment (BENCHMARKS.md's bill)."
  default     = 0.01
  validation {
    condition     = var.trace_sample_ratio >= 0 && var.trace_sample_ratio <= 1
    error_message = "trace_sample_ratio must be from 0 to 1."
  }
}

variable "query_mode" {
  type        = string
  description = "How the query side runs: function (QueryFleets on Cloud Functions: REST, Connect and gRPC-Web over HTTP/1.1) or service (cmd/fleetcast-query's image, query_image, on Cloud Run with HTTP/2 end to end: native gRPC too)."
  default     = "function"
  validation {
    condition     = contains(["function", "service"], var.query_mode)
    error_message = "query_mode must be function or service."
  }
}

variable "ingest_mode" {
  type        = string
  description = "How the ingest side runs: function (IngestFleetEvents on Cloud Functions, built from function_source_zip, billed per push) or service (cmd/fleetcast-ingest's image, ingest_image, on Cloud Run: the same handler, settings, identity and ingress, billed by instance with ingest_instance_billing). Pushes arrive every few milliseconds at any real scale, which keeps an instance busy either way: by instance it is billed once, at the lower price, with no fee per push (BENCHMARKS.md §7)."
  default     = "function"
  validation {
    condition     = contains(["function", "service"], var.ingest_mode)
    error_message = "ingest_mode must be function or service."
  }
}

variable "ingest_image" {
  type        = string
  description = "The fleetcast-ingest image (cmd/fleetcast-ingest/Dockerfile) for ingest_mode = service, e.g. REGION-docker.pkg.dev/PROJECT/fleetcast/fleetcast-ingest@sha256:…"
  default     = null
  validation {
    condition     = var.ingest_mode != "service" || (var.ingest_image != null && can(regex("^[a-z0-9.-]+(:[0-9]+)?/[^:@ ]+(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?$", var.ingest_image)))
    error_message = "ingest_image is required with ingest_mode = service: an image reference such as europe-west1-docker.pkg.dev/PROJECT/fleetcast/fleetcast-ingest:0.3.0 (a digest is better)."
  }
}

variable "ingest_instance_billing" {
  type        = bool
  description = "With ingest_mode = \"service\": bill the ingest service's instances by instance (CPU always allocated) rather than by request. false: request-based billing, cheaper only for an ingest idle most of the month (few clusters, rare changes)."
  default     = true
}

variable "query_image" {
  type        = string
  description = "The fleetcast-query image (cmd/fleetcast-query/Dockerfile) for query_mode = service, e.g. REGION-docker.pkg.dev/PROJECT/fleetcast/fleetcast-query@sha256:…"
  default     = null
  validation {
    condition     = var.query_mode != "service" || (var.query_image != null && can(regex("^[a-z0-9.-]+(:[0-9]+)?/[^:@ ]+(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?$", var.query_image)))
    error_message = "query_image is required with query_mode = service: an image reference such as europe-west1-docker.pkg.dev/PROJECT/fleetcast/fleetcast-query:0.3.0 (a digest is better)."
  }
}

variable "query_mtls" {
  type = object({
    # The load balancer's names; Google-managed certificates are issued for
    # them once their DNS records point at query_mtls_address.
    domains = list(string)
    # PEM certificates of the CAs the clients' certificates chain to.
    client_ca_pems       = list(string)
    intermediate_ca_pems = optional(list(string), [])
  })
  description = "With query_mode = service, an external HTTPS load balancer with mutual TLS in front of the service: only clients presenting a certificate of client_ca_pems reach it (the service takes requests from the load balancer only, without ID tokens). Null: none."
  default     = null
  validation {
    condition     = var.query_mtls == null || var.query_mode == "service"
    error_message = "query_mtls needs query_mode = service: the load balancer fronts the Cloud Run service (the function serves no HTTP/2)."
  }
  validation {
    condition = var.query_mtls == null || (
      length(try(var.query_mtls.domains, [])) > 0 &&
      alltrue([for d in try(var.query_mtls.domains, []) : can(regex("^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\\.)+[a-z]{2,63}$", d))])
    )
    error_message = "query_mtls.domains must name at least one fully qualified domain, lower case, such as fleets.example.com."
  }
  validation {
    condition     = var.query_mtls == null || (length(try(var.query_mtls.client_ca_pems, [])) > 0 && alltrue([for p in concat(try(var.query_mtls.client_ca_pems, []), try(var.query_mtls.intermediate_ca_pems, [])) : startswith(trimspace(p), "-----BEGIN CERTIFICATE-----")]))
    error_message = "query_mtls.client_ca_pems must hold at least one PEM certificate (-----BEGIN CERTIFICATE-----), the CA of the clients' certificates."
  }
}

# --- Monitoring (monitoring.tf; docs/operations.md, "Alerts") ---------------------

variable "notification_channels" {
  type        = list(string)
  description = "Cloud Monitoring notification channels (projects/P/notificationChannels/ID) every alert notifies; none: the alerts open incidents in the console only."
  default     = []
  validation {
    condition     = alltrue([for c in var.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", c))])
    error_message = "notification_channels must be notification channel names such as projects/my-project/notificationChannels/123."
  }
}

variable "alert_drops_per_minute" {
  type        = number
  description = "Fleet events dropped a minute, for one reason, over 5 minutes, above which the drops alert fires. A tenant's malformed events or a skewed clock drop steadily; none is normal."
  default     = 1
  validation {
    condition     = var.alert_drops_per_minute >= 0
    error_message = "alert_drops_per_minute must be 0 or more."
  }
}

variable "alert_ingest_lag_p99" {
  type        = string
  description = "The ingest lag (publisher observation to Firestore write) whose p99 over 5 minutes fires the lag alert, in ms or s (such as 5s)."
  default     = "5s"
  validation {
    condition     = can(regex("^[0-9]+(ms|s)$", var.alert_ingest_lag_p99)) && can(regex("[1-9]", var.alert_ingest_lag_p99))
    error_message = "alert_ingest_lag_p99 must be a positive duration in ms or s such as 5s."
  }
}

variable "alert_query_5xx_ratio" {
  type        = number
  description = "The fraction of the query side's answers that are server errors, over 5 minutes, above which the query errors alert fires."
  default     = 0.02
  validation {
    condition     = var.alert_query_5xx_ratio > 0 && var.alert_query_5xx_ratio < 1
    error_message = "alert_query_5xx_ratio must be between 0 and 1."
  }
}

variable "alert_allocator_failover_ratio" {
  type        = number
  description = "The share of fleetcast-allocator's allocations made by another cluster than the first it tried (fleetcast_allocator_failed_over_total over its allocations, over 10 minutes, from Managed Service for Prometheus: the allocator chart's metrics.podMonitoring) above which the failover alert fires."
  default     = 0.1
  validation {
    condition     = var.alert_allocator_failover_ratio > 0 && var.alert_allocator_failover_ratio < 1
    error_message = "alert_allocator_failover_ratio must be between 0 and 1."
  }
}

variable "alert_push_error_ratio" {
  type        = number
  description = "The fraction of Pub/Sub's pushes into the ingest function it did not acknowledge, for 15 minutes, above which the push alert fires. Some are by design (429 while instances start, 500 when a cluster is over its share)."
  default     = 0.25
  validation {
    condition     = var.alert_push_error_ratio > 0 && var.alert_push_error_ratio < 1
    error_message = "alert_push_error_ratio must be between 0 and 1."
  }
}

variable "slo_query_availability" {
  type        = number
  description = "The query side's availability SLO: the fraction of answers over 28 days that are not server errors (Cloud Monitoring allows at most 0.999)."
  default     = 0.995
  validation {
    condition     = var.slo_query_availability > 0 && var.slo_query_availability <= 0.999
    error_message = "slo_query_availability must be above 0 and at most 0.999."
  }
}

variable "slo_query_latency_goal" {
  type        = number
  description = "The query side's latency SLO: the fraction of requests (not watch streams) over 28 days answered within slo_query_latency_seconds (at most 0.999)."
  default     = 0.99
  validation {
    condition     = var.slo_query_latency_goal > 0 && var.slo_query_latency_goal <= 0.999
    error_message = "slo_query_latency_goal must be above 0 and at most 0.999."
  }
}

variable "slo_query_latency_seconds" {
  type        = number
  description = "The latency bound of the query latency SLO, in seconds."
  default     = 0.5
  validation {
    condition     = var.slo_query_latency_seconds > 0
    error_message = "slo_query_latency_seconds must be positive."
  }
}

variable "registry_location" {
  type        = string
  description = "Location of the Artifact Registry repository of fleetcast's images and chart: a region, or a multi-region (europe, us, asia) for clusters on several continents. Default: region."
  default     = null
  validation {
    condition     = var.registry_location == null || can(regex("^([a-z]+-[a-z]+[0-9]|europe|us|asia)$", var.registry_location))
    error_message = "registry_location must be a region such as europe-west1 or a multi-region: europe, us or asia."
  }
}

variable "registry_immutable_tags" {
  type        = bool
  description = "Refuse to move a tag of the image repository: a release's tag names one image for good (push a new version instead)."
  default     = true
}
