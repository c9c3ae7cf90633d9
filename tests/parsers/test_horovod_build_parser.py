"""horovodrun --check-build: the values SOURCES.md lists, then format variations."""

from __future__ import annotations

from gpucheck.parsers import parse
from support import REAL

DEEPMD = "horovod-nccl/horovodrun-check-build-v0.22.1-tf-torch-mpi-gloo-nccl-deepmd.txt"


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def test_full_gpu_build_with_command_line_before_it() -> None:
    r = parse("horovod-build", real(DEEPMD))
    assert r == {
        "version": "0.22.1",
        "frameworks": {"tensorflow": True, "pytorch": True, "mxnet": False},
        "controllers": {"mpi": True, "gloo": True},
        "tensor_operations": {"nccl": True, "ddl": False, "ccl": False, "mpi": True, "gloo": True},
    }


def test_nothing_built_and_old_mlsl_operation() -> None:
    r = parse("horovod-build", real("horovod-nccl/horovodrun-check-build-v0.18.1-nothing-built-MLSL-horovod1399.txt"))
    assert r["version"] == "0.18.1"
    assert r["frameworks"] == {"tensorflow": False, "pytorch": False, "mxnet": False}
    assert r["controllers"] == {"mpi": False, "gloo": False}
    assert r["tensor_operations"] == {"nccl": False, "ddl": False, "mlsl": False, "mpi": False, "gloo": False}


def test_crlf_and_no_version_line() -> None:
    text = real(DEEPMD).replace("Horovod v0.22.1:\n", "").replace("\n", "\r\n")
    r = parse("horovod-build", text)
    assert r["version"] is None
    assert r["frameworks"]["pytorch"] is True and r["tensor_operations"]["nccl"] is True


def test_cut_after_frameworks() -> None:
    text = real(DEEPMD).split("Available Controllers")[0]
    r = parse("horovod-build", text)
    assert r["frameworks"] == {"tensorflow": True, "pytorch": True, "mxnet": False}
    assert (r["controllers"], r["tensor_operations"]) == ({}, {})
