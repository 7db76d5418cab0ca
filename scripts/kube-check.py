#!/usr/bin/env python3
"""What scripts/kube-test.sh demands of each rendering beyond Kubernetes' schema, for
every Deployment: a PodDisruptionBudget selecting its pods that keeps at least one and
lets a drain evict one; a topology spread of its pods over nodes (kubernetes.io/hostname);
and ephemeral-storage requested and limited on every container, the limits covering the
pod's disk emptyDirs (they count toward them). Prints each failure and exits 1.

Usage: python3 scripts/kube-check.py RENDERING.yaml [...] (PyYAML, which
kubernetes-validate installs)."""
import re
import sys

import yaml

SUFFIXES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
            "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def bytes_of(quantity):
    """Bytes of a Kubernetes quantity such as 1Gi or 500M."""
    match = re.fullmatch(r"(\d+)([a-zA-Z]*)", str(quantity))
    if not match or match.group(2) not in SUFFIXES:
        raise ValueError(f"not a quantity of bytes: {quantity!r}")
    return int(match.group(1)) * SUFFIXES[match.group(2)]


def selects(selector, labels):
    """Whether a label selector's matchLabels (the only form checked) select `labels`."""
    wanted = (selector or {}).get("matchLabels") or {}
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def check(path):
    resources = [r for r in yaml.safe_load_all(open(path)) if r]
    budgets = [r for r in resources if r["kind"] == "PodDisruptionBudget"]
    problems = []
    for deployment in (r for r in resources if r["kind"] == "Deployment"):
        name = f"{path}: Deployment {deployment['metadata']['name']}"
        replicas = deployment["spec"].get("replicas", 1)
        template = deployment["spec"]["template"]
        labels = template["metadata"].get("labels") or {}
        pod = template["spec"]

        covering = [b for b in budgets if selects(b["spec"].get("selector"), labels)]
        if not covering:
            problems.append(f"{name}: no PodDisruptionBudget selects its pods")
        for budget in covering:
            keep = budget["spec"].get("minAvailable")
            if not (isinstance(keep, int) and 1 <= keep < replicas):
                problems.append(f"{name}: its PodDisruptionBudget's minAvailable is {keep!r}, "
                                f"not at least 1 and below its {replicas} replicas")

        if not any(c.get("topologyKey") == "kubernetes.io/hostname" and c.get("maxSkew") == 1
                   and selects(c.get("labelSelector"), labels)
                   for c in pod.get("topologySpreadConstraints") or []):
            problems.append(f"{name}: its pods are not spread over kubernetes.io/hostname (maxSkew 1)")

        def storage(container):
            wanted = container.get("resources") or {}
            return [(wanted.get(k) or {}).get("ephemeral-storage") for k in ("requests", "limits")]

        for container in pod.get("initContainers", []) + pod["containers"]:
            if None in storage(container):
                problems.append(f"{name}: container {container['name']} has no ephemeral-storage request and limit")
        # The pod is evicted when its containers' logs and its emptyDirs pass the sum.
        limits = sum(bytes_of(storage(c)[1] or 0) for c in pod["containers"])
        disks = [v["emptyDir"] or {} for v in pod.get("volumes", []) if "emptyDir" in v]
        disks = [d for d in disks if d.get("medium") != "Memory"]
        if any("sizeLimit" not in d for d in disks):
            problems.append(f"{name}: an emptyDir on disk has no sizeLimit")
        elif limits <= sum(bytes_of(d["sizeLimit"]) for d in disks):
            problems.append(f"{name}: its ephemeral-storage limits leave nothing beyond its emptyDirs' sizeLimits")
    return problems


problems = [p for path in sys.argv[1:] for p in check(path)]
for problem in problems:
    print(f"kube-check.py: {problem}", file=sys.stderr)
sys.exit(1 if problems else 0)
