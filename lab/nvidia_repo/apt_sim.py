"""Real apt in a configuration of its own: its sources, lists, cache and preferences live in a work directory,
so `apt-get update` and `apt-get install --simulate` run against the stand-in repository without reading or
touching the machine's apt state. Only the dpkg status (default the machine's, so that its installed packages
satisfy dependencies; or a copy with packages marked installed) is shared, read-only.

apt never installs anything here: installs are always --simulate.
"""

from __future__ import annotations

import getpass
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .model import NvidiaRepoError

APT_TIMEOUT_S = 120
MACHINE_STATUS = Path("/var/lib/dpkg/status")
# `apt-get -s` prints "Inst NAME [OLD] (NEW ORIGIN [ARCH])" per package it would unpack.
INST = re.compile(r"^Inst (\S+?)(?::\w+)? (?:\[(\S+)\] )?\((\S+) ", re.MULTILINE)
INDEX_ONLY = ("Filename", "Size", "MD5sum", "SHA1", "SHA256", "SHA512")


@dataclass
class Simulation:
    returncode: int
    output: str
    installs: dict[str, str] = field(default_factory=dict)  # name -> version apt would unpack
    upgrades: dict[str, str] = field(default_factory=dict)  # name -> version it replaces

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class IsolatedApt:
    """apt with SOURCES (sources.list lines) and PREFERENCES (an apt_preferences text), all under WORKDIR."""

    def __init__(self, workdir: Path, sources: list[str], preferences: str = "", status: Path = MACHINE_STATUS):
        self.root = Path(workdir)
        etc, state, cache = self.root / "etc", self.root / "state", self.root / "cache"
        for d in (etc / "sources.list.d", etc / "apt.conf.d", etc / "preferences.d", etc / "trusted.gpg.d",
                  state / "lists" / "partial", cache / "archives" / "partial", self.root / "log"):
            d.mkdir(parents=True, exist_ok=True)
        (etc / "sources.list").write_text("".join(f"{line}\n" for line in sources))
        (etc / "preferences").write_text(preferences)
        (etc / "apt.conf").write_text("")
        user = "root" if os.geteuid() == 0 else getpass.getuser()
        settings = {
            "Dir::Etc::Main": etc / "apt.conf", "Dir::Etc::Parts": etc / "apt.conf.d",
            "Dir::Etc::SourceList": etc / "sources.list", "Dir::Etc::SourceParts": etc / "sources.list.d",
            "Dir::Etc::Preferences": etc / "preferences", "Dir::Etc::PreferencesParts": etc / "preferences.d",
            "Dir::Etc::Trusted": etc / "trusted.gpg", "Dir::Etc::TrustedParts": etc / "trusted.gpg.d",
            "Dir::State": state, "Dir::State::Lists": state / "lists", "Dir::State::status": Path(status),
            "Dir::Cache": cache, "Dir::Log": self.root / "log",
            "Debug::NoLocking": "true", "APT::Sandbox::User": user, "Acquire::Languages": "none",
            "Acquire::http::Proxy": "DIRECT", "Acquire::https::Proxy": "DIRECT",
        }
        text = "".join(f'{key} "{value}";\n' for key, value in settings.items())
        self.conf = self.root / "apt-isolated.conf"
        self.conf.write_text(text + 'APT::Architectures { "amd64"; };\n')

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, APT_CONFIG=str(self.conf), LC_ALL="C", DEBIAN_FRONTEND="noninteractive")
        try:
            return subprocess.run(["apt-get", *args], capture_output=True, text=True, timeout=APT_TIMEOUT_S,
                                  env=env, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NvidiaRepoError(f"apt-get {args[0]} could not run: {exc}") from exc

    def update(self) -> subprocess.CompletedProcess[str]:
        """apt-get update; a source whose signature does not verify makes it fail (exit 100)."""
        return self.run("update", "--error-on=any")

    def simulate(self, *args: str, recommends: bool = False) -> Simulation:
        """apt-get --simulate ARGS (e.g. "install", "nvidia-smi=535.261.03*"): what apt would unpack."""
        done = self.run("--simulate", "--yes", "-o", f"APT::Install-Recommends={'true' if recommends else 'false'}",
                        *args)
        output = done.stdout + done.stderr
        sim = Simulation(done.returncode, output)
        for name, old, new in INST.findall(done.stdout):
            sim.installs[name] = new
            if old:
                sim.upgrades[name] = old
        return sim


def stanzas(packages_file: Path) -> list[dict[str, str]]:
    """The entries of a Packages (or status) file, fields in order (continuation lines kept)."""
    entries = []
    for block in Path(packages_file).read_text().split("\n\n"):
        entry: dict[str, str] = {}
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and entry:
                last = next(reversed(entry))
                entry[last] += "\n" + line
            elif ":" in line:
                key, _, value = line.partition(":")
                entry[key] = value.strip()
        if entry:
            entries.append(entry)
    return entries


def status_with(dest: Path, packages_files: list[Path], installed: dict[str, str], held: set[str] = frozenset(),
                base: Path = MACHINE_STATUS) -> Path:
    """DEST: a dpkg status file that is BASE plus INSTALLED (name -> version, taken from PACKAGES_FILES) marked
    installed, those in HELD on hold: the machine as it would be after an install, for a second simulation."""
    found: dict[str, dict[str, str]] = {}
    for packages in packages_files:
        for entry in stanzas(packages):
            if installed.get(entry.get("Package", "")) == entry.get("Version"):
                found[entry["Package"]] = entry
    missing = sorted(set(installed) - set(found))
    if missing:
        raise NvidiaRepoError(f"not in the repositories at the versions given: {', '.join(missing)}")
    text = Path(base).read_text().rstrip("\n") + "\n\n"
    for name, entry in found.items():
        want = "hold" if name in held else "install"
        fields = [("Package", name), ("Status", f"{want} ok installed")]
        fields += [(k, v) for k, v in entry.items() if k not in ("Package", *INDEX_ONLY)]
        text += "".join(f"{k}: {v}\n" for k, v in fields) + "\n"
    dest.write_text(text)
    return dest
