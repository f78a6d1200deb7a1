//go:build tools

// Package tools pins Helm for the publisher chart's tests (lint, template,
// and the rendered manifests applied to the control plane).
// scripts/helm.sh builds it into the user cache directory, keyed by
// version; it is never part of the fleetcast module.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
