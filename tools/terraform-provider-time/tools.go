//go:build tools

// Package tools pins Terraform's time provider (time_sleep waits for the
// propagation Google documents after enabling APIs and granting roles) for
// offline validation; scripts/terraform.sh builds it into the user cache
// directory, keyed by version. It is never part of the fleetcast module.
package tools

import _ "github.com/hashicorp/terraform-provider-time"
