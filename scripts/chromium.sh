#!/usr/bin/env bash
# Prints the path of a Chromium the browser tests and `make screenshots`
# drive headless, installing Debian's `chromium` package when it is missing
# (as root, with apt-get; otherwise it says what to install).
#
#   chromium.sh path    print the browser's path, installing it if missing
set -euo pipefail

log() { printf 'chromium: %s\n' "$*" >&2; }

find_browser() {
  local b
  for b in chromium chromium-browser; do
    if command -v "$b" >/dev/null 2>&1; then
      command -v "$b"
      return 0
    fi
  done
  return 1
}

case ${1:-path} in
path)
  if ! find_browser; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
      log "installing chromium (Debian package)"
      apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >&2 ||
        { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >&2; }
      find_browser || { log "chromium installed but not found on PATH"; exit 1; }
    else
      log "chromium is not installed; install the Debian package chromium"
      exit 1
    fi
  fi
  ;;
*)
  log "usage: chromium.sh path"
  exit 2
  ;;
esac
