#!/usr/bin/env bash
# Offline Terraform for fleetcast: builds the Google provider from the pinned
# module in tools/terraform-provider-google into the user cache directory
# (keyed by version, once per machine), points Terraform at it with a
# dev_overrides CLI configuration, and runs fmt, validate, test and a plan of
# the dev environment without network or credentials.
#
#   terraform.sh build      build the provider if missing; print its directory
#   terraform.sh check      fmt -check, validate and test the module and both environments, plan dev
#   terraform.sh -- ARGS    run terraform ARGS with the provider override (in the current directory)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${FLEETCAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetcast}
version=$(awk '$1 == "require" && $2 == "github.com/hashicorp/terraform-provider-google" {print $3}' "$root/tools/terraform-provider-google/go.mod")
bindir=$cache/terraform-provider-google-$version

log() { printf 'terraform: %s\n' "$*" >&2; }

build() {
  if [[ -x $bindir/terraform-provider-google ]]; then
    return
  fi
  log "building the Google provider $version into $bindir (once per machine: ~4-8 min, ~2 GB on 2 cores)"
  local start=$SECONDS tmp
  mkdir -p "$bindir"
  tmp=$bindir/terraform-provider-google.tmp.$$
  (cd "$root/tools/terraform-provider-google" && go build -trimpath -ldflags='-s -w' -o "$tmp" github.com/hashicorp/terraform-provider-google)
  mv "$tmp" "$bindir/terraform-provider-google"
  log "built the provider in $((SECONDS - start)) s"
}

# with_override runs terraform with a temporary CLI configuration that
# takes hashicorp/google from the local build.
with_override() {
  local cfg status
  cfg=$(mktemp "${TMPDIR:-/tmp}/fleetcast-tfrc.XXXXXX")
  cat >"$cfg" <<CFG
provider_installation {
  dev_overrides {
    "hashicorp/google" = "$bindir"
  }
  direct {}
}
CFG
  set +e
  TF_CLI_CONFIG_FILE=$cfg TF_IN_AUTOMATION=1 TF_INPUT=0 terraform "$@"
  status=$?
  set -e
  rm -f "$cfg"
  return "$status"
}

check() {
  command -v terraform >/dev/null || { log "terraform is not installed"; exit 1; }
  build
  local tf=$root/terraform
  log "fmt -check"
  with_override fmt -check -recursive -diff "$tf"
  for dir in "$tf/modules/fleetcast" "$tf/environments/dev" "$tf/environments/prod"; do
    log "validate and test ${dir#"$root"/}"
    # With dev_overrides, init fails; get fetches the local modules.
    (cd "$dir" && with_override get >/dev/null && with_override validate -no-color && with_override test -no-color)
  done
  log "plan environments/dev (dummy token, no state, nothing contacted)"
  local state
  state=$(mktemp -d "${TMPDIR:-/tmp}/fleetcast-tfplan.XXXXXX")
  (cd "$root" && go run ./functions/cmd/source -o "$state/functions.zip" >&2)
  (cd "$tf/environments/dev" &&
    GOOGLE_OAUTH_ACCESS_TOKEN=dummy with_override plan -no-color -refresh=false -lock=false -input=false \
      -var=project_id=fleetcast-plan-check -var=project_number=123456789012 -var="function_source_zip=$state/functions.zip" \
      -out="$state/plan" >"$state/plan.log" 2>&1) ||
    { cat "$state/plan.log" >&2; rm -rf "$state"; exit 1; }
  grep -E '^Plan:' "$state/plan.log" >&2
  rm -rf "$state"
}

case ${1:-} in
  build) build; printf '%s\n' "$bindir" ;;
  check) check ;;
  --) shift; build; with_override "$@" ;;
  *) echo "usage: terraform.sh build | check | -- ARGS" >&2; exit 2 ;;
esac
