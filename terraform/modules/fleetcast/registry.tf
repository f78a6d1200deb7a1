# The project's images and chart: one Docker repository holding
# fleetcast-publisher (and fleetcast-query, fleetcast-ingest, fleetcast-allocator) by tag and digest, and the
# publisher's chart as the OCI artifact charts/fleetcast-publisher (helm
# push). Tags are immutable: a release's tag names one image for good.
resource "google_artifact_registry_repository" "images" {
  project       = var.project_id
  location      = local.registry_location
  repository_id = var.name_prefix
  format        = "DOCKER"
  description   = "fleetcast's images (fleetcast-publisher, fleetcast-query, fleetcast-ingest, fleetcast-allocator) and the publisher's Helm chart (charts/fleetcast-publisher)."
  docker_config {
    immutable_tags = var.registry_immutable_tags
  }
  depends_on = [time_sleep.services]
}

locals {
  registry_location = coalesce(var.registry_location, var.region)
  # REGION-docker.pkg.dev/PROJECT/REPOSITORY: what images and the chart are
  # named under (the repository's registry_uri).
  registry        = "${local.registry_location}-docker.pkg.dev/${var.project_id}/${var.name_prefix}"
  publisher_image = "${local.registry}/fleetcast-publisher"
  # Who pulls the publisher's image in each cluster: a GKE cluster's
  # nodes (the kubelet pulls, as the node pool's service account); a
  # cluster elsewhere through an image pull secret, minted as the
  # publisher's own Google identity (terraform/README.md, "Pulling the
  # image").
  image_pullers = {
    for name, c in var.clusters : name => (
      c.gke_project == null ? google_service_account.publisher[name].member :
      c.node_service_account != null ? "serviceAccount:${c.node_service_account}" :
      "serviceAccount:${local.project_number}-compute@developer.gserviceaccount.com"
    )
  }
}

resource "google_artifact_registry_repository_iam_member" "pull" {
  for_each   = local.image_pullers
  project    = var.project_id
  location   = google_artifact_registry_repository.images.location
  repository = google_artifact_registry_repository.images.name
  role       = "roles/artifactregistry.reader"
  member     = each.value
}

# Cloud Build (make cloudbuild) builds and pushes the images as the build
# account, which may write to this repository only.
resource "google_artifact_registry_repository_iam_member" "build_push" {
  project    = var.project_id
  location   = google_artifact_registry_repository.images.location
  repository = google_artifact_registry_repository.images.name
  role       = "roles/artifactregistry.writer"
  member     = google_service_account.build.member
}
