#!/usr/bin/env bash
# The InformationService API's protobuf tooling: builds buf and
# protoc-gen-go-grpc from the pinned module in tools/protobuf, and
# protoc-gen-go and protoc-gen-connect-go from
# the versions fleetcast's go.mod links (so generated code and runtime
# agree), into the user cache directory keyed by version (once per machine).
#
#   proto.sh build      build the tools if missing; print the directory to put on PATH
#   proto.sh generate   regenerate gen/fleetcast from schemas/fleetcast/v1/*.proto, and
#                       gen/agones from third_party/agones, the copy of Agones' allocation API
#   proto.sh check      buf lint; gen/ must be what generate writes; buf breaking against the
#                       previous commit (HEAD~1), or against HEAD when the .proto files changed since
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${FLEETCAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetcast}

log() { printf 'proto: %s\n' "$*" >&2; }

version_of() { # module, go.mod
  awk -v m="$1" '($1 == m) || ($1 == "require" && $2 == m) {print ($1 == "require") ? $3 : $2; exit}' "$2"
}

bindir() {
  printf '%s\n' "$cache/protobuf-buf-$(version_of github.com/bufbuild/buf "$root/tools/protobuf/go.mod")-go-$(version_of google.golang.org/protobuf "$root/go.mod")-connect-$(version_of connectrpc.com/connect "$root/go.mod")-grpc-$(version_of google.golang.org/grpc/cmd/protoc-gen-go-grpc "$root/tools/protobuf/go.mod")"
}

build() {
  local dir tmp start
  dir=$(bindir)
  if [[ ! -x $dir/buf || ! -x $dir/protoc-gen-go || ! -x $dir/protoc-gen-connect-go || ! -x $dir/protoc-gen-go-grpc ]]; then
    log "building buf, protoc-gen-go, protoc-gen-connect-go and protoc-gen-go-grpc into $dir (once per machine: ~3 min on 2 cores)"
    start=$SECONDS
    mkdir -p "$dir"
    tmp=$(mktemp -d "$dir/build.XXXXXX")
    (cd "$root/tools/protobuf" && go build -trimpath -o "$tmp/buf" github.com/bufbuild/buf/cmd/buf)
    (cd "$root/tools/protobuf" && go build -trimpath -o "$tmp/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc)
    (cd "$root" && go build -trimpath -o "$tmp/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go)
    (cd "$root" && go build -trimpath -o "$tmp/protoc-gen-connect-go" connectrpc.com/connect/cmd/protoc-gen-connect-go)
    mv "$tmp"/* "$dir/" && rmdir "$tmp"
    log "built the protobuf tools in $((SECONDS - start)) s"
  fi
  printf '%s\n' "$dir"
}

# agones runs buf in third_party/agones, the buf module of Agones'
# allocation API (its own buf.yaml and buf.gen.yaml).
agones() {
  local dir
  dir=$(build)
  (cd "$root/third_party/agones" && PATH="$dir:$PATH" BUF_CACHE_DIR="$cache/buf-cache" "$dir/buf" "$@")
}

buf() {
  local dir
  dir=$(build)
  (cd "$root" && PATH="$dir:$PATH" BUF_CACHE_DIR="$cache/buf-cache" "$dir/buf" "$@")
}

case ${1:-} in
build)
  build
  ;;
generate)
  buf generate # cleans gen/ whole: Agones' code after it
  agones generate -o "$root/gen/agones"
  ;;
check)
  buf lint
  out=$(mktemp -d "${TMPDIR:-/tmp}/fleetcast-gen.XXXXXX")
  trap 'rm -rf "$out"' EXIT
  dir=$(build)
  (cd "$root" && PATH="$dir:$PATH" BUF_CACHE_DIR="$cache/buf-cache" "$dir/buf" generate -o "$out")
  if ! diff -r "$out/gen/fleetcast" "$root/gen/fleetcast" >&2; then
    log "gen/fleetcast is out of date with schemas/fleetcast: run make proto and commit the result"
    exit 1
  fi
  agones lint
  agones generate -o "$out/agones"
  if ! diff -r "$out/agones" "$root/gen/agones" >&2; then
    log "gen/agones is out of date with third_party/agones: run make proto and commit the result"
    exit 1
  fi
  if [[ $(ls "$root/gen") != $'agones\nfleetcast' ]]; then
    log "gen/ holds $(ls "$root/gen" | tr '\n' ' '); only agones and fleetcast are generated"
    exit 1
  fi
  against=HEAD~1
  if ! git -C "$root" diff --quiet HEAD -- schemas/fleetcast; then
    against=HEAD # uncommitted changes: judge them against the last commit
  fi
  if ! git -C "$root" rev-parse -q --verify "$against^{commit}" >/dev/null; then
    log "buf breaking: no commit $against here (a shallow clone?): nothing to compare with"
  elif ! git -C "$root" cat-file -e "$against:schemas/fleetcast" 2>/dev/null; then
    log "buf breaking: $against has no schemas/fleetcast yet: nothing to compare with"
  else
    buf breaking --against "$root/.git#ref=$against,subdir=."
    log "buf lint, generated code and buf breaking against $against: ok"
  fi
  ;;
*)
  sed -n '2,12p' "$0" >&2
  exit 2
  ;;
esac
