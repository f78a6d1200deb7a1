//go:build tools

// Package tools pins kube-apiserver for the publisher's control-plane tests.
// scripts/controlplane.sh builds it into the user cache directory, keyed by
// version; it is never part of the fleetcast module.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
