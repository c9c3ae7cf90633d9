"""`python3 -m lab.kubernetes build|smoke` (run from the repository root, as root)."""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
from pathlib import Path

from lab.errors import EXIT_FAIL, EXIT_OK, reported
from lab.kubernetes import control_plane
from lab.kubernetes.build import build
from lab.progress import say

NODE = "gpu-node-1"
CONDITION = "GPUCheckHealthy"
TAINT = {"key": "gpucheck/unhealthy", "value": "true", "effect": "NoSchedule"}


def smoke(cache_dir: Path) -> bool:
    """Start the control plane, give a hand-made Node a label, a taint and a condition, check each, stop."""
    run_dir = Path(tempfile.mkdtemp(prefix="gpucheck-k8s-"))
    say(f"starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler (logs in {run_dir}/logs) ...")
    plane = control_plane.start(cache_dir, run_dir)
    passed = False
    try:
        say(f"ready after (s from start): {json.dumps(plane.ready_s)}")
        print(f"server version: {json.loads(plane.kubectl('version', '-o', 'json'))['serverVersion']['gitVersion']}")
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": NODE, "labels": {"nvidia.com/gpu.present": "true"}}}
        print(plane.kubectl("apply", "-f", "-", input=json.dumps(node)).strip())
        print(plane.kubectl("label", "node", NODE, "gpucheck/health=pass", "--overwrite").strip())
        print(plane.kubectl("taint", "node", NODE, f"{TAINT['key']}={TAINT['value']}:{TAINT['effect']}").strip())
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {"type": CONDITION, "status": "True", "reason": "AllChecksPassed", "message": "smoke test",
                     "lastHeartbeatTime": now, "lastTransitionTime": now}
        # Status is a subresource: kubectl 1.20 cannot patch it (no --subresource), so PATCH it directly.
        capacity = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8"}
        plane.request("PATCH", f"/api/v1/nodes/{NODE}/status",
                      {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [condition]}},
                      "application/strategic-merge-patch+json")
        seen = json.loads(plane.kubectl("get", "node", NODE, "-o", "json"))
        labels = seen["metadata"].get("labels", {})
        taints = seen["spec"].get("taints", [])
        conditions = {c["type"]: c["status"] for c in seen["status"].get("conditions", [])}
        print(f"node {NODE}: labels {labels}")
        print(f"node {NODE}: taints {[(t['key'], t.get('value'), t['effect']) for t in taints]}")
        print(f"node {NODE}: conditions {conditions}")
        print(f"node {NODE}: allocatable {seen['status'].get('allocatable', {})}")
        checks = {"label": labels.get("gpucheck/health") == "pass",
                  "taint": any(t["key"] == TAINT["key"] and t["effect"] == TAINT["effect"] for t in taints),
                  "condition": conditions.get(CONDITION) == "True"}
        for what, ok in checks.items():
            print(f"{what}: {'ok' if ok else 'MISSING'}")
        passed = all(checks.values())
        return passed
    finally:
        plane.stop()
        say("control plane stopped")
        if passed:
            shutil.rmtree(run_dir, ignore_errors=True)
        else:  # keep the logs to read; the keys and etcd's data are of no use once it stopped
            for name in ("etcd", "sa.key", "apiserver.key", "tokens.csv"):
                path = run_dir / name
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            say(f"logs kept in {run_dir}/logs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m lab.kubernetes")
    parser.add_argument("command", choices=("build", "smoke"),
                        help="build: the cached binaries; smoke: a control plane taking a hand-made Node")
    args = parser.parse_args(argv)

    def command() -> int:
        if args.command == "build":
            print(build())
            return EXIT_OK
        return EXIT_OK if smoke(build()) else EXIT_FAIL
    return reported(command)


if __name__ == "__main__":
    sys.exit(main())
