"""Root filesystems of the lab hosts: a Debian 12 base built once with mmdebstrap, cached, plus
per-host overlay directories (and, optionally, a golden layer between the two; see golden.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

from lab import config, progress, state
from lab.errors import LabError

SUITE = "bookworm"
# Just enough for a host Ansible can manage: systemd as its init (with dbus, as every real node has), python3
# for its modules, sshd, the CA bundle for pip, iproute2/procps for operators, netbase (/etc/services,
# /etc/protocols) for OpenMPI. Everything else (OpenMPI, frameworks, ...) is what site.yml installs.
INCLUDE = (
    "systemd", "systemd-sysv", "dbus",
    "python3", "python3-venv", "openssh-server", "openssh-client", "iproute2", "ca-certificates",
    "procps", "netbase",
)
# Units of the base a lab host must not run: timers that would take apt's lock under a playbook (apt-daily)
# or touch the machine's disks (fstrim, e2scrub), and a login prompt on a console nobody reads.
MASKED_UNITS = (
    "apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
    "e2scrub_reap.service", "fstrim.timer", "console-getty.service", "getty@tty1.service",
)
RECIPE = "4"  # bump when customize() changes, so the cached base is rebuilt
PYPI_HOSTS = ("pypi.org", "files.pythonhosted.org")
CONTROLLER_CA = Path("/etc/ssl/certs/ca-certificates.crt")
FALLBACK_SOURCES = (
    f"deb http://deb.debian.org/debian {SUITE} main",
    f"deb http://deb.debian.org/debian {SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {SUITE}-security main",
)


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    stanzas, current, key = [], {}, ""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, ""
        elif line[0] in " \t" and key:
            current[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def parse_debian_sources(files: dict[str, str]) -> list[str]:
    """One-line `deb URI SUITE COMPONENTS` entries for Debian's own archive, from apt source files.

    `files` maps a file name to its text (`.list` one-line format or `.sources` deb822). Only
    entries for this release of Debian itself are kept (not third-party repositories).
    """
    entries: list[str] = []
    for name, text in files.items():
        if name.endswith(".sources"):
            for st in _deb822_stanzas(text):
                if "deb" not in st.get("types", "").split() or st.get("enabled", "yes") == "no":
                    continue
                for uri in st.get("uris", "").split():
                    for suite in st.get("suites", "").split():
                        entries.append(f"deb {uri} {suite} {st.get('components', 'main')}")
        elif name.endswith(".list"):
            for line in text.splitlines():
                line = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
                if len(line) >= 4 and line[0] == "deb":
                    entries.append(" ".join(line))
    keep = []
    for entry in entries:
        _, uri, suite, *_ = entry.split()
        path = urlsplit(uri).path.rstrip("/")
        ours = (suite == SUITE or suite.startswith(SUITE + "-")) and path.endswith(("/debian", "/debian-security"))
        if ours and entry not in keep:
            keep.append(entry)
    return keep


def debian_sources() -> list[str]:
    """The controller's Debian sources (so hosts use the same archive, through the lab proxy)."""
    files: dict[str, str] = {}
    apt = Path("/etc/apt")
    for path in [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*"))]:
        if path.suffix in (".list", ".sources") and path.is_file():
            files[path.name] = path.read_text(errors="replace")
    return parse_debian_sources(files) or list(FALLBACK_SOURCES)


def archive_hosts(sources: list[str]) -> list[str]:
    """Host names the hosts' apt talks to (what the proxy must let through), plus PyPI's."""
    hosts = {urlsplit(entry.split()[1]).hostname or "" for entry in sources}
    return sorted(h for h in hosts if h) + [h for h in PYPI_HOSTS if h not in hosts]


def acquire_conf_files() -> list[Path]:
    """The controller's apt.conf.d files that only say how to reach the archive (Acquire::...).

    Copied into the base so hosts fetch from the archive exactly as this machine does (for
    instance a snapshot mirror needs `Acquire::Check-Valid-Until "false"`).
    """
    keep = []
    for path in sorted(Path("/etc/apt/apt.conf.d").glob("*")):
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        statements = [s.strip() for s in re.sub(r"//[^\n]*|#[^\n]*", "", text).split(";") if s.strip()]
        if statements and all(s.startswith("Acquire::") for s in statements):
            keep.append(path)
    return keep


def base_key(sources: list[str], conf_files: list[Path]) -> str:
    material = {
        "suite": SUITE, "include": INCLUDE, "recipe": RECIPE, "sources": sources,
        "apt_conf": {p.name: p.read_text() for p in conf_files},
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def base_dir(key: str) -> Path:
    return config.CACHE_DIR / f"base-{key}"


def customize(root: Path, conf_files: list[Path]) -> None:
    """Make the fresh tree a base for many hosts: no shared identity, the controller's CA and apt setup."""
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # generated per host at `up`, never shared
    for name in ("etc/hostname", "etc/machine-id", "var/lib/dbus/machine-id"):
        path = root / name
        if path.exists() and not path.is_symlink():
            path.write_text("")
    # This machine's package access may intercept TLS with its own CA: hosts must trust what the
    # controller trusts (pip verifies PyPI through the proxy's CONNECT tunnel).
    if CONTROLLER_CA.is_file():
        local = root / "usr/local/share/ca-certificates"
        local.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CONTROLLER_CA, local / "gpucheck-lab-controller.crt")
        shutil.copyfile(CONTROLLER_CA, root / "etc/ssl/certs/ca-certificates.crt")
    for conf in conf_files:
        shutil.copyfile(conf, root / "etc/apt/apt.conf.d" / conf.name)
    (root / "etc/gpucheck-lab").mkdir(exist_ok=True)
    units = root / "etc/systemd/system"
    for unit in MASKED_UNITS:
        (units / unit).unlink(missing_ok=True)
        (units / unit).symlink_to("/dev/null")


def ensure_base() -> Path:
    """The cached base root filesystem, built with mmdebstrap on first use (~40 s, ~250 MB)."""
    sources = debian_sources()
    conf_files = acquire_conf_files()
    key = base_key(sources, conf_files)
    final = base_dir(key)
    if (final / "root/etc/debian_version").is_file():
        return final / "root"
    with state.cache_locked(f"base-{key}", "another lab is building the base root filesystem: waiting for it"):
        if (final / "root/etc/debian_version").is_file():
            return final / "root"
        return build_base(key, sources, conf_files)


def build_base(key: str, sources: list[str], conf_files: list[Path]) -> Path:
    final = base_dir(key)
    if shutil.which("mmdebstrap") is None:
        raise LabError("mmdebstrap is missing: apt-get install mmdebstrap (see lab/apt-packages.txt)")
    tmp = config.CACHE_DIR / f"base-{key}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log = tmp / "mmdebstrap.log"
    cmd = [
        "mmdebstrap", "--variant=minbase", "--mode=root", f"--include={','.join(INCLUDE)}",
        *(f"--aptopt={p}" for p in conf_files), SUITE, str(tmp / "root"), *sources,
    ]
    with progress.step(f"building the base root filesystem (mmdebstrap, {SUITE})", "about 40 s, once"), \
            open(log, "w") as fh:
        try:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=1800)
        except subprocess.TimeoutExpired as exc:
            raise LabError(f"mmdebstrap did not finish in 30 min; see {log}") from exc
        if proc.returncode != 0:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise LabError(f"mmdebstrap failed (exit {proc.returncode}): {tail[0]} (full log: {log})")
        customize(tmp / "root", conf_files)
        (tmp / "meta.json").write_text(json.dumps(
            {"built_at": time.time(), "sources": sources, "include": INCLUDE, "recipe": RECIPE}, indent=2))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final / "root"


def prepare_host_dirs(host: str) -> tuple[Path, Path]:
    """Fresh, empty overlay upper and work dirs for one host."""
    data = config.host_data_dir(host)
    shutil.rmtree(data, ignore_errors=True)
    upper, work = data / "upper", data / "work"
    upper.mkdir(parents=True)
    work.mkdir()
    return upper, work
