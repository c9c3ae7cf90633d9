"""The libraries the node checks look for: how each is named on disk, the version function it
answers to, and what to do when it is missing."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Library:
    key: str  # the profile's name: libraries.required: [cudart, cudnn, nccl, mpi]
    stem: str  # file name before ".so"
    function: str  # the library's own version function
    kind: str  # how to call it: "int_out" (int *version), "size_t" (returns it), "string" (char *, int *)
    remediation: str


LIBRARIES: dict[str, Library] = {
    lib.key: lib for lib in (
        Library("cudart", "libcudart", "cudaRuntimeGetVersion", "int_out",
                "install the CUDA runtime (site.yml --tags gpu, or the stack's nvidia-cuda-runtime-cu12 wheel)"),
        Library("cudnn", "libcudnn", "cudnnGetVersion", "size_t",
                "install cuDNN (site.yml --tags gpu, or the stack's nvidia-cudnn-cu12 wheel)"),
        Library("nccl", "libnccl", "ncclGetVersion", "int_out",
                "install NCCL (site.yml --tags gpu, or the stack's nvidia-nccl-cu12 wheel)"),
        Library("mpi", "libmpi", "MPI_Get_library_version", "string",
                "install the MPI the stack was built against (site.yml --tags mpi)"),
    )
}


def lib_name_regex(stem: str) -> re.Pattern[str]:
    """libmpi.so, libmpi.so.40, libmpi.so.40.30.4 -- not libmpi_cxx.so.40 or libcudart_static.a."""
    return re.compile(rf"^{re.escape(stem)}\.so(\.\d+)*$")
