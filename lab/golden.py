"""`lab build`: provision one fresh host with the playbook and keep its filesystem as a layer.

So that N hosts don't each compile Horovod on 2 cores: the build host's overlay upper directory,
minus what identifies that one host, becomes a read-only layer between the base and every later
host's own upper directory (`lowerdir=golden:base`).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from lab import cluster, compute, config, images, state
from lab.errors import EXIT_FAIL, LabError
from lab.host import LAB_KEY_COMMENT
from lab.playbook import run_playbook
from lab.progress import fmt_duration, say, step
from lab.run import run

# What the lab writes into every host at each start, or mounts over: never part of an image.
HOST_ONLY = (
    "etc/hostname", "etc/machine-id", "etc/hosts", "etc/resolv.conf", "etc/ssh/ssh_known_hosts",
    "etc/apt/apt.conf.d/90gpucheck-lab-proxy", "etc/pip.conf", "etc/gpucheck-lab/sshd_config",
    "root/.ssh/id_ed25519", "root/.ssh/id_ed25519.pub", "root/.ssh/known_hosts",
    "etc/systemd/system/ssh.service.d/gpucheck-lab.conf", "var/lib/systemd/random-seed",
    compute.AGENT_ENV_FILE.lstrip("/"), compute.AGENT_SHIM.lstrip("/"),
)
# Caches and leftovers of the run itself.
SCRATCH = ("root/.ansible", "root/.cache", "tmp", "var/tmp")


def build_log(key: str) -> Path:
    """Where the build of image `key` writes ansible-playbook's output as it runs (`tail -f` it), and where it
    stays: after a failure, a success and any later run, the path the build printed is where the log is (kept
    with the images, outside the image itself; removed when its image is pruned)."""
    return config.CACHE_DIR / "logs" / f"golden-{key}.log"


def log_of(key: str) -> Path | None:
    """The log of the build that made image `key`, where it still exists (images built before the logs had
    their own folder keep theirs inside the image)."""
    for path in (build_log(key), images.golden_dir(key) / "playbook.log"):
        if path.is_file():
            return path
    return None


def clean_layer(upper: Path) -> None:
    """Remove from a build host's upper dir everything that belongs to that one host or run."""
    for pattern in ("etc/ssh/ssh_host_*",):
        for path in upper.glob(pattern):
            path.unlink()
    for rel in HOST_ONLY:
        path = upper / rel
        if path.is_file() or path.is_symlink():
            path.unlink()
    for rel in SCRATCH:
        path = upper / rel
        if path.is_dir() and not path.is_symlink():
            for child in path.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    for deb in (upper / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    authorized = upper / "root/.ssh/authorized_keys"
    if authorized.is_file():  # keep what the playbook authorized, drop the lab's own key
        lines = [ln for ln in authorized.read_text().splitlines() if not ln.rstrip().endswith(LAB_KEY_COMMENT)]
        if any(ln.strip() for ln in lines):
            authorized.write_text("\n".join(lines) + "\n")
        else:
            authorized.unlink()
    nvml = upper / config.NVML_PATH.lstrip("/")
    if nvml.is_symlink() and str(nvml.readlink()) == config.LAB_NVML_PATH:  # the lab's, not a driver package's
        nvml.unlink()
    lab_nvml = upper / config.LAB_NVML_PATH.lstrip("/")
    if lab_nvml.is_file() and lab_nvml.stat().st_size == 0:  # only the lab's bind-mount target
        lab_nvml.unlink()
    mount_points = (config.FAKENVML_DIR, config.KERNEL_DIR, compute.HOST_DIR, str(Path(config.LAB_NVML_PATH).parent))
    for directory in mount_points:  # the innermost first
        path = upper / directory.lstrip("/")
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def describe(key: str) -> str:
    meta = images.meta(key)
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(meta.get("built_at", 0)))
    took = fmt_duration(meta.get("build_seconds", 0))
    return f"golden image {key} (built {when} in {took}, {meta.get('size_mb', '?')} MB)"


def build(playbook: Path, fresh: bool = False) -> str:
    cluster.require_root()
    if not playbook.is_file():
        raise LabError(f"no playbook at {playbook} (pass --playbook PATH)")
    key = images.golden_key(playbook)
    if images.find(playbook) and not fresh:
        return up_to_date(key, playbook)
    if state.load() is not None:
        raise LabError("a lab is up: the build needs a fresh host; run `python3 -m lab down` first")
    waiting = f"another lab is building the golden image {key} for {playbook.name}: waiting for it"
    with state.cache_locked(f"golden-{key}", waiting):
        if images.find(playbook) and not fresh:  # the other lab's build, just finished
            return up_to_date(key, playbook)
        return build_locked(playbook, key)


def up_to_date(key: str, playbook: Path) -> str:
    log = log_of(key)
    return (f"{describe(key)} is up to date for {playbook.name}; `build --fresh` rebuilds it"
            + (f"; its build's output: {log}" if log else ""))


def build_locked(playbook: Path, key: str) -> str:
    """The build itself, under the image's lock."""
    begin = time.monotonic()
    log = build_log(key)
    log.parent.mkdir(parents=True, exist_ok=True)
    say(f"building the golden image for {playbook} (key {key}); a full site.yml can take many minutes")
    cluster.up(cluster.UpOptions(hosts=1, golden=False, playbook=playbook))
    try:
        st = state.load_up()
        with step(f"ansible-playbook {playbook.name} on {st.hosts[0].name}", f"task output in {log}"):
            code = run_playbook(playbook, log)
            if code != 0:
                raise LabError(f"the playbook failed (exit {code}); nothing was cached; full log {log}",
                               code=EXIT_FAIL)
        with step("keeping the host's filesystem as the golden image"):
            from lab import host as lab_host

            lab_host.end(st.hosts[0])
            upper = config.host_data_dir(st.hosts[0].name) / "upper"
            clean_layer(upper)
            final = images.golden_dir(key)
            tmp = final.with_name(final.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            try:
                upper.rename(tmp / "layer")
            except OSError:  # another filesystem: copy, keeping overlay xattrs and whiteouts
                run(["cp", "-a", str(upper), str(tmp / "layer")], timeout=3600)
            size = run(["du", "-sm", str(tmp / "layer")], timeout=600).stdout.split()[0]
            (tmp / "meta.json").write_text(json.dumps({
                "key": key, "playbook": str(playbook), "built_at": time.time(),
                "build_seconds": round(time.monotonic() - begin, 1), "size_mb": int(size),
                "base": st.lowers[-1], "log": str(log),
            }, indent=2) + "\n")
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
            for old in images.prune(playbook, keep=key):
                build_log(old).unlink(missing_ok=True)
    finally:
        say(cluster.down())
    return f"{describe(key)} is ready: `python3 -m lab up` hosts now start provisioned; the playbook's output: {log}"
