#!/usr/bin/env bash
# Starts and stops the Firestore and Pub/Sub emulators of the installed
# google-cloud-cli on free loopback ports.
#
#   emulators.sh start DIR      start both, write DIR/env (export lines), wait until both answer Ok
#   emulators.sh stop DIR       stop what start DIR started
#   emulators.sh run -- CMD...  start, run CMD with the emulator variables and REQUIRE_EMULATORS=1,
#                               stop both whatever happens (failure, Ctrl-C), exit with CMD's status
#
# The PIDs kept are the JVMs' own: the gcloud launchers leave an orphaned java
# behind when killed.
#
# EMULATOR_NICE (0 unless set, 0 to 19, or idle) is the emulators' niceness,
# or idle for Linux's idle scheduling class (chrt --idle): make bench runs the
# readers benchmark with idle, so that the emulators, which stand for Google's
# servers, take only the cores the instance under test leaves idle, and the
# kernel counts a core they run on as idle when it wakes the instance.
set -euo pipefail

log() { printf 'emulators: %s\n' "$*" >&2; }

sdk_root() {
  local sdk
  if command -v gcloud >/dev/null 2>&1; then
    sdk=$(gcloud info --format='value(installation.sdk_root)' 2>/dev/null || true)
  fi
  sdk=${sdk:-/usr/lib/google-cloud-sdk}
  if [[ ! -f $sdk/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar || ! -x $sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator ]]; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
      log "installing the emulators (google-cloud-cli-firestore-emulator, google-cloud-cli-pubsub-emulator)"
      apt-get install -y -q google-cloud-cli-firestore-emulator google-cloud-cli-pubsub-emulator openjdk-17-jre-headless >&2 ||
        { apt-get update -q >&2 && apt-get install -y -q google-cloud-cli-firestore-emulator google-cloud-cli-pubsub-emulator openjdk-17-jre-headless >&2; }
      sdk=$(gcloud info --format='value(installation.sdk_root)' 2>/dev/null || echo /usr/lib/google-cloud-sdk)
    else
      log "the Firestore and Pub/Sub emulators are not installed under $sdk;"
      log "install google-cloud-cli-firestore-emulator and google-cloud-cli-pubsub-emulator (Debian packages)"
      exit 1
    fi
  fi
  printf '%s\n' "$sdk"
}

# free_port prints a loopback port nothing listens on.
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      printf '%s\n' "$p"
      return
    fi
  done
  log "no free port found"
  exit 1
}

# wait_ok NAME PORT PID LOG: poll http://127.0.0.1:PORT/ until it answers Ok.
wait_ok() {
  local name=$1 port=$2 pid=$3 logf=$4 deadline=$((SECONDS + 90))
  while ((SECONDS < deadline)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$name exited while starting; its log ($logf):"
      tail -n 20 "$logf" >&2
      return 1
    fi
    if [[ $(curl -fsS --max-time 2 "http://127.0.0.1:$port/" 2>/dev/null) == Ok* ]]; then
      return 0
    fi
    sleep 0.2
  done
  log "$name did not answer Ok on port $port within 90 s; its log ($logf):"
  tail -n 20 "$logf" >&2
  return 1
}

stop_pid() {
  local name=$1 pidfile=$2 pid
  [[ -f $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  rm -f "$pidfile"
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || { log "stopped $name"; return 0; }
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null || true
  log "killed $name (it did not exit within 10 s of SIGTERM)"
}

start() {
  local dir=$1 sdk fs ps attempt nice=${EMULATOR_NICE:-0} prio
  if [[ $nice == idle ]]; then
    prio=(chrt --idle 0)
  elif [[ $nice =~ ^[0-9]+$ ]] && ((nice <= 19)); then
    prio=(nice -n "$nice")
  else
    log "EMULATOR_NICE=$nice: want a niceness from 0 to 19, or idle"
    return 1
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  sdk=$(sdk_root)
  for attempt in 1 2 3; do
    fs=$(free_port)
    ( exec "${prio[@]}" java -Duser.language=en -cp "$sdk/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar" \
        com.google.cloud.datastore.emulator.firestore.CloudFirestore --host=127.0.0.1 --port="$fs" ) >"$dir/firestore.log" 2>&1 &
    echo $! >"$dir/firestore.pid"
    ps=$(free_port)
    ( exec "${prio[@]}" "$sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator" --host=127.0.0.1 --port="$ps" ) >"$dir/pubsub.log" 2>&1 &
    echo $! >"$dir/pubsub.pid"
    if wait_ok firestore "$fs" "$(cat "$dir/firestore.pid")" "$dir/firestore.log" &&
       wait_ok pubsub "$ps" "$(cat "$dir/pubsub.pid")" "$dir/pubsub.log"; then
      cat >"$dir/env" <<ENV
export FIRESTORE_EMULATOR_HOST=127.0.0.1:$fs
export PUBSUB_EMULATOR_HOST=127.0.0.1:$ps
ENV
      log "firestore on 127.0.0.1:$fs, pubsub on 127.0.0.1:$ps (logs in $dir)"
      return 0
    fi
    stop "$dir"
    log "attempt $attempt failed; retrying on other ports"
  done
  return 1
}

stop() {
  local dir=$1
  stop_pid firestore "$dir/firestore.pid"
  stop_pid pubsub "$dir/pubsub.pid"
  rm -f "$dir/env"
}

RUN_DIR=
CHILD=
cleanup() {
  local rc=$?
  if [[ -n $CHILD ]] && kill -0 "$CHILD" 2>/dev/null; then
    kill -TERM "$CHILD" 2>/dev/null || true
    wait "$CHILD" 2>/dev/null || true
  fi
  if [[ -n $RUN_DIR ]]; then
    stop "$RUN_DIR"
    rm -rf "$RUN_DIR"
  fi
  exit "$rc"
}

run() {
  local status
  RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/fleetcast-emulators.XXXXXX")
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  start "$RUN_DIR"
  # shellcheck disable=SC1091
  source "$RUN_DIR/env"
  export REQUIRE_EMULATORS=1
  # In the background, so that a signal reaches the traps at once; they stop
  # the command too.
  set +e
  "$@" &
  CHILD=$!
  wait "$CHILD"
  status=$?
  set -e
  CHILD=
  return "$status"
}

case ${1:-} in
  start) start "${2:?usage: emulators.sh start DIR}" ;;
  stop) stop "${2:?usage: emulators.sh stop DIR}" ;;
  run)
    shift
    [[ ${1:-} == -- ]] && shift
    [[ $# -gt 0 ]] || { echo "usage: emulators.sh run -- CMD..." >&2; exit 2; }
    run "$@"
    ;;
  *) echo "usage: emulators.sh start DIR | stop DIR | run -- CMD..." >&2; exit 2 ;;
esac
