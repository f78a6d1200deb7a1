//go:build tools

// Package tools pins etcd for the publisher's control-plane tests.
// scripts/controlplane.sh builds it into the user cache directory, keyed by
// version; it is never part of the fleetcast module.
package tools

import _ "go.etcd.io/etcd/server/v3"
