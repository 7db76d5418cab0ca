#!/usr/bin/env bash
# The container image as an operator runs it: built (scripts/image.sh, unless
# SKIP_BUILD=1), the first admin made with `serve --init-admin` on a volume at /data, then
# served with a read-only root filesystem and Envoy's YAML mounted as --envoy-config:
# /healthz and /readyz answer, one decision over HTTP and one over Envoy's rate limit
# service (gRPC, scripts/rls-call.py) each admit and then deny, an edit of the YAML made
# as the kubelet updates a ConfigMap (a symlink swap) applies, and SIGTERM (`stop`) ends
# it with exit code 0. Prints the image's size, the time from `run` to a healthy
# /healthz, the time the edit took to apply and the time `stop` took.
#
#   scripts/image-test.sh            # podman or docker, whichever is installed
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/container-engine.sh
image=sluicegate:latest
run=("$engine")
# Debian's podman picks crun when it is installed; runc is what works on these machines.
if [ "$engine" = podman ] && command -v runc >/dev/null; then
  run+=(--runtime runc)
fi

[ "${SKIP_BUILD:-}" = 1 ] || bash scripts/image.sh >/dev/null

# What the image holds and how it starts: the user, the defaults, nothing else.
config=$("${run[@]}" image inspect --format '{{.Config.User}} {{.Config.Entrypoint}} {{.Config.Cmd}} {{.Config.Env}}' "$image")
for wanted in '65532:65532 ' '[/sluicegate] [serve]' SLUICEGATE_LISTEN=0.0.0.0:8080 \
  SLUICEGATE_GRPC_LISTEN=0.0.0.0:8081 SLUICEGATE_DATA_DIR=/data; do
  [[ $config == *"$wanted"* ]] || { echo "image-test.sh: the image's config lacks $wanted: $config" >&2; exit 1; }
done

scratch=$(mktemp -d)
volume=sluicegate-test-$$
container=sluicegate-test-$$
cleanup() {
  status=$?
  if [ $status -ne 0 ]; then
    echo "image-test.sh: failed; the container's log:" >&2
    "${run[@]}" logs "$container" >&2 2>&1 || true
  fi
  "${run[@]}" rm -f "$container" >/dev/null 2>&1 || true
  "${run[@]}" volume rm -f "$volume" >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT

# Two free ports, as the tests take theirs: the host's network is shared.
read -r http grpc < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
# Envoy's YAML laid out as the kubelet lays out a ConfigMap volume: each version in a
# hidden directory, `..data` a symlink to the current one, each file a symlink through it.
configmap_version() { # VERSION LIMIT: writes the version, then swaps `..data` to it at once
  mkdir "$scratch/envoy/..v$1"
  printf 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: hour\n      requests_per_unit: %s\n' \
    "$2" >"$scratch/envoy/..v$1/edge.yaml"
  chmod -R a+rX "$scratch"
  ln -s "..v$1" "$scratch/envoy/..data_tmp"
  mv -T "$scratch/envoy/..data_tmp" "$scratch/envoy/..data"
}
mkdir "$scratch/envoy"
configmap_version 1 2
ln -s ..data/edge.yaml "$scratch/envoy/edge.yaml"

"${run[@]}" volume create "$volume" >/dev/null
admin=$("${run[@]}" run --rm --read-only --network host -v "$volume:/data" "$image" serve --init-admin)

started=$(date +%s%N)
"${run[@]}" run -d --name "$container" --read-only --network host -v "$volume:/data" \
  -v "$scratch/envoy:/etc/sluicegate/envoy:ro" \
  -e SLUICEGATE_LISTEN="0.0.0.0:$http" -e SLUICEGATE_GRPC_LISTEN="0.0.0.0:$grpc" \
  "$image" serve --envoy-config /etc/sluicegate/envoy >/dev/null
base=http://127.0.0.1:$http
status() { curl -s -o /dev/null -w '%{http_code}' "$base$1" || true; }
# Polls PATH until it answers 200 (30 s at most: a loaded machine's start; one that never
# answers fails): prints the milliseconds since `started`.
answered() {
  for _ in $(seq 1500); do
    if [ "$(status "$1")" = 200 ]; then
      echo $((($(date +%s%N) - started) / 1000000))
      return
    fi
    sleep 0.02
  done
  echo "image-test.sh: $1 never answered 200" >&2
  return 1
}
healthy_ms=$(answered /healthz)
ready_ms=$(answered /readyz)

json() { python3 -c "import json, sys; print(json.load(sys.stdin)$1)"; }
call() { curl -sf -X "$1" "$base$2" -H "Authorization: Bearer $3" -H 'Content-Type: application/json' -d "$4"; }
token=$(call POST /v1/apps "$admin" '{"name":"edge"}' | json '["token"]')
call PUT /v1/policies/api "$admin" \
  '{"algorithm":"fixed-window","limit":1,"period":"1h","apps":["edge"]}' >/dev/null
http_answers=""
for _ in 1 2; do
  http_answers+="$(call POST /v1/decide "$token" '{"policy":"api","key":"alice"}' | json '["allowed"]') "
done
[ "$http_answers" = "True False " ] || { echo "image-test.sh: HTTP decisions: $http_answers" >&2; exit 1; }
rls() { python3 scripts/rls-call.py "127.0.0.1:$grpc" "$token" edge "remote_address=$1"; }
rls_answers=""
for _ in 1 2 3; do
  rls_answers+="$(rls 10.0.0.1) "
done
[ "$rls_answers" = "OK OK OVER_LIMIT " ] || { echo "image-test.sh: RLS answers: $rls_answers" >&2; exit 1; }

# A ConfigMap edit: the limit goes from 2 to 1 an hour (a raise would wait for the old
# window's end: docs/service.md). Each probe is a fresh address, whose second call is
# refused only under the new limit.
swapped=$(date +%s%N)
configmap_version 2 1
reloaded=""
for probe in $(seq 100); do
  rls "10.1.0.$probe" >/dev/null
  if [ "$(rls "10.1.0.$probe")" = OVER_LIMIT ]; then
    reloaded="$((($(date +%s%N) - swapped) / 1000000)) ms"
    break
  fi
  sleep 0.05
done
[ -n "$reloaded" ] || { echo "image-test.sh: the ConfigMap's new version never applied" >&2; exit 1; }

stopping=$(date +%s%N)
"${run[@]}" stop -t 15 "$container" >/dev/null
stop_ms=$((($(date +%s%N) - stopping) / 1000000))
code=$("${run[@]}" inspect --format '{{.State.ExitCode}}' "$container")
[ "$code" = 0 ] || { echo "image-test.sh: exit code $code after SIGTERM" >&2; exit 1; }

echo "image-test.sh ($engine): image $("${run[@]}" image inspect --format '{{.Size}}' "$image") bytes;" \
  "run to /healthz 200 in $healthy_ms ms, to /readyz 200 in $ready_ms ms; HTTP decisions admit then deny;" \
  "RLS: $rls_answers; ConfigMap swap applied in $reloaded; stop (SIGTERM) in $stop_ms ms, exit code 0"
