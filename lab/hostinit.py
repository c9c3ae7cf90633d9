#!/usr/bin/env python3
"""The supervisor of one lab host, which boots it with systemd (standard library only; the lab starts it with
the controller's Python).

It is started as
    unshare --mount --propagation private python3 -I hostinit.py SPEC.json --gpucheck-lab
so its mounts are its own. It mounts the host's overlay root, writes the host's own files (hostname,
machine id, /etc/hosts, SSH keys, the sshd and apt/pip proxy config), then boots the root with
    systemd-nspawn --boot --network-namespace-path=/run/netns/gclab-NAME --register=no --keep-unit ...
so systemd is the host's PID 1, in the host's network namespace, with what the lab shares in (the simulated
NVML library, the scenario directory) bound read-only. sshd and every daemon the playbook installs run as
systemd units. A reboot inside the host (systemd-nspawn exits 133) boots it again, with a fresh boot id,
as a real machine comes back; any other end of the host ends this supervisor.

Signals: SIGTERM (or SIGINT, SIGHUP) halts the host: systemd-nspawn passes it on to systemd as a clean
poweroff. If this process dies anyway, systemd-nspawn gets SIGTERM from the kernel (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

SPEC: dict = {}
NSPAWN: dict[str, subprocess.Popen[bytes]] = {}
REBOOT_EXIT = 133  # systemd-nspawn's exit status when the container rebooted (systemd-nspawn(1))
PR_SET_PDEATHSIG = 1
HALTING: dict[str, bool] = {}
CGROUP_FS = "/sys/fs/cgroup"
CGROUPS: list[tuple[str, str]] = []  # (the cgroup this process came from, the host's own) per hierarchy


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] hostinit {SPEC.get('hostname', '?')}: {message}", flush=True)


def sh(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}")


def inside(path: str) -> str:
    return os.path.join(SPEC["root"], path.lstrip("/"))


def mount_root() -> None:
    sh("mount", "--make-rprivate", "/")
    opts = f"lowerdir={':'.join(SPEC['lowers'])},upperdir={SPEC['upper']},workdir={SPEC['work']}"
    sh("mount", "-t", "overlay", "overlay", "-o", opts, SPEC["root"])
    # systemd-nspawn keeps its lock and mount-propagation directories here: on a tmpfs of this mount namespace
    # they vanish with the host, whatever the machine's /run is.
    os.makedirs(SPEC["nspawn_run"], exist_ok=True)
    sh("mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "gclab-nspawn", SPEC["nspawn_run"])


def write_files() -> None:
    for item in SPEC["files"]:
        path = inside(item["path"])
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=item.get("dir_mode", 0o755))
        content = item["content"]
        if item.get("merge_marker") and os.path.isfile(path):
            # keep what others (the playbook) put there; replace only the lab's own earlier lines
            with open(path) as fh:
                kept = [line for line in fh.read().splitlines(keepends=True)
                        if line.strip() and not line.rstrip().endswith(item["merge_marker"])]
            if kept and not kept[-1].endswith("\n"):
                kept[-1] += "\n"
            content = "".join(kept) + content
        if os.path.islink(path):
            os.unlink(path)  # e.g. a masked unit's link to /dev/null: the lab's file replaces it
        tmp = path + ".gclab-tmp"
        with open(tmp, "w") as fh:
            fh.write(content)
        os.chmod(tmp, item["mode"])
        os.replace(tmp, path)


def cgroup_places() -> list[tuple[str, str]]:
    """(mount, this process's cgroup) of each hierarchy systemd in a host writes: the unified one and, on a
    legacy or hybrid machine, name=systemd (systemd-nspawn mounts the other v1 controllers read-only)."""
    places = []
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers == "":
                unified_root = os.path.exists(f"{CGROUP_FS}/cgroup.controllers")
                mount = CGROUP_FS if unified_root else f"{CGROUP_FS}/unified"
            elif controllers == "name=systemd":
                mount = f"{CGROUP_FS}/systemd"
            else:
                continue
            if os.path.isdir(mount):
                places.append((mount, path))
    return places


def remove_cgroup(path: str) -> None:
    for directory, _, _ in os.walk(path, topdown=False):
        with contextlib.suppress(OSError):  # still has processes: left to the next boot
            os.rmdir(directory)


def own_cgroup() -> None:
    """Move this process, and so systemd-nspawn (--keep-unit leaves it in its caller's cgroup) and the host's
    systemd below it, into a cgroup of the host's own. Hosts started side by side in one cgroup share one tree:
    node02's unit ending removes the cgroup node01's same unit is entering (status=219/CGROUP at boot)."""
    for mount, path in cgroup_places():
        came_from = os.path.join(mount, path.lstrip("/"))
        mine = os.path.join(came_from, SPEC["cgroup"])
        remove_cgroup(mine)  # what a boot that did not end cleanly left
        os.makedirs(mine, exist_ok=True)
        with open(os.path.join(mine, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
        CGROUPS.append((came_from, mine))


def leave_cgroups() -> None:
    for came_from, mine in CGROUPS:
        try:
            with open(os.path.join(came_from, "cgroup.procs"), "w") as fh:
                fh.write(str(os.getpid()))
        except OSError:
            continue
        remove_cgroup(mine)
    remove_pod_cgroups()


def controller_places(own: str) -> list[str]:
    """Where each v1 controller's tree is for a host this process boots: systemd-nspawn mounts the tree of the
    controller's cgroup it was started in (OWN: /proc/self/cgroup's text) as the host's /sys/fs/cgroup/CONTROLLER."""
    places = []
    for line in own.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            mount = os.path.join(CGROUP_FS, controller)
            if controller and not controller.startswith("name=") and os.path.isdir(mount):
                places.append(os.path.normpath(os.path.join(mount, path.lstrip("/"))))
    return places


def remove_pod_cgroups() -> None:
    """A Kubernetes node's pods' cgroups, which its kubelet makes in the v1 controllers' trees the host sees (the
    machine's, where the lab runs in the root cgroups): empty once the host's processes ended."""
    name = SPEC.get("pod_cgroup")
    if not name:
        return
    with open("/proc/self/cgroup") as fh:
        own = fh.read()
    for place in controller_places(own):
        remove_cgroup(os.path.join(place, name))


def nspawn_argv() -> list[str]:
    argv = [
        "systemd-nspawn", "--boot", f"--directory={SPEC['root']}", f"--machine={SPEC['hostname']}",
        f"--network-namespace-path={SPEC['netns_path']}",
        # no systemd-machined or bus on the machine: run in this process's cgroup, register nowhere
        "--register=no", "--keep-unit",
        # the lab writes these files itself (a host has no DNS; its clock is the machine's)
        "--resolv-conf=off", "--timezone=off", "--link-journal=no", "--console=passive",
        # root on a node reads the kernel log (gpu.xid runs dmesg); systemd-nspawn drops this capability
        "--capability=CAP_SYSLOG",
        *(f"--capability={cap}" for cap in SPEC.get("capabilities", [])),
    ]
    argv += [f"--bind{'' if b.get('writable') else '-ro'}={b['source']}:{b['target']}" for b in SPEC["binds"]]
    return argv


def die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def boot() -> int:
    """Boot the host and wait until it ends; its exit status."""
    proc = subprocess.Popen(nspawn_argv(), stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
    NSPAWN["proc"] = proc
    log(f"booting (systemd-nspawn pid {proc.pid})")
    return proc.wait()


def make_links() -> None:
    """Links the lab puts in place only where nothing is yet: a package may take the path over (the driver's
    alternative takes libnvidia-ml.so.1), and what it put there is kept at the next boot."""
    for item in SPEC.get("links", []):
        path = inside(item["path"])
        if not os.path.lexists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.symlink(item["target"], path)


def installed_driver() -> str | None:
    """The driver version the installed driver package says (its fake NVML's scenario file), if any."""
    try:
        with open(inside(SPEC["kernel"]["driver_scenario"])) as fh:
            lines = fh.read().splitlines()
    except (OSError, KeyError):
        return None
    values = [line.split("=", 1)[1].split("#", 1)[0].strip() for line in lines
              if line.split("=", 1)[0].strip() == "driver_version" and "=" in line]
    return values[-1] if values else None


def load_module() -> None:
    """The nvidia module this boot loads: the installed driver package's, as DKMS builds it and the boot loads it
    on a real node; none when no driver is installed. Two files say it inside the host, under the kernel bind:
    what /proc/driver/nvidia/version would say (inventory/lab points the driver role at it: /proc cannot hold it
    here) and the fake NVML's kernel_module_version (a node's scenario reads it, so NVML reports a version
    mismatch after a driver upgrade until the reboot)."""
    kernel = SPEC.get("kernel")
    if not kernel:
        return
    version = installed_driver()
    files = {kernel["file"]: f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  (gpucheck lab: the "
                             "installed driver package's version at boot; no kernel module)\n",
             kernel["scenario"]: f"# the loaded module (lab, at boot)\nkernel_module_version = {version}\n"}
    for name, text in files.items():
        path = os.path.join(kernel["dir"], name)
        if version is None:
            if os.path.exists(path):
                os.unlink(path)
            continue
        with open(path + ".tmp", "w") as fh:
            fh.write(text)
        os.replace(path + ".tmp", path)


def on_signal(signum: int, _frame: object) -> None:
    HALTING["yes"] = True
    proc = NSPAWN.get("proc")
    log(f"halting the host (signal {signum})")
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # systemd-nspawn: a clean poweroff of the host
        return
    sys.exit(0)


def main() -> int:
    with open(sys.argv[1]) as fh:
        SPEC.update(json.load(fh))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        mount_root()
        write_files()
        make_links()
        own_cgroup()
        remove_pod_cgroups()  # what a host killed with its pods left
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        log(f"FAILED: {exc}")
        return 1
    try:
        return boot_until_halted()
    finally:
        leave_cgroups()


def boot_until_halted() -> int:
    while True:
        try:
            load_module()
        except OSError as exc:
            log(f"FAILED: {exc}")
            return 1
        code = boot()
        if code == REBOOT_EXIT and not HALTING:
            log("the host rebooted: booting it again")
            continue
        log(f"the host ended (systemd-nspawn exit {code})")
        return 0 if HALTING else (code or 1)


if __name__ == "__main__":
    sys.exit(main())
