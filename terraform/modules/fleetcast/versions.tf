terraform {
  # 1.9: variable validations that refer to other variables.
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
