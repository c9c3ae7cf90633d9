"""What the architecture lists the frameworks were built for mean for a GPU's compute capability
(pure functions)."""

from __future__ import annotations

from ...versions import version_tuple
from .stacks import TENSORFLOW

Arch = tuple[tuple[int, int], bool, bool]  # ((major, minor), has_sass, has_ptx)


def parse_arch(text: str, framework: str) -> Arch | None:
    """'sm_90' / 'compute_90' / '9.0' / '8.6+PTX' -> ((major, minor), has_sass, has_ptx).

    TensorFlow: "x.y" and "compute_xy" include both binary and PTX code, "sm_xy" binary only (its
    configure script says so). PyTorch's get_arch_list(): "sm_xy" binary, "compute_xy" PTX only.
    """
    raw = str(text).strip().lower()
    ptx_suffix = raw.endswith("+ptx")
    raw = raw.removesuffix("+ptx")
    if raw.startswith(("sm_", "compute_")):
        prefix, _, digits = raw.partition("_")
        digits = "".join(ch for ch in digits if ch.isdigit())
        if len(digits) < 2:
            return None
        cc = (int(digits[:-1]), int(digits[-1]))
        if prefix == "sm":
            return cc, True, ptx_suffix
        return cc, framework == TENSORFLOW, True
    parts = version_tuple(raw)
    if len(parts) < 2:
        return None
    return (parts[0], parts[1]), True, framework == TENSORFLOW or ptx_suffix


def coverage(cc: tuple[int, int], archs: list[Arch]) -> str | None:
    """'sass' when binary code runs on this GPU (same major, minor <= the GPU's), 'ptx' when only
    PTX for an older or equal architecture can be JIT-compiled for it, None when nothing runs."""
    if any(sass and a[0] == cc[0] and a[1] <= cc[1] for a, sass, _ in archs):
        return "sass"
    if any(ptx and a <= cc for a, _, ptx in archs):
        return "ptx"
    return None
