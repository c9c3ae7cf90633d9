"""What the scheduler did in the run, from the report: the launcher (`options.launcher`; with slurm a node Slurm
could not run is checked over SSH, its node entry says why in `slurm_state`) and, with --drain, each node's action
under the scheduler's key (`slurm`: cluster/slurm/drain.py's drain, resume, keep or error; `kubernetes`: the Node's
taint, launchers/kubernetes.py), each with its own sentence. Every rendering shows the same (label, text) lines
under the scheduler's name; none where the run had nothing to do with a scheduler."""

from __future__ import annotations

from typing import Any

from ..values import plural
from .wording import dicts, node_map

LAUNCHERS = {
    "slurm": "Slurm (--launcher slurm): node checks through srun; MPI, all-reduce and training as Slurm jobs",
    "ssh": "SSH: node checks over SSH; MPI, all-reduce and training started over SSH, not through Slurm",
    "kubernetes": "Kubernetes (--launcher kubernetes): node checks as pods bound to their Nodes; the stages across "
                  "nodes not run",
}
# report.json's key of what --drain did (cluster/launchers: drains_in) -> the scheduler's name, the section's title
SCHEDULERS = {"slurm": "Slurm", "kubernetes": "Kubernetes"}
# an action -> its line's label, in the order the lines come, per scheduler
ACTIONS = {
    "slurm": {"drain": "Drained", "resume": "Resumed", "error": "Not updated (Slurm refused)",
              "keep": "Left as they were"},
    "kubernetes": {"drain": "Tainted", "resume": "Taint removed", "error": "Not updated (Kubernetes refused)",
                   "keep": "Left as they were"},
}
KEPT_SHOWN = 20  # nodes left as they were named one by one; beyond, counted


def scheduler(doc: dict[str, Any]) -> str:
    """The key of SCHEDULERS the run wrote (one of them; Slurm's in a report older than the key)."""
    return next((key for key in SCHEDULERS if key in doc), "slurm")


def launcher(doc: dict[str, Any]) -> str:
    options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    return str(options.get("launcher") or "")


def drain_asked(doc: dict[str, Any]) -> bool:
    options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    return options.get("drain") is True


def over_ssh(doc: dict[str, Any]) -> list[str]:
    """`node04 (IDLE+DRAIN in Slurm (…))`: the nodes --launcher slurm checked over SSH, and why."""
    return [f"{host} ({node['slurm_state']})" for host, node in node_map(doc).items()
            if isinstance(node, dict) and node.get("slurm_state")]


def why_kept(action: dict[str, Any]) -> str:
    """`in service (IDLE)` from slurm.Action's `left node01 as it is: in service (IDLE)`; else its whole text."""
    text = str(action.get("text", ""))
    prefix = f"left {action.get('node')} as it is: "
    return text.removeprefix(prefix) if text.startswith(prefix) else text


def kept_text(kept: list[dict[str, Any]]) -> str:
    """`node01, node02: in service (IDLE); node04: already drained for the same reason (…)`, the nodes named up to
    KEPT_SHOWN."""
    groups: dict[str, list[str]] = {}
    for action in kept:
        groups.setdefault(why_kept(action), []).append(str(action.get("node")))
    parts = []
    for why, nodes in groups.items():
        more = f" and {len(nodes) - KEPT_SHOWN} more" if len(nodes) > KEPT_SHOWN else ""
        parts.append(f"{', '.join(nodes[:KEPT_SHOWN])}{more}: {why}")
    return "; ".join(parts)


def done_text(action: dict[str, Any], label: str) -> str:
    """`node04: gpucheck: gpu.ecc_errors …` from `drained node04: gpucheck: …` (the label says `Drained`)."""
    text = str(action.get("text", ""))
    if action.get("action") == "error":
        return f"{action.get('node')}: {text}"
    return text.removeprefix(label.lower() + " ")


def action_lines(actions: list[dict[str, Any]], labels: dict[str, str]) -> list[tuple[str, str]]:
    """One line per action taken on a node (its own sentence), the nodes left as they were in one line."""
    lines = []
    for verb, label in labels.items():
        done = [a for a in actions if a.get("action") == verb]
        if not done:
            continue
        if verb == "keep":
            lines.append((f"{label} ({len(done)})", kept_text(done)))
        else:
            lines += [(label, done_text(a, label)) for a in done]
    others = [a for a in actions if a.get("action") not in labels]
    lines += [(str(a.get("action")), str(a.get("text", a.get("node")))) for a in others]
    return lines


def scheduler_lines(doc: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    """(the scheduler's name, (label, text) lines): the launcher, nodes checked over SSH instead of srun, what
    --drain did there."""
    key = scheduler(doc)
    return SCHEDULERS[key], lines_of(doc, key)


def lines_of(doc: dict[str, Any], key: str) -> list[tuple[str, str]]:
    actions, name = dicts(doc.get(key)), SCHEDULERS[key]
    used = launcher(doc)
    if used not in SCHEDULERS and not actions and not drain_asked(doc):
        return []
    lines = [("Launcher", LAUNCHERS.get(used, used or "not recorded"))]
    ssh = over_ssh(doc)
    if ssh:
        lines.append(("Checked over SSH, not through Slurm", "; ".join(ssh)))
    if actions:
        lines += action_lines(actions, ACTIONS[key])
    elif drain_asked(doc):
        lines.append(("Drain", f"--drain was given, but no {name} action is recorded (the report was written before "
                               "it ran, or it could not run)"))
    else:
        drain = dicts(doc.get("drain"))
        lines.append(("Drain", f"nothing drained or resumed in {name} (--drain not given)"
                      + (f"; drain.txt lists {plural(len(drain), 'node')} to drain" if drain else "")))
    return lines
