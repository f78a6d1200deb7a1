# State in a GCS bucket: terraform init -backend-config="bucket=BUCKET".
# Alone in this file so that the offline plan (scripts/terraform.sh) can
# leave it out: a GCS backend cannot be initialised without network.
terraform {
  backend "gcs" {
    prefix = "fleetcast/prod"
  }
}
