"""This machine as a client of the lab's Slurm: the admin node (admin01) runs slurmctld, and `gpucheck cluster
--drain`, `sinfo` and `scontrol` run here, where gpucheck cluster always runs, as on a real admin node with
slurm-client installed. `client_env()` copies the cluster's slurm.conf and munge key from the admin node into
/run/gpucheck-lab/slurm, starts a munged of its own on a socket there (recorded in the lab state, ended by
`down`) and returns the environment the Slurm commands need (SLURM_CONF)."""

from __future__ import annotations

import os
import shutil
import time

from lab import config, procs, ssh, state
from lab.errors import LabError

SLURM_DIR = config.RUN_DIR / "slurm"


def admin_host(st: state.LabState) -> state.HostState:
    admin = next((h for h in st.hosts if h.role == "admin"), None)
    if admin is None:
        raise LabError("this lab has no admin node, so no Slurm controller: bring it up with `up --admin`")
    return admin


def fetch(admin: state.HostState, path: str) -> str:
    done = ssh.ssh_run(admin.address, f"cat {path}", timeout=30)
    if done.returncode != 0:
        raise LabError(f"{admin.name} has no {path}: run `ansible-playbook -i inventory/lab site.yml --tags "
                       f"scheduler` first ({done.stderr.strip()[:200]})")
    return done.stdout


def client_env() -> dict[str, str]:
    """{"SLURM_CONF": ...} for scontrol, sinfo and srun on this machine (munged started if it is not running)."""
    if shutil.which("munged") is None and not os.path.exists("/usr/sbin/munged"):
        raise LabError("this machine has no munged: apt-get install munge slurm-client (lab/apt-packages.txt)")
    with state.locked():
        st = state.load_up()
        admin = admin_host(st)
        SLURM_DIR.mkdir(parents=True, exist_ok=True)
        SLURM_DIR.chmod(0o755)  # munge's socket lives here: any local user may ask it
        socket = SLURM_DIR / "munge.sock"
        conf = SLURM_DIR / "slurm.conf"
        conf.write_text(fetch(admin, "/etc/slurm/slurm.conf") + f"\n# this machine's munged (lab/slurm.py)\n"
                        f"AuthInfo=socket={socket}\n")
        key = SLURM_DIR / "munge.key"
        key.write_text(fetch(admin, "/etc/munge/munge.key"))
        key.chmod(0o600)
        if running(st.slurm_client_pid):  # started anew: it reads the key it was given at its start
            procs.end([st.slurm_client_pid])  # type: ignore[list-item]
        (SLURM_DIR / "munged.pid").unlink(missing_ok=True)
        procs.spawn(["munged", "--force", f"--socket={socket}", f"--key-file={key}",
                     f"--log-file={SLURM_DIR / 'munged.log'}", f"--pid-file={SLURM_DIR / 'munged.pid'}",
                     f"--seed-file={SLURM_DIR / 'munged.seed'}"], SLURM_DIR / "munged.out").wait(timeout=30)
        deadline = time.monotonic() + 10
        while not (SLURM_DIR / "munged.pid").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        try:
            st.slurm_client_pid = int((SLURM_DIR / "munged.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            raise LabError(f"munged did not start here; see {SLURM_DIR / 'munged.log'}") from None
        state.save(st)
    return {"SLURM_CONF": str(conf)}


def running(pid: int | None) -> bool:
    return bool(pid) and any(word.endswith("munged") for word in procs.cmdline(pid)[:1])


def stop(st: state.LabState | None) -> None:
    """End this machine's munged for the lab (down)."""
    if st is not None and running(st.slurm_client_pid):
        procs.end([st.slurm_client_pid])  # type: ignore[list-item]
    shutil.rmtree(SLURM_DIR, ignore_errors=True)
