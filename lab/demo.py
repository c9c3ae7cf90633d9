"""`lab demo`: the whole story on one machine, each stage timed.

1. build (or reuse) the golden image of the playbook;  2. `up` 4 hosts, three healthy simulated
DGX H100s and one with a fault;  3. run the playbook against inventory/lab (hosts start from the
image, so only what belongs to this cluster changes: its known_hosts, an agent newer than the image);
4. validate with this repository's `gpucheck cluster` (every host's agent, then the cluster-wide
stages) through Slurm (--launcher slurm: the node checks with one srun, the MPI and smoke-training jobs as
Slurm jobs) with --drain: the faulty host is drained in the lab's Slurm (admin01 runs slurmctld) with its
`gpucheck:` reason; then it is repaired and its Slurm health check (gpucheck node --slurm) resumes it;
5. print where the report is and which host is faulty;  6. `down` (with --keep the lab stays up, and the
command says last what to try on it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from lab import cluster, config, golden, slurm, ssh, state
from lab.errors import EXIT_FAIL, EXIT_OK, LabError
from lab.playbook import run_playbook
from lab.progress import fmt_duration, say, step

HEALTHY = "dgx-h100"
REPORTS = Path("/var/tmp/gpucheck-lab")
AGENT = Path(__file__).resolve().parent.parent / "agent"
VERDICT = {0: "pass", 1: "warn", 2: "FAIL", 3: "ERROR (could not run)"}


def _recap(log: Path) -> str:
    changed = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", log.read_text(errors="replace"), re.M)
    if not changed:
        return "no play recap"
    total = sum(int(c) for _, c in changed)
    return "idempotent: 0 changed on every host" if total == 0 else \
        "changed: " + ", ".join(f"{h} {c}" for h, c in changed)


def _playbook_validation(summary: Path) -> str:
    """One line from the gpucheck_validate role's summary.json (`gpucheck node` on every host)."""
    try:
        verdicts = json.loads(summary.read_text())
        parts = [f"{v['host']} {v['status']}" + (f" ({', '.join(v['failed'])})" if v.get("failed") else "")
                 for v in verdicts]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"the playbook's validation summary {summary} cannot be read: {exc}"
    return f"the playbook's own validation (gpucheck node on every host): {', '.join(parts)}"


def _cluster_validation(out_dir: Path, stages: str | None = None,
                        slurm_env: dict[str, str] | None = None) -> tuple[list[str], set[str]]:
    """`gpucheck cluster` on inventory/lab (its own output shown); the faulty hosts are its drain list, which
    --drain hands to the lab's Slurm when there is one (slurm_env).

    The repository's own agent runs (agent/ first on the path), installed or not, so the demo
    always validates with the code it sits beside.
    """
    report_dir = out_dir / "cluster"
    # The lab's links are veth pairs on a few shared cores: TCP figures are CPU-bound and one pair can
    # run 1.6x faster than the rest in the same run (measured), so a slow pair here is below half the
    # reference, not the default 0.7 that suits real NICs.
    cmd = [sys.executable, "-m", "gpucheck", "cluster", "-i", str(config.INVENTORY), "--report", str(report_dir),
           "--pair-fraction", "0.5"]
    if stages:
        cmd += ["--stages", stages]
    if slurm_env:  # as a Slurm cluster is validated: node checks and jobs through Slurm, verdicts into it
        cmd += ["--launcher", "slurm", "--drain"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(AGENT), os.environ.get("PYTHONPATH")])),
               **(slurm_env or {}))
    proc = subprocess.run(cmd, timeout=3600, stdin=subprocess.DEVNULL, env=env)
    try:
        doc = json.loads((report_dir / "report.json").read_text())
    except (OSError, ValueError):
        return [f"  gpucheck cluster exited {proc.returncode} and wrote no report.json in {report_dir}"], set()
    lines = [f"  gpucheck cluster: exit {doc.get('exit_code', proc.returncode)}; report {report_dir}/report.html"]
    drain = {d["node"]: d["reason"] for d in doc.get("drain") or []}
    status_code = {"pass": 0, "skip": 0, "warn": 1, "fail": 2, "error": 3}
    for name, node in sorted((doc.get("nodes") or {}).items()):
        verdict = VERDICT.get(status_code.get(node.get("status"), 3))
        lines.append(f"  {name}: {verdict}" + ("  <- FAULTY" if name in drain else ""))
        if name in drain:
            lines.append(f"      drain: {drain[name]}")
    for name in sorted(set(drain) - set(doc.get("nodes") or {})):  # drained by a cluster-wide stage only
        lines += [f"  {name}: drain  <- FAULTY", f"      drain: {drain[name]}"]
    counts = (doc.get("counts") or {}).get("cluster") or {}
    if any(counts.values()):
        lines.append("  cluster-wide checks: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    if slurm_env:
        lines += _through_slurm(doc)
    return lines, set(drain)


def _through_slurm(doc: dict) -> list[str]:
    """How --launcher slurm ran: which nodes through srun, which over SSH and why, and the Slurm jobs' verdicts."""
    nodes = doc.get("nodes") or {}
    through = sorted(n for n, v in nodes.items() if v.get("via") == "srun")
    lines = [f"  node checks through one srun: {', '.join(through) or 'none'}"]
    lines += [f"  {n} over SSH: {v['slurm_state']}" for n, v in sorted(nodes.items()) if v.get("slurm_state")]
    for result in doc.get("cluster") or []:
        if str(result.get("check", "")).startswith(("cluster.mpi", "cluster.allreduce", "cluster.smoke")):
            lines.append(f"  {result['check']} as a Slurm job: {result['status']}: {result.get('reason')}")
    return lines


def _sinfo(env: dict[str, str]) -> str:
    """`sinfo -R` (drained nodes and why) and each node's state, as the admin node sees them."""
    out = []
    for argv in (["sinfo", "-R", "-o", "%15N %60E"], ["sinfo", "-N", "-o", "%10N %10P %10T"]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=dict(os.environ, **env))
        out.append(f"  $ {' '.join(argv)}\n" + "".join(f"  {line}\n" for line in
                                                       (done.stdout or done.stderr).strip().splitlines()))
    return "".join(out).rstrip()


def _slurm_client() -> dict[str, str] | None:
    """This machine as a client of the lab's Slurm, or None (said) when the playbook made no Slurm cluster (a
    stand-in playbook without site.yml's scheduler stage)."""
    try:
        return slurm.client_env()
    except LabError as exc:
        say(f"no Slurm on the lab, so no drain in Slurm: {exc}")
        return None


def _slurm_story(faulty: str, env: dict[str, str]) -> list[str]:
    """After the validation: the faulty node drained with gpucheck's reason; then repaired, one health check by
    Slurm's own HealthCheckProgram, and resumed by gpucheck."""
    lines = ["  Slurm after the validation (gpucheck cluster --drain):", _sinfo(env)]
    say(cluster.fault(faulty, "scenario", HEALTHY))
    st = state.load_up()
    check = ssh.ssh_run(st.host(faulty).address, "/usr/local/sbin/gpucheck-slurm-health", timeout=300)
    said = [line for line in check.stderr.splitlines() if line.startswith("gpucheck: slurm:")]
    lines += [f"  {faulty} repaired (lab fault {faulty} scenario {HEALTHY}); its health check: "
              + (said[-1] if said else f"exit {check.returncode}, {check.stderr.strip()[-200:]}"), _sinfo(env)]
    return lines


def run(playbook: Path, keep: bool = False, fault_scenario: str = "ecc-uncorrected", hosts: int = 4,
        fresh: bool = False, stages: str | None = None) -> int:
    cluster.require_root()
    if state.load() is not None:
        raise LabError("a lab is already up: run `python3 -m lab down` first (the demo brings up its own)")
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
            cluster.up(cluster.UpOptions(hosts=hosts, scenarios=scenarios, playbook=playbook, admin=True))
        log = out_dir / "playbook.log"
        checked = out_dir / "playbook-validation"
        with step(f"stage 3/5: ansible-playbook {playbook.name} -i inventory/lab", f"task output in {log}"):
            # The 4th host is faulty on purpose: site.yml's own validation reports it without failing
            # the play, so that gpucheck cluster then judges the whole cluster.
            code = run_playbook(playbook, log, {"gpucheck_validate_fail": False,
                                                "gpucheck_validate_results_dir": str(checked)})
            if code != 0:
                raise LabError(f"the playbook failed on the lab (exit {code}); log {log}", code=EXIT_FAIL)
            say(_recap(log))
            if (checked / "summary.json").is_file():
                say(_playbook_validation(checked / "summary.json"))
        with step("stage 4/5: validation, the failed nodes drained in Slurm"):
            env = _slurm_client()
            lines, named = _cluster_validation(out_dir, stages, env)
            if env:
                lines += _slurm_story(faulty, env)
        (out_dir / "summary.txt").write_text("\n".join(lines) + "\n")
        say("stage 5/5: what the validation found:")
        print("\n".join(lines))
        ok = named == {faulty}
        print(f"demo files: {out_dir} (playbook.log, playbook-validation/, summary.txt,"
              " cluster/ = the gpucheck cluster report)")
        print(f"faulty host: {', '.join(sorted(named)) or 'none found'}"
              + ("" if ok else f"  (expected {faulty} only: the demo did NOT come out as it should)"))
    finally:
        if not keep:  # with --keep, `python3 -m lab demo` says what to try on the lab it leaves up, last
            say(cluster.down())
    say(f"demo finished in {fmt_duration(time.monotonic() - begin)}")
    return EXIT_OK if ok else EXIT_FAIL
