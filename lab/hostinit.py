#!/usr/bin/env python3
"""PID 1 of one lab host (standard library only; the lab starts it with the controller's Python).

It is started as
    ip netns exec gclab-nodeNN unshare --mount --uts --pid --fork --propagation private --kill-child \
        python3 -I hostinit.py SPEC.json --gpucheck-lab
so it already sits in the host's own network, mount, UTS and PID namespaces. It then:
mounts the host's overlay root, /proc, /dev (with its own /dev/shm and /dev/pts), /sys and /run;
writes the host's own files (hostname, /etc/hosts, SSH keys, sshd and apt/pip proxy config);
bind-mounts read-only what the lab shares in (the simulated NVML library, the scenario directory);
sets the hostname; and runs `sshd -D` chrooted into that root. It reaps orphans like any init.

Signals: SIGUSR1 stops sshd (host unreachable, processes keep running), SIGUSR2 starts it again,
SIGTERM ends the host. Whatever happens, when this process exits the kernel kills every process of
the host and its mounts disappear with its mount namespace.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

SSHD: dict[str, int] = {}
SPEC: dict = {}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] hostinit {SPEC.get('hostname', '?')}: {message}", flush=True)


def sh(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}")


def inside(path: str) -> str:
    return os.path.join(SPEC["root"], path.lstrip("/"))


def mount_root() -> None:
    root = SPEC["root"]
    sh("mount", "--make-rprivate", "/")
    opts = f"lowerdir={':'.join(SPEC['lowers'])},upperdir={SPEC['upper']},workdir={SPEC['work']}"
    sh("mount", "-t", "overlay", "overlay", "-o", opts, root)
    sh("mount", "-t", "proc", "proc", inside("/proc"))
    sh("mount", "--rbind", "/dev", inside("/dev"))
    sh("mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "shm", inside("/dev/shm"))
    sh("mount", "-t", "devpts", "-o", "newinstance,ptmxmode=0666,mode=0620", "devpts", inside("/dev/pts"))
    sh("mount", "--bind", inside("/dev/pts/ptmx"), inside("/dev/ptmx"))
    sh("mount", "--rbind", "/sys", inside("/sys"))
    mount_cgroups()
    sh("mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "run", inside("/run"))
    for sub in ("sshd", "lock"):
        os.makedirs(inside(f"/run/{sub}"), mode=0o755, exist_ok=True)


def mount_cgroups() -> None:
    """/sys/fs/cgroup as a host with an init system has it: `ip netns exec` gave the host a sysfs of its own,
    without the machine's cgroup mounts, and slurmd will not start without them (it reads the cgroup version
    there even when it tracks processes without cgroups). The machine's own layout: cgroup2 alone, or the
    v1 tmpfs with the name=systemd hierarchy slurmd looks for."""
    target = inside("/sys/fs/cgroup")
    if not os.path.isdir(target):
        return
    with open("/proc/1/mounts") as fh:  # the machine's own (ip netns exec remounted /sys for us)
        unified = any(line.split()[1:3] == ["/sys/fs/cgroup", "cgroup2"] for line in fh)
    if unified:
        sh("mount", "-t", "cgroup2", "cgroup2", target)
        return
    sh("mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "cgroup", target)
    os.makedirs(os.path.join(target, "systemd"), exist_ok=True)
    sh("mount", "-t", "cgroup", "-o", "none,name=systemd", "cgroup", os.path.join(target, "systemd"))


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
        tmp = path + ".gclab-tmp"
        with open(tmp, "w") as fh:
            fh.write(content)
        os.chmod(tmp, item["mode"])
        os.replace(tmp, path)


def bind_shared() -> None:
    for item in SPEC["binds"]:
        target = inside(item["target"])
        if os.path.isdir(item["source"]):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.exists(target):
                open(target, "a").close()
        sh("mount", "--bind", item["source"], target)
        sh("mount", "-o", "remount,bind,ro", target)


def enter_root() -> None:
    os.chroot(SPEC["root"])
    os.chdir("/")
    os.setsid()


def start_sshd() -> None:
    if SSHD.get("pid"):
        return
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    proc = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-e", "-f", SPEC["sshd_config"]],
        preexec_fn=enter_root, env=env, stdin=subprocess.DEVNULL,
    )
    SSHD["pid"] = proc.pid
    log(f"sshd started (pid {proc.pid} in the host)")


def stop_sshd() -> None:
    pid = SSHD.pop("pid", 0)
    if pid:
        os.kill(pid, signal.SIGTERM)
        log("sshd stopped")


def on_signal(signum: int, _frame: object) -> None:
    if signum == signal.SIGUSR1:
        stop_sshd()
    elif signum == signal.SIGUSR2:
        start_sshd()
    else:
        log(f"ending the host (signal {signum})")
        try:
            os.kill(-1, signal.SIGTERM)  # every other process of this PID namespace
        except ProcessLookupError:
            sys.exit(0)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # a moment to exit cleanly; the kernel SIGKILLs the rest
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    time.sleep(0.02)
            except ChildProcessError:
                break
        sys.exit(0)


def reap_forever() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            signal.pause()
            continue
        if pid == SSHD.get("pid"):
            SSHD.pop("pid")
            log(f"sshd exited (status {status})")


def main() -> int:
    with open(sys.argv[1]) as fh:
        SPEC.update(json.load(fh))
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        mount_root()
        write_files()
        bind_shared()
        socket.sethostname(SPEC["hostname"])
        start_sshd()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        log(f"FAILED: {exc}")
        return 1
    log("ready")
    reap_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
