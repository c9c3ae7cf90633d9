"""What the libraries' own version functions answer, as version strings (pure functions)."""

from __future__ import annotations

import re
from typing import Any


def cudart_version(code: int) -> str:
    """cudaRuntimeGetVersion: 1000*major + 10*minor (12020 -> '12.2')."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def cudnn_version(code: int) -> str:
    """cudnnGetVersion: 10000*major + 100*minor + patch since cuDNN 9 (90100 -> '9.1.0'),
    1000*major + 100*minor + patch before (8907 -> '8.9.7')."""
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def nccl_version(code: int) -> str:
    """ncclGetVersion: 10000*major + 100*minor + patch since NCCL 2.9 (22105 -> '2.21.5'),
    1000*major + 100*minor + patch before (2708 -> '2.7.8')."""
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


MPI_PATTERNS = [
    ("Open MPI", re.compile(r"Open MPI v?(\d+(?:\.\d+)*)")),
    ("MVAPICH", re.compile(r"MVAPICH2? Version:?\s*(\d+(?:\.\d+)*\w*)")),
    ("Intel MPI", re.compile(r"Intel\(R\) MPI Library (\d+(?:\.\d+)*)")),
    ("MPICH", re.compile(r"MPICH Version:?\s*(\d+(?:\.\d+)*\w*)")),
]


def mpi_version(text: str) -> tuple[str | None, str | None]:
    """MPI_Get_library_version's string -> (implementation, version), e.g. ('Open MPI', '4.1.4')."""
    for implementation, pattern in MPI_PATTERNS:
        match = pattern.search(text or "")
        if match:
            return implementation, match.group(1)
    first = (text or "").strip().splitlines()[:1]
    return (first[0][:80] if first else None), None


def decode(key: str, raw: Any) -> tuple[str | None, str | None]:
    """(version, implementation) from a version function's raw answer; key is a LIBRARIES key."""
    if key == "mpi":
        implementation, version = mpi_version(str(raw))
        return version, implementation
    decoder = {"cudart": cudart_version, "cudnn": cudnn_version, "nccl": nccl_version}[key]
    return decoder(int(raw)), None
