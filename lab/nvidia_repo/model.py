"""The model of NVIDIA's debian12 repository (packages.yaml), read and expanded into one entry per package.

packages.yaml writes the driver packages once for all branches and the CUDA packages once for all releases;
`load` expands those templates and checks every entry: a known citation, a debian12 status, no `{name}` left
unfilled, no package twice at one version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MODEL = Path(__file__).resolve().parent / "packages.yaml"

# How much is known of an entry in NVIDIA's debian12 repository itself (packages.yaml's header says more).
DEBIAN12_STATUSES = ("seen", "not seen", "contradicted")
# Debian policy 5.6.1: lower case letters, digits, + - . ; at least two characters, starting alphanumeric.
PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
PLACEHOLDER = re.compile(r"\{(\w+)\}")
DEFAULT_ARCHITECTURE = "amd64"
PAYLOAD_KEYS = {"ld_conf", "ld_path", "kind", "missing", "library_version"}


class NvidiaRepoError(RuntimeError):
    """The model or the build is wrong (a one-line message)."""


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    architecture: str
    control: dict[str, str]  # the control fields beyond Package/Version/Architecture, as the Packages file has them
    payload: dict[str, str]  # what the package holds: a `kind` (payloads.py) and its settings
    params: dict[str, str]  # its template's variables (driver branch or CUDA release), for the payload
    source: tuple[str, ...]
    note: str = ""
    debian12: str = ""
    archive: str = "nvidia"  # "nvidia", or "debian" for the stand-ins of Debian's own archive

    @property
    def status(self) -> str:
        """The debian12 status word: seen, not seen or contradicted."""
        return next((s for s in sorted(DEBIAN12_STATUSES, key=len, reverse=True) if self.debian12.startswith(s)), "")

    @property
    def filename(self) -> str:
        """NAME_VERSION_ARCH.deb, the epoch left out as dpkg names files."""
        return f"{self.name}_{self.version.split(':', 1)[-1]}_{self.architecture}.deb"


@dataclass
class Model:
    sources: dict[str, str]
    repository: dict[str, str]
    packages: list[Package] = field(default_factory=list)  # NVIDIA's repository
    debian_archive: list[Package] = field(default_factory=list)  # stand-ins of Debian's archive (tests only)

    def find(self, name: str, version: str | None = None) -> Package:
        for pkg in self.packages:
            if pkg.name == name and (version is None or pkg.version == version):
                return pkg
        raise KeyError(f"{name} {version or ''}".strip())


def fill(text: Any, params: dict[str, str], where: str) -> str:
    """TEXT with each {name} replaced from PARAMS; folded YAML lines joined into one line."""
    if text is None or text == "":
        raise NvidiaRepoError(f"packages.yaml: {where}: an empty value")
    def one(match: re.Match[str]) -> str:
        if match[1] not in params:
            raise NvidiaRepoError(f"packages.yaml: {where}: unknown placeholder {{{match[1]}}}")
        return str(params[match[1]])
    return " ".join(PLACEHOLDER.sub(one, str(text)).split())


def expand(entry: dict[str, Any], params: dict[str, str], group: dict[str, Any], archive: str) -> Package:
    """One package from ENTRY, its template filled from PARAMS; GROUP gives what the entry leaves out."""
    where = str(entry.get("name", "?"))
    name = fill(entry["name"], params, where)
    version = entry.get("version", params.get("deb"))
    if version is None:
        raise NvidiaRepoError(f"packages.yaml: {name}: no version")
    payload = {k: fill(v, params, name) for k, v in (entry.get("payload") or {"kind": "placeholder"}).items()}
    return Package(
        name=name,
        version=fill(version, params, name),
        architecture=str(entry.get("architecture", DEFAULT_ARCHITECTURE)),
        control={k: fill(v, params, name) for k, v in (entry.get("control") or {}).items()},
        payload=payload,
        params={k: str(v) for k, v in params.items() if not isinstance(v, list)},
        source=tuple(entry.get("source") or group.get("source") or ()),
        note=" ".join(str(entry.get("note", "")).split()),
        debian12=" ".join(str(entry.get("debian12", group.get("debian12", ""))).split()),
        archive=archive,
    )


def check(model: Model) -> None:
    """Every entry cites known sources, says what is known of it in debian12, and is there once."""
    seen: set[tuple[str, str]] = set()
    for pkg in [*model.packages, *model.debian_archive]:
        if not PACKAGE_NAME.match(pkg.name):
            raise NvidiaRepoError(f"packages.yaml: {pkg.name!r} is not a Debian package name")
        if not pkg.source or any(s not in model.sources for s in pkg.source):
            raise NvidiaRepoError(f"packages.yaml: {pkg.name} {pkg.version}: cites {list(pkg.source)}, "
                                  f"not ids of `sources:`")
        if pkg.archive == "nvidia" and not pkg.status:
            raise NvidiaRepoError(f"packages.yaml: {pkg.name} {pkg.version}: debian12 must start with one of "
                                  f"{', '.join(DEBIAN12_STATUSES)}")
        unknown = sorted(set(pkg.payload) - PAYLOAD_KEYS)
        if unknown:  # a comma in an unquoted YAML flow mapping makes keys of the words after it
            raise NvidiaRepoError(f"packages.yaml: {pkg.name}: unknown payload keys {unknown} (quote values "
                                  f"that hold commas)")
        key = (pkg.name, pkg.version)
        if key in seen:
            raise NvidiaRepoError(f"packages.yaml: {pkg.name} {pkg.version} is there twice")
        seen.add(key)


def load(path: Path = MODEL) -> Model:
    """The model in PATH, expanded and checked."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise NvidiaRepoError(f"cannot read {path}: {exc}") from exc
    model = Model(sources={k: " ".join(str(v).split()) for k, v in doc["sources"].items()},
                  repository={k: str(v) for k, v in doc["repository"].items() if k != "source"})
    for branch in doc["driver_branches"]:
        model.packages += [expand(e, branch, branch, "nvidia") for e in doc["driver_packages"]]
    shared: set[str] = set()  # the config-common packages shared by every CUDA 12 release
    for release in doc["cuda_releases"]:
        for entry in doc["cuda_packages"]:
            pkg = expand(entry, release, release, "nvidia")
            if (pkg.name, pkg.version) not in shared:
                model.packages.append(pkg)
                shared.add((pkg.name, pkg.version))
    model.packages += [expand(e, {}, e, "nvidia") for e in doc["packages"]]
    archive = {"source": ["debian-archive"]}
    standin = {"kind": "placeholder", "missing": "everything: it stands in for Debian's own package so that apt can "
               "resolve in the tests; a lab host installs the real one from Debian's archive"}
    model.debian_archive = [expand({"payload": standin, **e}, {}, archive, "debian") for e in doc["debian_archive"]]
    check(model)
    return model
