#!/usr/bin/env bash
# Prints the path of the Helm the publisher chart's tests use, building it
# from the pinned module in tools/helm into the user cache directory, keyed
# by version, when it is missing, so that every clone on this machine
# reuses it.
#
#   helm.sh path    print Helm's path, building it if missing (~2 min on 2 cores)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${FLEETCAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetcast}
version=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" {print $3}' "$root/tools/helm/go.mod")
helm=$cache/helm-$version/helm
# Helm's own build stamps the Kubernetes version of its client-go as the
# default of .Capabilities.KubeVersion (helm template, helm lint).
client_go=$(awk '$1 == "k8s.io/client-go" {print $2}' "$root/tools/helm/go.mod")
k8s_minor=$(cut -d. -f2 <<<"$client_go")

log() { printf 'helm: %s\n' "$*" >&2; }

case ${1:-path} in
path)
  if [[ ! -x $helm ]]; then
    start=$SECONDS
    log "building Helm $version into $helm (once per machine)"
    mkdir -p "$(dirname "$helm")"
    tmp=$helm.tmp.$$
    ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
    for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
      ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
    done
    (cd "$root/tools/helm" && go build -trimpath -ldflags="$ldflags" -o "$tmp" helm.sh/helm/v3/cmd/helm)
    mv "$tmp" "$helm"
    log "built Helm in $((SECONDS - start)) s"
  fi
  printf '%s\n' "$helm"
  ;;
*) echo "usage: helm.sh path" >&2; exit 2 ;;
esac
