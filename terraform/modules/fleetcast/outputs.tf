output "topics" {
  description = "Each cluster's fleet events topic (projects/P/topics/T)."
  value       = { for name, t in google_pubsub_topic.events : name => t.id }
}

output "dead_letter_subscription" {
  description = "Subscription holding the events the ingest function could not apply."
  value       = google_pubsub_subscription.dead_letter.id
}

output "query_url" {
  description = "Base URL of the query API: the function's or the service's (callers need roles/run.invoker: query_invokers), or, behind the mutual TLS load balancer, https:// and its first domain (callers need a client certificate of query_mtls.client_ca_pems)."
  value       = local.query_url
}

output "query_partition_urls" {
  description = "Base URL of each query partition (query_partitions), whose answers are about its clusters only: a matchmaker asks the partition of its clusters. Empty without partitions."
  value       = local.query_partition_urls
}

output "query_merged_url" {
  description = "Base URL of the query function that answers over every partition (query_partitions) as one view, PARTITIONS: lists, clusters, label values, placements and streams of every cluster; metrics stay each partition's. Null without partitions."
  value       = local.query_merged_url
}

output "query_mtls_address" {
  description = "The mutual TLS load balancer's IP address, for the DNS records of query_mtls.domains (null without it); its Google-managed certificate is issued once they point there."
  value       = local.mtls ? google_compute_global_address.query[0].address : null
}

output "ingest_url" {
  description = "URL of the ingest function or service (ingest_mode), invoked only by the push subscriptions."
  value       = local.ingest_url
}

output "publisher_service_accounts" {
  description = "The publisher's Google service account of each cluster (GSA_EMAIL in publisher/deploy/params.env)."
  value       = { for name, sa in google_service_account.publisher : name => sa.email }
}

output "publisher_flags" {
  description = "The exact fleetcast-publisher flags of each cluster."
  value = {
    for name, c in var.clusters : name => join(" ", compact([
      "--cluster=${name}",
      "--project=${var.project_id}",
      "--topic=${google_pubsub_topic.events[name].name}",
      "--lease-namespace=${c.namespace}",
      length(c.labels) > 0 ? "--cluster-labels=${join(",", [for k in sort(keys(c.labels)) : "${k}=${c.labels[k]}"])}" : "",
      "--trace-sample-ratio=${var.trace_sample_ratio}",
      c.allocator_endpoint != "" ? "--allocator-endpoint=${c.allocator_endpoint}" : "",
    ]))
  }
}

output "registry" {
  description = "The Artifact Registry repository of fleetcast's images and chart, REGION-docker.pkg.dev/PROJECT/REPOSITORY: make image IMAGE=<registry>/fleetcast-publisher; helm push CHART.tgz oci://<registry>/charts."
  value       = local.registry
}

output "publisher_image" {
  description = "The publisher's image repository (the chart's image.repository, which publisher_chart_values set)."
  value       = local.publisher_image
}

output "image_build_service_account" {
  description = "The account Cloud Build builds and pushes images as (make cloudbuild); the caller needs roles/iam.serviceAccountUser on it."
  value       = google_service_account.build.email
}

output "image_pullers" {
  description = "Who pulls the publisher's image in each cluster (granted roles/artifactregistry.reader on the repository): a GKE cluster's node service account; for a cluster elsewhere, its publisher's Google service account, which mints its image pull secret."
  value       = local.image_pullers
}

output "publisher_chart_values" {
  description = "The publisher Helm chart's values for each cluster: terraform output -json publisher_chart_values | jq '.CLUSTER' > values.yaml, then helm install fleetcast-publisher publisher/chart -n NAMESPACE --create-namespace -f values.yaml (NAMESPACE the cluster's namespace)."
  value = merge(
    {
      for name, c in var.clusters : name => {
        cluster           = name
        clusterLabels     = c.labels
        project           = var.project_id
        topic             = google_pubsub_topic.events[name].name
        traceSampleRatio  = var.trace_sample_ratio
        allocatorEndpoint = c.allocator_endpoint
        image             = { repository = local.publisher_image }
        # The Workload Identity member is this namespace's account.
        serviceAccount = { name = c.service_account }
        identity       = { type = "gke", serviceAccount = google_service_account.publisher[name].email, namespace = c.namespace }
      } if c.workload_identity_federation == null
    },
    {
      for name, c in local.federated : name => {
        cluster           = name
        clusterLabels     = c.labels
        project           = var.project_id
        topic             = google_pubsub_topic.events[name].name
        traceSampleRatio  = var.trace_sample_ratio
        allocatorEndpoint = c.allocator_endpoint
        image             = { repository = local.publisher_image }
        # Minted from the publisher's identity (terraform/README.md,
        # "Pulling the image").
        imagePullSecrets = [{ name = "fleetcast-registry" }]
        # The provider admits only this namespace's account.
        serviceAccount = { name = c.service_account }
        identity = {
          type                       = "workloadIdentityFederation"
          serviceAccount             = google_service_account.publisher[name].email
          namespace                  = c.namespace
          workloadIdentityFederation = { provider = "//iam.googleapis.com/${google_iam_workload_identity_pool_provider.cluster[name].name}" }
        }
      }
    },
  )
}
