"""What a lab host spends on Ansible's modules, with the module_utils bytecode cache (lab/module_bytecode) and
without it (the same play with GPUCHECK_TESTS_MODULE_BYTECODE empty, which turns it off), in one command: the host's
CPU time read from its own cgroup (lab/hostinit.py gives each host one; cgroup v2's cpu.stat counts it).

    python3 -m lab up --hosts 1 && .venv/bin/python bench/lab_module_bytecode.py [--host node01] [--rounds 2]

Prints the host CPU per task for each, and their ratio; needs a lab up (it uses the instance's inventory)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab import config, module_bytecode, procs  # noqa: E402

# Tasks as site.yml's are made: mostly stat/file/command and package checks that change nothing.
PLAY = """\
- hosts: {host}
  gather_facts: false
  environment:
    GPUCHECK_TESTS_MODULE_BYTECODE: "{cache}"
  tasks:
    - {{ansible.builtin.stat: {{path: /etc/hostname}}, loop: "{{{{ range(12) | list }}}}"}}
    - {{ansible.builtin.command: "true", loop: "{{{{ range(4) | list }}}}", changed_when: false}}
    - {{ansible.builtin.apt: {{name: openssh-server, state: present}}, loop: "{{{{ range(4) | list }}}}"}}
"""
TASKS = 20


def host_cgroup(host: str) -> Path:
    """The host's cgroup in the unified hierarchy: the parent of its systemd-nspawn's own."""
    for pid in procs.host_boots():
        if f"--machine={host}" in procs.cmdline(pid):
            line = next(ln for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if ln.startswith("0::"))
            return (Path("/sys/fs/cgroup/unified") / line.split("::", 1)[1].lstrip("/")).parent
    raise SystemExit(f"no lab host {host} is up (python3 -m lab up)")


def usage_s(cgroup: Path) -> float:
    stat = dict(line.split() for line in (cgroup / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


def run_play(host: str, cgroup: Path, cache: bool) -> float:
    """Host CPU seconds per task of one run of the play."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as fh:
        fh.write(PLAY.format(host=host, cache=module_bytecode.HOST_CACHE if cache else ""))
    before = usage_s(cgroup)
    done = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(config.INVENTORY), fh.name],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    Path(fh.name).unlink()
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-2000:])
    return (usage_s(cgroup) - before) / TASKS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="node01")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    cgroup = host_cgroup(args.host)
    runs: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        for cache in (False, True):
            runs[cache].append(run_play(args.host, cgroup, cache))
    without, with_cache = statistics.median(runs[False]), statistics.median(runs[True])
    print(f"host CPU per Ansible task on {args.host} ({TASKS} tasks x {args.rounds} rounds, median): "
          f"without the cache {without * 1000:.0f} ms, with it {with_cache * 1000:.0f} ms "
          f"(ratio {with_cache / without:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
