"""`lab demo`: the whole story on one machine, each stage timed.

1. build (or reuse) the golden image of the playbook;  2. `up` 4 hosts, three healthy simulated
DGX H100s and one with a fault;  3. run the playbook against inventory/lab (the idempotent path);
4. validate (`gpucheck cluster` when the controller has it, else `gpucheck node` on every host
over SSH);  5. print where the report is and which host is faulty;  6. `down` (unless --keep).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lab import cluster, config, golden, state
from lab.errors import EXIT_FAIL, EXIT_OK, LabError
from lab.progress import fmt_duration, say, step

HEALTHY = "dgx-h100"
REPORTS = Path("/var/tmp/gpucheck-lab")
VERDICT = {0: "pass", 1: "warn", 2: "FAIL", 3: "ERROR (could not run)"}


def _recap(log: Path) -> str:
    changed = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", log.read_text(errors="replace"), re.M)
    if not changed:
        return "no play recap"
    total = sum(int(c) for _, c in changed)
    return "idempotent: 0 changed on every host" if total == 0 else \
        "changed: " + ", ".join(f"{h} {c}" for h, c in changed)


def _has_cluster_command() -> bool:
    proc = subprocess.run([sys.executable, "-m", "gpucheck", "cluster", "--help"], capture_output=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    return proc.returncode == 0


def _node_reports(st: state.LabState, out_dir: Path) -> dict[str, dict]:
    """`gpucheck node --format json` on every host over SSH, in parallel; one JSON file per host."""

    def one(h: state.HostState) -> tuple[str, dict]:
        try:
            proc = cluster.ssh_run(h.address, "gpucheck node --format json", timeout=600)
        except LabError as exc:
            return h.name, {"exit_code": 3, "error": exc.message}
        (out_dir / f"{h.name}.json").write_text(proc.stdout)
        try:
            report = json.loads(proc.stdout)
        except ValueError:
            why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            if proc.returncode == 127:
                why = "gpucheck is not installed on this host (did the playbook's agent stage run?)"
            return h.name, {"exit_code": 3, "error": f"exit {proc.returncode}: {why}"}
        return h.name, report

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(pool.map(one, st.hosts))


def _cluster_validation(out_dir: Path, stages: str | None = None) -> tuple[list[str], set[str]]:
    """`gpucheck cluster` on inventory/lab (its own output shown); the faulty hosts are its drain list."""
    report_dir = out_dir / "cluster"
    cmd = [sys.executable, "-m", "gpucheck", "cluster", "-i", str(config.INVENTORY), "--report", str(report_dir)]
    if stages:
        cmd += ["--stages", stages]
    proc = subprocess.run(cmd, timeout=3600, stdin=subprocess.DEVNULL)
    try:
        doc = json.loads((report_dir / "report.json").read_text())
    except (OSError, ValueError):
        return [f"  gpucheck cluster exited {proc.returncode} and wrote no report.json in {report_dir}"], set()
    lines = [f"  gpucheck cluster: exit {doc.get('exit_code', proc.returncode)}; report {report_dir}/report.html"]
    drained = doc.get("drain") or []
    lines += [f"  {d['node']}: drain - {d['reason']}  <- FAULTY" for d in drained]
    return lines, {d["node"] for d in drained}


def failing(report: dict) -> dict[str, dict]:
    return {r["check"]: r for r in report.get("results", []) if r.get("status") in ("fail", "error")}


def odd_ones_out(reports: dict[str, dict]) -> tuple[dict[str, list[dict]], set[str]]:
    """(host -> failures most other hosts do not have, checks failing on most hosts).

    A check that fails on most hosts says something about this machine or the profile (no
    InfiniBand here, 2 CPU cores), not about one node; the faulty node is the one whose failures
    the others do not share. A host whose agent could not run at all is named too.
    """
    counts: dict[str, int] = {}
    for rep in reports.values():
        for check in failing(rep):
            counts[check] = counts.get(check, 0) + 1
    common = {c for c, n in counts.items() if n > len(reports) / 2}
    odd: dict[str, list[dict]] = {}
    for name, rep in reports.items():
        if rep.get("error"):
            odd[name] = [{"check": "agent", "status": "error", "reason": rep["error"]}]
            continue
        own = [r for c, r in failing(rep).items() if c not in common]
        if own:
            odd[name] = own
    return odd, common


def _short(value: object, limit: int = 100) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _summarize(reports: dict[str, dict]) -> tuple[list[str], set[str]]:
    odd, common = odd_ones_out(reports)
    lines = []
    for name, rep in sorted(reports.items()):
        code = rep.get("exit_code", 3)
        lines.append(f"  {name}: {VERDICT.get(code, code)}" + ("  <- FAULTY" if name in odd else ""))
        for res in odd.get(name, []):
            detail = f" (measured {_short(res['measured'])}, expected {_short(res['expected'])})" \
                if "measured" in res else ""
            lines.append(f"      {res['status']}: {res['check']}: {res.get('reason', '')}{detail}")
    if common:
        lines.append("  failing on most hosts (this machine or the profile, not one node): "
                     + ", ".join(sorted(common)))
    return lines, set(odd)


def run(playbook: Path, keep: bool = False, fault_scenario: str = "ecc-uncorrected", hosts: int = 4,
        fresh: bool = False, stages: str | None = None) -> int:
    cluster.require_root()
    if state.load() is not None:
        raise LabError("a lab is already up: run `python -m lab down` first (the demo brings up its own)")
    begin = time.monotonic()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = REPORTS / f"demo-{stamp}"
    out_dir.mkdir(parents=True, exist_ok=True)
    scenarios = [HEALTHY] * (hosts - 1) + [fault_scenario]
    faulty = config.host_name(hosts)
    say(f"demo: {hosts} hosts, {faulty} with the fault scenario {fault_scenario}; report in {out_dir}")
    with step("stage 1/5: golden image (built once, then reused)"):
        say(golden.build(playbook, fresh=fresh))
    try:
        with step(f"stage 2/5: up {hosts} hosts"):
            st = cluster.up(cluster.UpOptions(hosts=hosts, scenarios=scenarios, playbook=playbook))
        log = out_dir / "playbook.log"
        with step(f"stage 3/5: ansible-playbook {playbook.name} -i inventory/lab"):
            code = golden.run_playbook(playbook, log)
            if code != 0:
                raise LabError(f"the playbook failed on the lab (exit {code}); log {log}", code=EXIT_FAIL)
            say(_recap(log))
        with step("stage 4/5: validation"):
            if _has_cluster_command():
                lines, named = _cluster_validation(out_dir, stages)
            else:
                lines, named = _summarize(_node_reports(st, out_dir))
        (out_dir / "summary.txt").write_text("\n".join(lines) + "\n")
        say("stage 5/5: what the validation found:")
        print("\n".join(lines))
        ok = named == {faulty}
        print(f"report: {out_dir}")
        print(f"faulty host: {', '.join(sorted(named)) or 'none found'}"
              + ("" if ok else f"  (expected {faulty} only: the demo did NOT come out as it should)"))
    finally:
        if keep:
            say("--keep: the lab stays up (`python -m lab down` removes it)")
        else:
            say(cluster.down())
    say(f"demo finished in {fmt_duration(time.monotonic() - begin)}")
    return EXIT_OK if ok else EXIT_FAIL
