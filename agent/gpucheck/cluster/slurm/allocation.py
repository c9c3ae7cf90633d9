"""One Slurm allocation held across several steps that run at once (`--launcher slurm`'s burn: every node's burn
and the all-reduce, both in one job): `salloc --no-shell` takes the nodes whole and returns, each step is an
`srun --jobid=ID --overlap` from this machine (srun.Job.jobid), and `scancel ID` ends the job and every step in it.
Nothing here raises."""

from __future__ import annotations

import contextlib
import math
import re
import subprocess
from collections.abc import Sequence

from . import srun

GRANTED = re.compile(r"Granted job allocation (\d+)")
ALLOCATE_S = 60.0  # the nodes were usable a moment ago: longer means someone else holds them


def allocate(what: str, names: Sequence[str], seconds: float, gpus_per_node: int,
             wait_s: float = ALLOCATE_S) -> tuple[str, str]:
    """(job id, '') for an allocation of these Slurm nodes, whole, for `seconds`; ('', why not) when Slurm will not
    give it within `wait_s`."""
    nodes = list(dict.fromkeys(names))
    argv = ["salloc", "--no-shell", f"--job-name={srun.job_name(what)}", f"--nodes={len(nodes)}",
            f"--nodelist={','.join(nodes)}", "--exclusive", f"--time={max(1, math.ceil(seconds / 60))}",
            f"--immediate={max(1, math.ceil(wait_s))}"]
    if gpus_per_node:
        argv.append(f"--gres=gpu:{gpus_per_node}")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=wait_s + 30, check=False)
    except FileNotFoundError:
        return "", "salloc not found on this machine: install slurm-client here, with the cluster's slurm.conf"
    except subprocess.TimeoutExpired:
        return "", f"salloc did not answer within {wait_s + 30:g} s"
    said = done.stderr + done.stdout
    granted = GRANTED.search(said)
    if done.returncode == 0 and granted:
        return granted[1], ""
    if granted:  # it was granted, then something failed: do not leave the nodes held
        release(granted[1])
    why = srun.refusal(said) or next((x.strip() for x in reversed(said.splitlines()) if x.strip()), "")
    return "", f"Slurm gave no allocation of {len(nodes)} node(s): {why or f'salloc exited {done.returncode}'}"


def release(job_id: str) -> None:
    """End the allocation and every step still running in it (its --time would, later)."""
    if job_id:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["scancel", job_id], capture_output=True, timeout=30, check=False)
