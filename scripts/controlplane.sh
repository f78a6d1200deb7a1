#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd the publisher's tests run against,
# from the pinned modules in tools/, into the user cache directory, keyed by
# version, so that every clone on this machine reuses them.
#
#   controlplane.sh build   build what is missing; print KUBE_APISERVER=... and ETCD=...
#   controlplane.sh env     print the variables without building (fails if missing)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${FLEETCAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetcast}
kube_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$root/tools/kube-apiserver/go.mod")
etcd_version=$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$root/tools/etcd/go.mod")
# -stamped: built telling its version (below), which Helm checks a chart's
# kubeVersion against.
apiserver=$cache/kube-apiserver-$kube_version-stamped/kube-apiserver
etcd=$cache/etcd-$etcd_version/etcd

log() { printf 'controlplane: %s\n' "$*" >&2; }

# build_one NAME MODULE_DIR PACKAGE OUTPUT [LDFLAGS]
build_one() {
  local name=$1 dir=$2 pkg=$3 out=$4 ldflags=${5:-} start=$SECONDS tmp
  if [[ -x $out ]]; then
    return
  fi
  log "building $name into $out (once per machine; kube-apiserver takes ~5-10 min and ~2 GB on 2 cores)"
  mkdir -p "$(dirname "$out")"
  tmp=$out.tmp.$$
  (cd "$dir" && go build -trimpath -ldflags="-s -w $ldflags" -o "$tmp" "$pkg")
  mv "$tmp" "$out"
  log "built $name in $((SECONDS - start)) s"
}

case ${1:-} in
  build)
    build_one etcd "$root/tools/etcd" go.etcd.io/etcd/server/v3 "$etcd"
    # A source build says v0.0.0-master unless told its version, as the
    # Kubernetes release build tells it (hack/lib/version.sh).
    minor=${kube_version#v1.}
    minor=${minor%%.*}
    build_one kube-apiserver "$root/tools/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver "$apiserver" \
      "-X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
    ;;
  env)
    [[ -x $apiserver && -x $etcd ]] || { log "not built yet: run scripts/controlplane.sh build"; exit 1; }
    ;;
  *) echo "usage: controlplane.sh build | env" >&2; exit 2 ;;
esac
printf 'KUBE_APISERVER=%s\nETCD=%s\n' "$apiserver" "$etcd"
