"""What each stand-in package holds: the files of one package, by the `kind` of its payload in packages.yaml.

Libraries are compiled from standins/*.c with the package's own version compiled in (standin_sources.py); the
daemons (Fabric Manager, DCGM) are in daemons.py. Every package also carries /usr/share/doc/<name>/STAND-IN
saying what it answers and what is still missing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lab import config
from lab.gpus import RESET_LAYER

from .daemons import DAEMON_KINDS
from .model import NvidiaRepoError, Package
from .standin_sources import DEFAULT_CACHE, Entry, compile_library, render

MULTIARCH_LIB = "usr/lib/x86_64-linux-gnu"
MAINTAINER_SCRIPTS = ("preinst", "postinst", "prerm", "postrm")
# What debhelper adds to a package with shared libraries: the loader's cache is rebuilt once dpkg is done.
LDCONFIG_TRIGGER = Entry("DEBIAN/triggers", b"activate-noawait ldconfig\n")
# The directories nvidia-alternative ships (a trailing "/": an empty directory): the alternative's targets
ALTERNATIVE_DIRS = ("etc/nvidia/", "usr/lib/nvidia/current/", "usr/lib/nvidia/current-open/",
                    f"{MULTIARCH_LIB}/nvidia/", "usr/share/nvidia/")
# Beside the fake NVML: the driver it stands for, in fakenvml's scenario keys (a lab node's scenario reads it).
NVML_SCENARIO = config.DRIVER_SCENARIO.lstrip("/")


def numbers(version: str) -> tuple[int, int, int]:
    major, minor, patch = (int(x) for x in version.split(".")[:3])
    return major, minor, patch


def shared_library(directory: str, soname: str, real_name: str, built: Path) -> list[Entry]:
    """The library as its packages install it: the file under its full version, the soname a link to it."""
    return [Entry(f"{directory}/{real_name}", built.read_bytes()), Entry(f"{directory}/{soname}", link=real_name)]


def cuda_dir(pkg: Package) -> str:
    return f"usr/local/cuda-{pkg.params['dot']}"


def cudart_code(dot: str) -> int:
    major, minor = (int(x) for x in dot.split(".")[:2])
    return 1000 * major + 10 * minor


def cudart_header(pkg: Package) -> str:
    return render("cuda_runtime_api.h.in", {"DOT": pkg.params["dot"], "DASH": pkg.params["dash"],
                                            "CUDART_VERSION": cudart_code(pkg.params["dot"])})


def cudart(pkg: Package, cache: Path) -> list[Entry]:
    built = compile_library("cudart.c", "libcudart.so.12", {"cuda_runtime_api.h": cudart_header(pkg)},
                            {"STANDIN_CUDART_VERSION": "CUDART_VERSION"}, cache)
    return [*shared_library(f"{cuda_dir(pkg)}/targets/x86_64-linux/lib", "libcudart.so.12",
                            f"libcudart.so.{pkg.params['cudart']}", built), LDCONFIG_TRIGGER]


def maintainer_scripts(template: str, names: tuple[str, ...], values: dict[str, object]) -> list[Entry]:
    """DEBIAN/<name> for each of NAMES, rendered from standins/<template>.<name>.in."""
    return [Entry(f"DEBIAN/{name}", render(f"{template}.{name}.in", values).encode(), mode=0o755) for name in names]


def ld_conf(pkg: Package, cache: Path) -> list[Entry]:
    """A loader configuration file of the CUDA config-common packages (/etc/ld.so.conf.d/000_cuda.conf ...)."""
    return [Entry(f"etc/ld.so.conf.d/{pkg.payload['ld_conf']}", f"{pkg.payload['ld_path']}\n".encode()),
            LDCONFIG_TRIGGER]


def cuda_alternatives(pkg: Package, cache: Path) -> list[Entry]:
    """cuda-toolkit-X-Y-config-common: the "cuda" and "cuda-12" alternatives that make /usr/local/cuda and
    /usr/local/cuda-12 point at this release (where 000_cuda.conf and 988_cuda-12.conf lead the loader)."""
    dot = pkg.params["dot"]
    values = {"DOT": dot, "MAJOR": dot.split(".")[0], "PRIORITY": cudart_code(dot) // 10}
    return [*maintainer_scripts("cuda-config-common", ("postinst", "prerm"), values), Entry(f"{cuda_dir(pkg)}/"),
            LDCONFIG_TRIGGER]


def cudart_dev(pkg: Package, cache: Path) -> list[Entry]:
    targets = f"{cuda_dir(pkg)}/targets/x86_64-linux"
    return [Entry(f"{targets}/include/cuda_runtime_api.h", cudart_header(pkg).encode()),
            Entry(f"{targets}/lib/libcudart.so", link="libcudart.so.12")]


def nvcc(pkg: Package, cache: Path) -> list[Entry]:
    p = pkg.params
    text = render("nvcc.in", {"DOT": p["dot"], "DASH": p["dash"], "NVCC": p["nvcc"], "BUILT": p["nvcc_built"],
                              "BUILD": p["nvcc_build"], "YEAR": p["nvcc_built"].rsplit("_", 1)[-1]})
    return [Entry(f"{cuda_dir(pkg)}/bin/nvcc", text.encode(), mode=0o755)]


def cudnn_header(version: str) -> str:
    major, minor, patch = numbers(version)
    return render("cudnn_version.h.in", {"MAJOR": major, "MINOR": minor, "PATCH": patch})


def cudnn(pkg: Package, cache: Path) -> list[Entry]:
    version = pkg.payload["library_version"]
    cuda = pkg.version.rsplit("+cuda", 1)[-1]  # "8.9.7.29-1+cuda12.2": the runtime it was built for
    built = compile_library("cudnn.c", f"libcudnn.so.{numbers(version)[0]}",
                            {"cudnn_version.h": cudnn_header(version)},
                            {"STANDIN_CUDNN_CUDART_VERSION": cudart_code(cuda)}, cache)
    return [*shared_library(MULTIARCH_LIB, built.name, f"libcudnn.so.{version}", built), LDCONFIG_TRIGGER]


def cudnn_dev(pkg: Package, cache: Path) -> list[Entry]:
    version = pkg.payload["library_version"]
    major = numbers(version)[0]
    return [Entry(f"usr/include/x86_64-linux-gnu/cudnn_version_v{major}.h", cudnn_header(version).encode())]


def nccl_header(version: str) -> str:
    major, minor, patch = numbers(version)
    code = major * 10000 + minor * 100 + patch if (major, minor) > (2, 8) else major * 1000 + minor * 100 + patch
    return render("nccl.h.in", {"MAJOR": major, "MINOR": minor, "PATCH": patch, "CODE": code})


def nccl(pkg: Package, cache: Path) -> list[Entry]:
    version = pkg.payload["library_version"]
    built = compile_library("nccl.c", "libnccl.so.2", {"nccl.h": nccl_header(version)}, {}, cache)
    return [*shared_library(MULTIARCH_LIB, "libnccl.so.2", f"libnccl.so.{version}", built), LDCONFIG_TRIGGER]


def nccl_dev(pkg: Package, cache: Path) -> list[Entry]:
    return [Entry("usr/include/nccl.h", nccl_header(pkg.payload["library_version"]).encode()),
            Entry(f"{MULTIARCH_LIB}/libnccl.so", link="libnccl.so.2")]


def nvml_scenario(pkg: Package) -> str:
    """What NVML must answer for this driver package (fakenvml's scenario keys)."""
    v = pkg.params["v"]
    return (f"# The driver this package is: what NVML answers for it (lab/scenarios/README.md keys).\n"
            f"driver_version = {v}\nnvml_version = 12.{v}\ncuda_driver_version = {pkg.params['cuda_driver_version']}\n")


def nvml(pkg: Package, cache: Path) -> list[Entry]:
    from lab.fakenvml import FakeNvmlError, build_library  # late: only this payload needs the fake NVML

    try:
        built = Path(build_library()) / "libnvidia-ml.so.1"
    except FakeNvmlError as exc:
        raise NvidiaRepoError(f"the fake NVML for libnvidia-ml1 cannot be built: {exc}") from exc
    current = f"{MULTIARCH_LIB}/nvidia/current"
    return [*shared_library(current, "libnvidia-ml.so.1", f"libnvidia-ml.so.{pkg.params['v']}", built),
            Entry(f"{current}/libnvidia-ml.so", link="libnvidia-ml.so.1"),
            Entry(NVML_SCENARIO, nvml_scenario(pkg).encode())]


def nvidia_smi(pkg: Package, cache: Path) -> list[Entry]:
    """nvidia-smi: its header and --version for this driver, and `-r -i ID` (a GPU reset: the host's scenario and
    its reset layer, lab/gpus.py)."""
    v = pkg.params["v"]
    code = int(pkg.params["cuda_driver_version"])
    cuda = f"{code // 1000}.{(code % 1000) // 10}"
    header = f"| NVIDIA-SMI {v:<23}Driver Version: {v:<13}CUDA Version: {cuda:<9}|"
    text = render("nvidia-smi.in", {"V": v, "NVML": ".".join(v.split(".")[:2]), "CUDA": cuda, "HEADER": header,
                                    "SCENARIO": f"{config.FAKENVML_DIR}/scenario", "RESET_LAYER": RESET_LAYER})
    return [Entry("usr/lib/nvidia/current/nvidia-smi", text.encode(), mode=0o755)]


def alternative(pkg: Package, cache: Path) -> list[Entry]:
    """nvidia-alternative: Debian's maintainer scripts, whose trigger registers the "nvidia" alternative once the
    driver's files are under nvidia/current: its links put libnvidia-ml.so.1, libcuda.so.1 and nvidia-smi on the
    default paths (only for the files that are there, as update-alternatives' slaves)."""
    values = {"V": pkg.params["v"], "BRANCH": pkg.params["branch"]}
    return [*maintainer_scripts("nvidia-alternative", MAINTAINER_SCRIPTS, values),
            Entry("DEBIAN/triggers", render("nvidia-alternative.triggers.in", values).encode()),
            *(Entry(d) for d in ALTERNATIVE_DIRS)]


def placeholder(pkg: Package, cache: Path) -> list[Entry]:
    return []


KINDS: dict[str, Callable[[Package, Path], list[Entry]]] = {
    "placeholder": placeholder, "alternative": alternative, "nvml": nvml, "nvidia-smi": nvidia_smi,
    "cudart": cudart, "cudart-dev": cudart_dev,
    "ld-conf": ld_conf, "cuda-alternatives": cuda_alternatives,
    "nvcc": nvcc, "cudnn": cudnn, "cudnn-dev": cudnn_dev, "nccl": nccl, "nccl-dev": nccl_dev, **DAEMON_KINDS,
}


def stand_in_note(pkg: Package, files: list[Entry]) -> str:
    """/usr/share/doc/<name>/STAND-IN: whose package this stands in for, and what it does and does not hold."""
    kind = pkg.payload["kind"]
    held = "\n".join(f"  /{e.path}" + (f" -> {e.link}" if e.link else "") for e in files) or "  nothing"
    missing = pkg.payload.get("missing", "")
    lines = [f"{pkg.name} {pkg.version}: a stand-in built by the gpucheck lab (lab/nvidia_repo), not NVIDIA's package.",
             f"Control data modelled on: {', '.join(pkg.source)} (lab/nvidia_repo/packages.yaml).",
             f"Stand-in kind: {kind}. It holds:", held]
    if kind == "placeholder":
        lines.append(f"Still missing (a later step of issue 20): {missing or 'the real payload'}.")
    elif missing:
        lines.append(f"Not modelled: {missing}.")
    return "\n".join(lines) + "\n"


def files_for(pkg: Package, cache: Path | None = None) -> list[Entry]:
    """Every file of PKG's stand-in, its STAND-IN note included."""
    kind = pkg.payload.get("kind", "placeholder")
    if kind not in KINDS:
        raise NvidiaRepoError(f"packages.yaml: {pkg.name}: unknown payload kind {kind!r} "
                              f"(known: {', '.join(sorted(KINDS))})")
    files = KINDS[kind](pkg, Path(cache) if cache else DEFAULT_CACHE)
    return [*files, Entry(f"usr/share/doc/{pkg.name}/STAND-IN", stand_in_note(pkg, files).encode())]
