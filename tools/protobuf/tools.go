//go:build tools

// Package tools pins buf (lint, breaking-change check, generate) for the
// InformationService API; scripts/proto.sh builds it into the user cache
// directory, keyed by version. It is never part of the fleetcast module.
// It pins protoc-gen-go-grpc too, the generator of the grpc-go stubs (a
// module of its own, whose generated code needs only grpc-go ≥ 1.64 at
// run time). The protoc-gen-go and protoc-gen-connect-go plugins are
// built from the fleetcast module itself, so the generated code matches
// the runtime libraries it links.
package tools

import (
	_ "github.com/bufbuild/buf/cmd/buf"
	_ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
)
