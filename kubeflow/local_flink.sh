#!/usr/bin/env bash
# A local Apache Flink cluster for the Beam components, in the shape of a
# production deployment (docs/flink.md): a JobManager and TaskManagers (each
# its own JVM, from PyPI's apache-flink), one long-lived Beam Flink job
# server against it, and a Python SDK worker pool whose workers boot like
# Beam's SDK container (kubeflow/sdk_worker_boot.py: they install what the
# job staged and run on the image's libraries alone).
#
#   kubeflow/local_flink.sh start|stop|status     (make flink-up, flink-down)
#
# Settings (environment): FLINK_VERSION (1.20.1), FLINK_TASKMANAGERS (1),
# FLINK_SLOTS (2 per TaskManager), FLINK_REST_PORT (8081), FLINK_RPC_PORT
# (6123), BEAM_JOB_PORT (8099), BEAM_ARTIFACT_PORT (8098),
# BEAM_WORKER_POOL_PORT (50000), FLINK_CLUSTER_DIR (runs/flink-cluster: pid
# files, logs, staging), FLINK_CACHE (~/.cache/cowclip-ctr: the distribution
# and the job server jar, fetched on first use), FLINK_JOB_SERVER_JAR (a
# job server jar of your own instead of Maven's), PY (.venv/bin/python).
# Start is idempotent; every failure is one `error:` line.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
FLINK_VERSION=${FLINK_VERSION:-1.20.1}
FLINK_MINOR=${FLINK_VERSION%.*}
FLINK_TASKMANAGERS=${FLINK_TASKMANAGERS:-1}
FLINK_SLOTS=${FLINK_SLOTS:-2}
FLINK_REST_PORT=${FLINK_REST_PORT:-8081}
FLINK_RPC_PORT=${FLINK_RPC_PORT:-6123}
BEAM_JOB_PORT=${BEAM_JOB_PORT:-8099}
BEAM_ARTIFACT_PORT=${BEAM_ARTIFACT_PORT:-8098}
BEAM_WORKER_POOL_PORT=${BEAM_WORKER_POOL_PORT:-50000}
CLUSTER=$(realpath -ms "${FLINK_CLUSTER_DIR:-runs/flink-cluster}")
CACHE=${FLINK_CACHE:-$HOME/.cache/cowclip-ctr}
PY=$(realpath -ms "${PY:-.venv/bin/python}")

die() { echo "error: $*" >&2; exit 1; }

# The job server must speak the Beam version the pipeline's SDK is.
beam_version() {
  "$PY" -c 'import importlib.metadata as m; print(m.version("apache-beam"))'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

running() {  # NAME: its pid file names a live process
  [ -f "$CLUSTER/$1.pid" ] && kill -0 "$(cat "$CLUSTER/$1.pid")" 2>/dev/null
}

wait_for_port() {  # PORT WHAT SECONDS [NAME: its process must live]
  local i
  for ((i = 0; i < $3 * 2; i++)); do
    port_open "$1" && return 0
    if [ -n "${4:-}" ] && ! running "$4"; then
      die "$2 exited before opening port $1 (log: $CLUSTER/logs/$4.log)"
    fi
    sleep 0.5
  done
  die "$2 did not open port $1 in $3 s (logs: $CLUSTER/logs)"
}

flink_home() {
  local venv=$CACHE/flink-$FLINK_VERSION
  if [ ! -x "$venv/bin/python" ]; then
    echo "fetching Flink $FLINK_VERSION from PyPI into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv" >/dev/null ||
      die "could not create a venv for Flink at $venv"
    # Their metadata pins an old apache-beam: the distribution's files are
    # all this needs, so no dependencies, and never in the project's venv.
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
      "apache-flink==$FLINK_VERSION" "apache-flink-libraries==$FLINK_VERSION" \
      >"$CACHE/flink-pip.log" 2>&1 ||
      { rm -rf "$venv"; die "pip could not install apache-flink==$FLINK_VERSION (log: $CACHE/flink-pip.log)"; }
  fi
  "$venv/bin/python" -c 'import os, pyflink; print(os.path.dirname(pyflink.__file__))'
}

job_server_jar() {  # FLINK_JOB_SERVER_JAR: a jar of your own (a mirror's)
  local beam artifact jar reason
  if [ -n "${FLINK_JOB_SERVER_JAR:-}" ]; then
    [ -f "$FLINK_JOB_SERVER_JAR" ] || die "FLINK_JOB_SERVER_JAR=$FLINK_JOB_SERVER_JAR does not exist"
    echo "$FLINK_JOB_SERVER_JAR"
    return
  fi
  beam=$(beam_version)
  artifact=org.apache.beam:beam-runners-flink-$FLINK_MINOR-job-server:$beam
  jar=$CACHE/jars/beam-runners-flink-$FLINK_MINOR-job-server-$beam.jar
  if [ ! -f "$jar" ]; then
    echo "fetching $artifact from Maven" >&2
    mkdir -p "$CACHE/jars"
    if ! mvn --batch-mode --quiet --update-snapshots dependency:copy \
        -Dartifact="$artifact" -DoutputDirectory="$CACHE/jars" \
        >"$CACHE/mvn.log" 2>&1; then
      # Maven's own reason (its first error line, without the prefix).
      reason=$(grep -m1 -o "Could not find artifact.*\|[^ ]* was not found in.*" "$CACHE/mvn.log" || true)
      [ -n "$reason" ] &&
        die "the Beam Flink job server $artifact is not in the Maven repository this machine reaches: Maven says \"$reason\" (set FLINK_JOB_SERVER_JAR to a jar of your own; log: $CACHE/mvn.log)"
      die "Maven could not fetch the Beam Flink job server $artifact (log: $CACHE/mvn.log)"
    fi
  fi
  echo "$jar"
}

write_conf() {  # FLINK_HOME
  mkdir -p "$CLUSTER/conf" "$CLUSTER/logs"
  cp "$1/conf/log4j"*.properties "$CLUSTER/conf/" 2>/dev/null || true
  # The distribution's config with this cluster's ports, slots and memory;
  # it keeps the --add-opens flags Java 17 needs.
  sed -e "s/^\(    port:\) 6123$/\1 $FLINK_RPC_PORT/" \
      -e "s/^\(  numberOfTaskSlots:\) 1$/\1 $FLINK_SLOTS/" \
      -e "s/^\(  default:\) 1$/\1 $FLINK_SLOTS/" \
      -e "s/^\(      size:\) 1600m$/\1 1024m/" \
      -e "s/^\(      size:\) 1728m$/\1 4096m/" \
      "$1/conf/config.yaml" >"$CLUSTER/conf/config.yaml"
  cat >>"$CLUSTER/conf/config.yaml" <<EOF
# This cluster's REST port and restart strategy (a TaskManager lost during a
# job: the job restarts, up to 3 times, 10 s apart). StatisticsGen's and
# Transform's Beam graphs hold many shuffles at once: the default network
# memory (a tenth of the TaskManager) runs out of buffers.
rest.port: $FLINK_REST_PORT
taskmanager.memory.network.min: 1536mb
taskmanager.memory.network.max: 1536mb
restart-strategy.type: fixed-delay
restart-strategy.fixed-delay.attempts: 3
restart-strategy.fixed-delay.delay: 10 s
EOF
}

start() {
  command -v java >/dev/null || die "Java not found: install OpenJDK 17 (the Flink JVMs and the Beam job server need it)"
  command -v mvn >/dev/null || die "Maven not found: install it (mvn fetches the Beam Flink job server jar)"
  [ -x "$PY" ] || die "the project's Python $PY not found: run 'make venv' first"
  for port in $FLINK_REST_PORT $FLINK_RPC_PORT $BEAM_JOB_PORT \
      $BEAM_ARTIFACT_PORT $BEAM_WORKER_POOL_PORT; do
    if port_open "$port" && ! running jobmanager; then
      die "port $port is in use by another program (set its *_PORT variable)"
    fi
  done
  mkdir -p "$CLUSTER/logs"
  local home jar
  jar=$(job_server_jar)
  home=$(flink_home)
  write_conf "$home"
  export FLINK_CONF_DIR=$CLUSTER/conf FLINK_LOG_DIR=$CLUSTER/logs
  export FLINK_PID_DIR=$CLUSTER
  if ! running jobmanager; then
    "$home/bin/jobmanager.sh" start >/dev/null
    cp "$CLUSTER"/flink-*-standalonesession.pid "$CLUSTER/jobmanager.pid" 2>/dev/null ||
      die "the JobManager did not start (logs: $CLUSTER/logs)"
    wait_for_port "$FLINK_REST_PORT" "the Flink JobManager" 60
  fi
  # A TaskManager that died (a lost machine) is replaced: Flink's restart
  # strategy then re-runs its jobs on the new one.
  local have want=$FLINK_TASKMANAGERS
  have=$(live_taskmanagers)
  while [ "$have" -lt "$want" ]; do
    "$home/bin/taskmanager.sh" start >/dev/null
    have=$((have + 1))
  done
  if ! running jobserver; then
    nohup java -jar "$jar" --flink-master="localhost:$FLINK_REST_PORT" \
      --job-port="$BEAM_JOB_PORT" --artifact-port="$BEAM_ARTIFACT_PORT" \
      --expansion-port=0 --artifacts-dir="$CLUSTER/staging" \
      >"$CLUSTER/logs/jobserver.log" 2>&1 &
    echo $! >"$CLUSTER/jobserver.pid"
    wait_for_port "$BEAM_JOB_PORT" "the Beam Flink job server" 60 jobserver
  fi
  if ! running workers; then
    printf '#!/bin/sh\nexec "%s" -m kubeflow.sdk_worker_boot "$@"\n' "$PY" \
      >"$CLUSTER/boot"
    chmod +x "$CLUSTER/boot"
    BEAM_WORKER_BOOT_CACHE=$CLUSTER/installed nohup "$PY" -m \
      apache_beam.runners.worker.worker_pool_main \
      --service_port="$BEAM_WORKER_POOL_PORT" \
      --container_executable="$CLUSTER/boot" \
      >"$CLUSTER/logs/workers.log" 2>&1 &
    echo $! >"$CLUSTER/workers.pid"
    wait_for_port "$BEAM_WORKER_POOL_PORT" "the SDK worker pool" 60 workers
  fi
  wait_for_taskmanagers "$want"
  echo "Flink $FLINK_VERSION up: http://localhost:$FLINK_REST_PORT, $want TaskManager(s) x $FLINK_SLOTS slots"
  echo "run on it:  .venv/bin/python -m pipeline run ... --beam-runner flink --job-endpoint localhost:$BEAM_JOB_PORT --environment-type EXTERNAL --environment-config localhost:$BEAM_WORKER_POOL_PORT"
}

live_taskmanagers() {
  local pid count=0
  for pid in $(cat "$CLUSTER"/flink-*-taskexecutor.pid 2>/dev/null); do
    kill -0 "$pid" 2>/dev/null && count=$((count + 1))
  done
  echo "$count"
}

taskmanagers() {
  curl -fsS "http://localhost:$FLINK_REST_PORT/taskmanagers" 2>/dev/null |
    "$PY" -c 'import json, sys; print(len(json.load(sys.stdin)["taskmanagers"]))' 2>/dev/null ||
    echo 0
}

wait_for_taskmanagers() {
  local i
  for ((i = 0; i < 120; i++)); do
    [ "$(taskmanagers)" -ge "$1" ] && return 0
    sleep 0.5
  done
  die "Flink has fewer than $1 TaskManager(s) after 60 s (logs: $CLUSTER/logs)"
}

stop() {
  local name pid
  for name in workers jobserver; do
    if running "$name"; then
      pid=$(cat "$CLUSTER/$name.pid")
      kill "$pid" 2>/dev/null || true
      for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$CLUSTER/$name.pid"
  done
  if [ -d "$CACHE/flink-$FLINK_VERSION" ] && [ -d "$CLUSTER/conf" ]; then
    local home
    home=$(flink_home)
    export FLINK_CONF_DIR=$CLUSTER/conf FLINK_LOG_DIR=$CLUSTER/logs
    export FLINK_PID_DIR=$CLUSTER
    "$home/bin/taskmanager.sh" stop-all >/dev/null 2>&1 || true
    "$home/bin/jobmanager.sh" stop-all >/dev/null 2>&1 || true
  fi
  rm -f "$CLUSTER/jobmanager.pid"
  echo "Flink cluster stopped"
}

status() {
  local name
  for name in jobmanager jobserver workers; do
    if running "$name"; then echo "$name: running (pid $(cat "$CLUSTER/$name.pid"))"
    else echo "$name: stopped"; fi
  done
  echo "taskmanagers: $(taskmanagers)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
