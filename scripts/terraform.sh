#!/usr/bin/env bash
# Offline Terraform for fleetcast: builds the Google and time providers from
# the pinned modules in tools/terraform-provider-* into the user cache
# directory (keyed by version, once per machine), points Terraform at them
# with a dev_overrides CLI configuration, and runs fmt, validate, test and
# plans of both examples without network or credentials.
#
#   terraform.sh build           build the providers if missing; print the Google provider's directory
#   terraform.sh check           fmt -check, validate and test the module and both examples, plan both
#   terraform.sh plan ENV DIR [CLUSTERS]
#                                plan examples/ENV into DIR/plan, DIR/plan.json and DIR/plan.log,
#                                with the clusters variable CLUSTERS (HCL; default {}: none)
#   terraform.sh -- ARGS         run terraform ARGS with the provider overrides (in the current directory)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${FLEETCAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetcast}
providers=(google time)

log() { printf 'terraform: %s\n' "$*" >&2; }

# bindir NAME prints where the provider NAME of the pinned version lives.
bindir() {
  local version
  version=$(awk -v m="github.com/hashicorp/terraform-provider-$1" '$1 == "require" && $2 == m {print $3}' "$root/tools/terraform-provider-$1/go.mod")
  printf '%s\n' "$cache/terraform-provider-$1-$version"
}

build() {
  local name dir start tmp
  for name in "${providers[@]}"; do
    dir=$(bindir "$name")
    [[ -x $dir/terraform-provider-$name ]] && continue
    if [[ $name == google ]]; then
      log "building the Google provider into $dir (once per machine: ~4-8 min, ~2 GB on 2 cores)"
    else
      log "building the $name provider into $dir (once per machine: ~1 min)"
    fi
    start=$SECONDS
    mkdir -p "$dir"
    tmp=$dir/terraform-provider-$name.tmp.$$
    (cd "$root/tools/terraform-provider-$name" && go build -trimpath -ldflags='-s -w' -o "$tmp" "github.com/hashicorp/terraform-provider-$name")
    mv "$tmp" "$dir/terraform-provider-$name"
    log "built the $name provider in $((SECONDS - start)) s"
  done
}

# with_override runs terraform with a temporary CLI configuration that
# takes the providers from the local builds.
with_override() {
  local cfg status name
  cfg=$(mktemp "${TMPDIR:-/tmp}/fleetcast-tfrc.XXXXXX")
  {
    echo 'provider_installation {'
    echo '  dev_overrides {'
    for name in "${providers[@]}"; do
      echo "    \"hashicorp/$name\" = \"$(bindir "$name")\""
    done
    echo '  }'
    echo '  direct {}'
    echo '}'
  } >"$cfg"
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
  for dir in "$tf/modules/fleetcast" "$tf/examples/dev" "$tf/examples/prod"; do
    log "validate and test ${dir#"$root"/}"
    # With dev_overrides, init fails; get fetches the local modules.
    (cd "$dir" && with_override get >/dev/null && with_override validate -no-color && with_override test -no-color)
  done
  local env out
  for env in dev prod; do
    out=$(mktemp -d "${TMPDIR:-/tmp}/fleetcast-tfplan.XXXXXX")
    plan "$env" "$out" || { rm -rf "$out"; exit 1; }
    rm -rf "$out"
  done
}

# plan ENV OUT [CLUSTERS] plans examples/ENV as a first apply on a
# fresh project would (no state, dummy token, nothing contacted; no cluster
# unless CLUSTERS), from a scratch copy without backend.tf: the prod
# environment's GCS backend cannot be initialised offline.
plan() {
  local env=$1 out=$2 clusters=${3:-"{}"} scratch images=()
  # prod runs both sides as services, from images in its registry.
  if [[ $env == prod ]]; then
    images=(-var="ingest_image=europe-west1-docker.pkg.dev/fleetcast-plan-check/fleetcast/fleetcast-ingest:0.0.0"
      -var="query_image=europe-west1-docker.pkg.dev/fleetcast-plan-check/fleetcast/fleetcast-query:0.0.0")
  fi
  build
  mkdir -p "$out"
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/fleetcast-tfenv.XXXXXX")
  mkdir -p "$scratch/terraform/examples"
  cp -r "$root/terraform/modules" "$scratch/terraform/"
  cp -r "$root/terraform/examples/$env" "$scratch/terraform/examples/"
  mkdir -p "$scratch/schemas" && cp "$root/schemas/fleet_event.avsc" "$scratch/schemas/"
  rm -rf "$scratch/terraform/examples/$env/.terraform" "$scratch/terraform/examples/$env/backend.tf"
  (cd "$root" && go run ./internal/cmd/source -o "$out/functions.zip" >/dev/null)
  log "plan examples/$env (clusters = $clusters, dummy token, nothing contacted)"
  if ! (cd "$scratch/terraform/examples/$env" &&
    with_override get >/dev/null &&
    GOOGLE_OAUTH_ACCESS_TOKEN=dummy with_override plan -no-color -refresh=false -lock=false -input=false \
      -var=project_id=fleetcast-plan-check -var=project_number=123456789012 -var="function_source_zip=$out/functions.zip" \
      -var="clusters=$clusters" "${images[@]}" -out="$out/plan" >"$out/plan.log" 2>&1 &&
    with_override show -json "$out/plan" >"$out/plan.json"); then
    cat "$out/plan.log" >&2
    rm -rf "$scratch"
    return 1
  fi
  grep -E '^Plan:' "$out/plan.log" >&2
  rm -rf "$scratch"
}

case ${1:-} in
  build) build; bindir google ;;
  check) check ;;
  plan) [[ $# == 3 || $# == 4 ]] || { echo "usage: terraform.sh plan ENV DIR [CLUSTERS]" >&2; exit 2; }; plan "$2" "$3" "${4:-}" ;;
  --) shift; build; with_override "$@" ;;
  *) echo "usage: terraform.sh build | check | plan ENV DIR | -- ARGS" >&2; exit 2 ;;
esac
