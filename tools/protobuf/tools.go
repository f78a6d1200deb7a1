//go:build tools

// Package tools pins buf (lint, breaking-change check, generate) for the
// InformationService API; scripts/proto.sh builds it into the user cache
// directory, keyed by version. It is never part of the fleetcast module.
// The protoc-gen-go and protoc-gen-connect-go plugins are built from the
// fleetcast module itself, so the generated code matches the runtime
// libraries it links.
package tools

import _ "github.com/bufbuild/buf/cmd/buf"
