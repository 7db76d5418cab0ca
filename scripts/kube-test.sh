#!/usr/bin/env bash
# Renders deploy/kubernetes (the base) and its overlays with `kubectl kustomize` (no
# cluster needed) and validates every manifest offline against Kubernetes' own schema,
# unknown fields refused (PyPI's kubernetes-validate), then checks what the schema leaves
# optional (scripts/kube-check.py): a disruption budget, a spread over nodes, ephemeral
# storage requested and limited. The flags the Deployment passes are checked against
# `sluicegate serve` by cli/tests/it/deploy.rs.
#
#   scripts/kube-test.sh [KUBERNETES_VERSION]     # default 1.30: the oldest one the
#                                                  # manifests need (preStop sleep, 1.29+)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-1.30}
command -v kubectl >/dev/null || { echo "kube-test.sh: kubectl is not installed" >&2; exit 1; }
command -v kubernetes-validate >/dev/null || python3 -m pip install -q kubernetes-validate

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
kubectl kustomize deploy/kubernetes >"$out/base.yaml"
for overlay in deploy/kubernetes/overlays/*/; do
  kubectl kustomize "$overlay" >"$out/$(basename "$overlay").yaml"
done
kubernetes-validate --strict --quiet -k "$version" "$out"/*.yaml
python3 scripts/kube-check.py "$out"/*.yaml
echo "kube-test.sh: $(ls "$out" | wc -l) renderings valid for Kubernetes $version and checked ($(cat "$out"/*.yaml | grep -c '^kind:') resources)"
