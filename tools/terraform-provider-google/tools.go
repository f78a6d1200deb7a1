//go:build tools

// Package tools pins Terraform's Google provider for offline validation;
// scripts/terraform.sh builds it into the user cache directory, keyed by
// version. It is never part of the fleetcast module.
package tools

import _ "github.com/hashicorp/terraform-provider-google"
