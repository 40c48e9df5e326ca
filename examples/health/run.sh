#!/bin/sh
# The worked example of docs/health.md: the demo cluster in the fake API
# server with examples/health/policy.yaml, and dra-extender (verbs and controllers in one process) with
# the alert receiver on 127.0.0.1:9095 (token: examples/health/token).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${BIN:-$root/.venv/bin}
dir=$(mktemp -d)
"$bin/python" -m kubesim.fakeapi --port 0 --kubeconfig-out "$dir/kubeconfig" \
  --load "$root/examples/demo-cluster" --load "$here/policy.yaml" > "$dir/ready" &
api=$!
trap 'kill $api 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
while [ ! -s "$dir/ready" ]; do sleep 0.1; done
echo "demo cluster up: kubectl --kubeconfig $dir/kubeconfig (kubectl dra health --kubeconfig $dir/kubeconfig)"
"$bin/dra-extender" all --standalone --kubeconfig "$dir/kubeconfig" --listen "${LISTEN:-127.0.0.1:8888}" \
  --alerts-listen "${ALERTS_LISTEN:-127.0.0.1:9095}" --alerts-token-file "$here/token"
