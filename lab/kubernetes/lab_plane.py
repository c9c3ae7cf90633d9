"""The lab's own control plane (`python3 -m lab up --kubernetes`): started by `up` before the hosts boot, with the
apiserver on the lab's bridge where the hosts' kubelets reach it, and a token for each GPU host; left running when
`up` returns and ended by `down`. Its files are in RUN (the admin kubeconfig among them); its processes are found
again by their arguments, which name RUN, so a crashed `up` leaves nothing `down` cannot find."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from lab import config, procs, ssh
from lab.errors import LabError
from lab.kubernetes import control_plane, node_host
from lab.kubernetes.build import Progress
from lab.progress import fmt_duration

RUN = config.RUN_DIR / "kubernetes"
PLANE_FILE = RUN / "plane.json"
KUBECONFIG = RUN / "kubeconfig"
READY_TIMEOUT_S = 180.0


def start(binaries: Path, address: str, nodes: Sequence[str]) -> control_plane.ControlPlane:
    shutil.rmtree(RUN, ignore_errors=True)
    RUN.mkdir(parents=True)
    plane = control_plane.start(binaries, RUN, address, nodes)
    PLANE_FILE.write_text(json.dumps({"bin_dir": str(plane.bin_dir), "server": plane.server, "token": plane.token,
                                      "ca_file": str(plane.ca_file or ""), "kubeconfig": str(plane.kubeconfig),
                                      "node_tokens": plane.node_tokens, "ready_s": plane.ready_s}, indent=2) + "\n")
    PLANE_FILE.chmod(0o600)
    return plane


def load() -> control_plane.ControlPlane:
    """The running lab's control plane, to ask (its processes are not this one's to stop: stop() does)."""
    try:
        raw = json.loads(PLANE_FILE.read_text())
    except (OSError, ValueError):
        raise LabError("this lab runs no Kubernetes: bring it up with `python3 -m lab up --kubernetes`") from None
    return control_plane.ControlPlane(Path(raw["bin_dir"]), RUN, raw["server"], raw["token"],
                                      Path(raw["ca_file"]) if raw["ca_file"] else None, Path(raw["kubeconfig"]),
                                      raw["node_tokens"], raw["ready_s"])


def join(plane: control_plane.ControlPlane, node: str) -> node_host.Join:
    ca = plane.ca_file.read_text() if plane.ca_file else ""
    return node_host.Join(plane.server, ca, plane.node_tokens[node])


def ours(argv: list[str]) -> bool:
    return any(f"{RUN}/" in arg for arg in argv[1:])


def running() -> list[int]:
    return procs.matching(ours)


def stop() -> None:
    procs.end(running(), grace=10.0)
    shutil.rmtree(RUN, ignore_errors=True)


def ready_nodes(plane: control_plane.ControlPlane) -> dict[str, str]:
    """Each Node's name -> its Ready condition's status ("True", "False", "Unknown")."""
    found = {}
    for node in plane.request("GET", "/api/v1/nodes").get("items", []):
        ready = [c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
        found[node["metadata"]["name"]] = ready[0]["status"] if ready else "Unknown"
    return found


def wait_ready(plane: control_plane.ControlPlane, nodes: Mapping[str, str], progress: Progress,
               timeout: float = READY_TIMEOUT_S) -> None:
    """Until every node (name -> address) has its kubelet's Node and the Node is Ready (polled; the kubelet says
    Ready with its second status, about 15 s after its start). A node that is not: what its units say."""
    begin = time.monotonic()
    said = 0.0
    while True:
        seen = ready_nodes(plane)
        waiting = [n for n in nodes if seen.get(n) != "True"]
        if not waiting:
            progress(f"kubernetes: {', '.join(nodes)} Ready in {fmt_duration(time.monotonic() - begin)}")
            return
        if time.monotonic() - begin > timeout:
            states = "; ".join(f"{n}: {seen.get(n, 'not registered')} ({_units_say(nodes[n])})" for n in waiting)
            raise LabError(f"kubernetes nodes not Ready within {timeout:.0f} s: {states}")
        if time.monotonic() - said > 20:
            said = time.monotonic()
            progress(f"kubernetes: waiting for {', '.join(waiting)} to be Ready ...")
        time.sleep(0.5)


def _units_say(address: str) -> str:
    """A node's failed units and their journals' last lines, or its kubelet's when none failed."""
    script = (f"failed=$(systemctl --failed --plain --no-legend | cut -d' ' -f1); echo failed: ${{failed:-none}}; "
              f"for unit in ${{failed:-{node_host.KUBELET}}}; do journalctl -u $unit -n 4 --no-pager -o cat; done")
    done = ssh.ssh_run(address, script, timeout=30)
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return " | ".join(line[:200] for line in lines) or "no output"
