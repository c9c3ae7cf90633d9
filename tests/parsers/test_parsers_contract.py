"""The contract every parser keeps: the registry, ParseError for bad input, no wrong parses.

Every file in ../shared/fixtures/real is listed in FIXTURE_KIND (a new fixture fails
test_every_fixture_is_listed until someone says which parser reads it), parses as its own kind
into strict JSON, and is rejected with ParseError by every other kind.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gpucheck.parsers import PARSERS, ParseError, parse

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "real"

# Which parser reads each real fixture; None: no parser kind reads this tool's output
# (plain `nvidia-smi -q` text and `ldd`), so every kind must reject it.
FIXTURE_KIND: dict[str, str | None] = {
    "dcgm/dcgm-diag-json-nvvs-3.1.0-8gpu-pass-with-warning-prefix-and-nulls.json": "dcgmi",
    "dcgm/dcgmi-diag-r2-p4de-a100-8gpu-all-pass-3.3.3.txt": "dcgmi",
    "horovod-nccl/horovodrun-check-build-v0.18.1-nothing-built-MLSL-horovod1399.txt": "horovod-build",
    "horovod-nccl/horovodrun-check-build-v0.22.1-tf-torch-mpi-gloo-nccl-deepmd.txt": "horovod-build",
    "horovod-nccl/ldd-horovod-torch-mpi_lib_v2-spack-FRAGMENT-horovod3831.txt": None,
    "horovod-nccl/nccl-info-multinode-ib-p2p-direct-pointer-channels-FRAGMENT-nccl1412.txt": "nccl-debug",
    "horovod-nccl/nccl-info-socket-fallback-no-ib-device-FRAGMENT-nccl952.txt": "nccl-debug",
    "ibstat/ibstat-h100-12hca-8xNDR400-active-3eth-down.txt": "ibstat",
    "ibstat/ibstatus-a100-azure-8xHDR200-plus-eth.txt": "ibstat",
    "nccl-tests/a100-8gpu-allreduce-oldformat-superbench.txt": "nccl-tests",
    "nccl-tests/gh200-2node-allreduce-wrong-96-32-at-1MB-FAILED-v2.17.8-nccltests369.txt": "nccl-tests",
    "nccl-tests/h100-2node-16gpu-allreduce-gcp-a3mega.txt": "nccl-tests",
    "nccl-tests/rtx2080ti-4gpu-test-nccl-failure-unhandled-system-error-nccl473.txt": "nccl-tests",
    "nvidia-smi-q/a10-q-535-remapped-rows-uncorrectable-pending.txt": None,
    "nvidia-smi-q/azure-8gpu-q-d-page_retirement-535.txt": None,
    "nvidia-smi-xml/a100-sxm4-80gb-mig-v12.xml": "nvidia-smi-xml",
    "nvidia-smi-xml/tesla-p100-pcie-v11-510-tabs.xml": "nvidia-smi-xml",
    "nvidia-smi-xml/tesla-t4-v11-515.xml": "nvidia-smi-xml",
    "perftest/ib_write_bw-client-roce-dgx-spark-run_infinitely-rail1.txt": "perftest",
    "perftest/ib_write_bw-loopback-8M-MBsec-client+server-superbench.txt": "perftest",
    "perftest/ib_write_bw-post-list-8B-duration-60s-peak0-perftest273.txt": "perftest",
    "topo/dgx-a100-8gpu-nv12-12mlx5-numa3-1-7-5-gengwg.txt": "topo",
    "topo/h100-8gpu-nv18-6nic-nic-legend-broken-cpu-affinity.txt": "topo",
    "topo/v100-sxm2-8gpu-hybrid-cube-mesh-nv1-nv2-no-nic-no-legend-issue37.txt": "topo",
    "xid/a100-xid63-row-remapper-stas00.txt": "xid",
    "xid/fallen-off-bus-multiline-NO-xid-open-module-570-nvsentinel155.txt": "xid",
    "xid/gb200-xid149-xid145-xid144-nvlink-kmsg-no-timestamp-gpud1174-1160.txt": "xid",
    "xid/gpu-xid31-mmu-fault-xid62-then-xid45-storm-chia301.txt": "xid",
}
KINDS = ["nccl-tests", "perftest", "ibstat", "horovod-build", "xid", "topo", "nccl-debug", "dcgmi",
         "nvidia-smi-xml"]


def _garbage(seed: int) -> str:
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(4096)).decode("latin-1")


def test_registry_has_exactly_the_documented_kinds() -> None:
    assert sorted(PARSERS) == sorted(KINDS)


def test_parse_error_is_a_value_error() -> None:
    assert issubclass(ParseError, ValueError)


def test_unknown_kind_is_a_parse_error_listing_known_kinds() -> None:
    with pytest.raises(ParseError) as caught:
        parse("nvidia-smi-text", "anything")
    message = str(caught.value)
    assert "unknown kind 'nvidia-smi-text'" in message
    assert all(kind in message for kind in KINDS)
    assert "\n" not in message


def test_every_fixture_is_listed() -> None:
    present = {str(p.relative_to(REAL)) for p in REAL.rglob("*") if p.is_file() and p.name != "SOURCES.md"}
    assert present == set(FIXTURE_KIND)


@pytest.mark.parametrize("name", [n for n, k in FIXTURE_KIND.items() if k])
def test_fixture_parses_to_strict_json(name: str) -> None:
    result = parse(FIXTURE_KIND[name], (REAL / name).read_text(encoding="utf-8"))
    # Strict JSON: no NaN/Infinity, no sets or tuples sneaking through as other types.
    assert json.loads(json.dumps(result, allow_nan=False)) == result


@pytest.mark.parametrize(
    ("kind", "name"), [(k, n) for n in sorted(FIXTURE_KIND) for k in KINDS if k != FIXTURE_KIND[n]]
)
def test_other_tools_output_is_rejected(kind: str, name: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse(kind, (REAL / name).read_text(encoding="utf-8"))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "text",
    ["", "   \n\t\n", "\r\n", _garbage(1), _garbage(2).encode("latin-1").decode("utf-8", "replace"),
     "ELF\x00\x02\x01\x00", "hello world\nthis is not tool output\n", "{}", "<html><body>502</body></html>"],
    ids=["empty", "whitespace", "crlf-only", "random-bytes", "random-utf8", "nul", "prose", "json", "html"],
)
def test_garbage_is_a_one_line_parse_error(kind: str, text: str) -> None:
    with pytest.raises(ParseError) as caught:
        PARSERS[kind](text)
    assert str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("kind", "name"), [(k, next(n for n, kk in FIXTURE_KIND.items() if kk == k)) for k in KINDS])
def test_own_output_with_binary_junk_is_rejected_as_binary(kind: str, name: str) -> None:
    # A corrupted capture (NUL bytes, random bytes in the middle) is not trusted as tool output.
    text = (REAL / name).read_text(encoding="utf-8")
    for junk in ("\x00" * 4, _garbage(3)):
        corrupted = text[: len(text) // 2] + junk + text[len(text) // 2 :]
        with pytest.raises(ParseError, match="binary data"):
            PARSERS[kind](corrupted)


@pytest.mark.parametrize("kind", KINDS)
def test_bytes_instead_of_text_is_a_parse_error(kind: str) -> None:
    with pytest.raises(ParseError):
        PARSERS[kind](b"GPU0\tGPU1")  # type: ignore[arg-type]
