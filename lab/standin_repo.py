"""The stand-in NVIDIA repository on the lab bridge: built at `up` (about a second once its stand-ins are compiled
and cached), served read-only by nvidia_repo/serve.py on the bridge's address, signed by a key the lab keeps
between runs; its fingerprint goes in the inventory the lab writes, as NVIDIA's is in inventory/prod."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from lab import config, procs, state
from lab.errors import LabError
from lab.nvidia_repo import NvidiaRepoError, build
from lab.progress import step
from lab.state import LabState

SERVE = Path(__file__).resolve().parent / "nvidia_repo" / "serve.py"
OUT_DIR = config.RUN_DIR / "nvidia-repo"
KEY_HOME = config.CACHE_DIR / "nvidia-repo-gnupg"  # one key per machine: the fingerprint stays put between labs
COMPILE_CACHE = config.CACHE_DIR / "nvidia-repo-standins"
KEY_NAME = "gpucheck-lab-standin.asc"  # served beside the packages, as NVIDIA serves 3bf863cc.pub
LOG = config.RUN_DIR / "nvidia-repo.log"


def start(st: LabState) -> None:
    """Build the repository and serve it on the bridge; record the URL the hosts reach it by (st.nvidia_repo_url,
    through config.BRIDGE_HOST) and its key's fingerprint."""
    with step("the stand-in NVIDIA repository (build, sign, serve on the bridge)"):
        try:
            # one key and one compile cache for every lab on the machine: one builder at a time
            with state.cache_locked("nvidia-repo", "another lab is building its stand-in NVIDIA repository"):
                built = build(OUT_DIR, key_home=KEY_HOME, cache_dir=COMPILE_CACHE)
        except NvidiaRepoError as exc:
            raise LabError(f"cannot build the stand-in NVIDIA repository: {exc}") from exc
        shutil.copyfile(built.key, built.nvidia / KEY_NAME)
        listen = f"{st.bridge_address}:{config.NVIDIA_REPO_PORT}"
        LOG.unlink(missing_ok=True)
        proc = procs.spawn([sys.executable, "-I", str(SERVE), "--listen", listen, "--directory", str(built.nvidia),
                            config.TAG], LOG)
        st.nvidia_repo_pid = proc.pid
        st.nvidia_repo_url = f"http://{config.BRIDGE_HOST}:{config.NVIDIA_REPO_PORT}/"  # the hosts' name for it
        st.nvidia_repo_fingerprint = built.fingerprint
        state.save(st)
        procs.wait_serving(proc, st.bridge_address, config.NVIDIA_REPO_PORT,
                           "the stand-in NVIDIA repository's server", LOG)


def remove() -> None:
    """What `start` left on disk (its server is a tagged process: `down` ends it with the others)."""
    shutil.rmtree(OUT_DIR, ignore_errors=True)
    LOG.unlink(missing_ok=True)
