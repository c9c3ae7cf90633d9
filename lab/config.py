"""Names and places of the lab. A machine can hold several labs side by side (the test suite runs two at once):
GPUCHECK_LAB_INSTANCE (0 to 9, default 0) says which one a command means. Instance 0 has the plain names; instance
K its own prefix, bridge, subnet, state directories, process tag and inventory (inventory/lab-K). The caches (base
root filesystem, golden images) are the machine's, shared by every instance."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

INSTANCE_ENV = "GPUCHECK_LAB_INSTANCE"
MAX_INSTANCE = 9


def instance_from(value: str | None) -> int:
    """The instance GPUCHECK_LAB_INSTANCE names; ValueError (its one line) for anything but 0 to 9."""
    text = (value or "").strip() or "0"
    if not text.isdigit() or int(text) > MAX_INSTANCE:
        raise ValueError(f"{INSTANCE_ENV} must be a number from 0 to {MAX_INSTANCE}, not {value!r}")
    return int(text)


try:
    INSTANCE, INSTANCE_ERROR = instance_from(os.environ.get(INSTANCE_ENV)), ""
except ValueError as exc:  # every command refuses to run (state.locked, cli): never another instance's lab
    INSTANCE, INSTANCE_ERROR = 0, str(exc)
SUFFIX = f"-{INSTANCE}" if INSTANCE else ""

# Every namespace and link of the lab starts with it; no instance's prefix starts another's.
PREFIX = f"gc{INSTANCE}lab" if INSTANCE else "gclab"
BRIDGE = f"{PREFIX}0"
TAG = f"--gpucheck-lab={INSTANCE}" if INSTANCE else "--gpucheck-lab"  # an argument of every lab process

RUN_DIR = Path(f"/run/gpucheck-lab{SUFFIX}")  # state, keys, known_hosts, logs, mount points
DATA_DIR = Path(f"/var/lib/gpucheck-lab{SUFFIX}")  # per-host overlay upper/work dirs (can grow to GBs)
CACHE_DIR = Path("/var/cache/gpucheck-lab")  # base rootfs and golden images, kept between runs, shared
LOCK_FILE = Path(f"/run/gpucheck-lab{SUFFIX}.lock")

STATE_FILE = RUN_DIR / "state.json"
KEY_FILE = RUN_DIR / "id_ed25519"
KNOWN_HOSTS = RUN_DIR / "known_hosts"
PROXY_LOG = RUN_DIR / "proxy.log"
LAB_INVENTORY_DIR = REPO_ROOT / "inventory" / "lab"  # its group_vars are every instance's
INVENTORY_DIR = REPO_ROOT / "inventory" / f"lab{SUFFIX}"
INVENTORY = INVENTORY_DIR / "hosts.yml"
DEFAULT_PLAYBOOK = REPO_ROOT / "site.yml"

# A private /24 that nothing on the build machines uses (checked against `ip route` at `up`).
DEFAULT_SUBNET = f"10.213.{7 + INSTANCE}.0/24"
PROXY_PORT = 3128
# The bridge's name on every lab host (its /etc/hosts): the stand-in NVIDIA repository is served there by this
# name, so a golden image built by one lab instance names the right server in every other.
BRIDGE_HOST = "lab-bridge"
NVIDIA_REPO_PORT = 3129  # the stand-in NVIDIA repository's server, on the bridge address (lab/standin_repo.py)
HOST_OFFSET = 10  # node01 gets .11, node02 .12, ...
MAX_HOSTS = 64
DEFAULT_SCENARIO = "dgx-h100"  # what checks/lab.yaml expects: simulated DGX H100 hosts

# The NVML library path of Debian's and NVIDIA's driver packages on x86_64: a link, which the lab points at its own
# fake library (LAB_NVML_PATH, bound read-only) until a driver package's alternative takes it over
# (lab/nvidia_repo: the stand-in libnvidia-ml1 carries the same fake library).
NVML_PATH = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
LAB_NVML_PATH = "/usr/lib/gpucheck-lab/libnvidia-ml.so.1"
FAKENVML_DIR = "/etc/fakenvml"
# What the installed driver package says NVML answers (its version): every node's scenario ends by reading it
# (`include_if_present`), so NVML follows apt. The stand-in libnvidia-ml1 installs it.
DRIVER_SCENARIO = "/usr/lib/x86_64-linux-gnu/nvidia/current/gpucheck-fakenvml-driver.scn"
# The loaded kernel module's version file, as /proc/driver/nvidia/version reads on a real node (the lab has no
# kernel module, and /proc cannot hold it): written by hostinit.py at each boot from the installed driver package
# (a reboot loads the installed driver); inventory/lab points the driver role at it.
KERNEL_DIR = "/etc/gpucheck-lab/kernel"
MODULE_VERSION_FILE = "nvidia-version"
# ... and the same for the fake NVML, which fails init with a version mismatch while the installed driver is not
# the loaded one (upgraded, not yet rebooted), as the real library does: a node's scenario reads it after
# DRIVER_SCENARIO.
MODULE_SCENARIO_FILE = "module.scn"
# The host's simulated PCI bus (its scenario's GPUs), inside FAKENVML_DIR; the agent reads it through
# GPUCHECK_SYSFS_ROOT, which the host's sshd sets for every session.
FAKE_SYSFS_DIR = f"{FAKENVML_DIR}/sys"
SYSFS_ENV = "GPUCHECK_SYSFS_ROOT"


# The lab's admin node (inventory group admin, as in inventory/prod): no GPUs; it runs slurmctld when site.yml's
# scheduler stage is on (inventory/lab: whenever the lab has an admin node). Its address is the one before node01.
ADMIN_HOST = "admin01"


def host_name(index: int) -> str:
    """Hostname of the index-th lab host (1-based): node01, node02, ..."""
    return f"node{index:02d}"


def netns_name(host: str) -> str:
    return f"{PREFIX}-{host}"


def cgroup_name(host: str) -> str:
    """The cgroup the host's systemd-nspawn runs in, under the lab's own (lab/hostinit.py: own_cgroup)."""
    return f"{PREFIX}-{host}"


def veth_name(host: str) -> str:
    """Host-side end of the host's veth pair (Linux limits link names to 15 characters)."""
    return f"{PREFIX}v-{host}"[:15]


def host_run_dir(host: str) -> Path:
    return RUN_DIR / "hosts" / host


def host_data_dir(host: str) -> Path:
    return DATA_DIR / "hosts" / host
