"""The fake CuPy (lab/fakecupy) stays faithful to the real one: every CuPy name the GPU programs use exists in
both, gemmEx is column-major as cuBLAS is, and memory runs out as on a GPU."""

from __future__ import annotations

import json
import re

import pytest
from gpuwork_helpers import AGENT, environment, last_json, run_python

SOURCES = sorted((AGENT / "gpucheck" / "gpuwork").glob("*.py"))
# name as written in the programs -> the module it is looked up in
USES = {r"\bcp\.([A-Za-z_][\w.]*)": "cupy", r"\bnvtx\.(\w+)": "cupy.cuda.nvtx", r"\bnccl\.([\w.]+)": "cupy.cuda.nccl",
        r"\bcublas\.(\w+)": "cupy_backends.cuda.libs.cublas"}

RESOLVE = """
import importlib, json, sys
names = json.loads(sys.argv[1])
missing, unloadable = [], set()
for module_name, dotted in names:
    try:
        obj = importlib.import_module(module_name)
    except Exception:
        unloadable.add(module_name)
        continue
    if module_name == "cupy.cuda.nccl" and not getattr(obj, "available", False):
        unloadable.add(module_name)
        continue
    for part in dotted.split("."):
        if not hasattr(obj, part):
            missing.append(f"{module_name}.{dotted}")
            break
        obj = getattr(obj, part)
print(json.dumps({"missing": missing, "unloadable": sorted(unloadable)}))
"""


def used_names() -> list[tuple[str, str]]:
    found = set()
    for source in SOURCES:
        text = source.read_text()
        for pattern, module in USES.items():
            found.update((module, name.rstrip(".")) for name in re.findall(pattern, text))
    return sorted(found)


def resolve(fake: bool) -> dict:
    code = f"import sys; sys.argv[1:] = [{json.dumps(json.dumps(used_names()))}]\n" + RESOLVE
    return last_json(run_python(code, environment(fake=fake)))


def test_the_programs_use_cupy_at_all() -> None:
    names = {f"{module}.{name}" for module, name in used_names()}
    assert {"cupy.matmul", "cupy.cuda.runtime.memGetInfo", "cupy.cuda.nccl.NcclCommunicator.initAll",
            "cupy_backends.cuda.libs.cublas.gemmEx", "cupy.cuda.nvtx.RangePush"} <= names


@pytest.mark.parametrize("fake", [True, False], ids=["fake", "real"])
def test_every_cupy_name_the_programs_use_exists(fake: bool) -> None:
    """In the real CuPy too (cuBLAS and NCCL only where their libraries load: not on a machine without CUDA)."""
    found = resolve(fake)
    assert found["missing"] == []
    if fake:
        assert found["unloadable"] == []


GEMM_EX = """
import json
import numpy as np
import cupy as cp
from cupy_backends.cuda.libs import cublas
from gpucheck.gpuwork import gemm

rng = np.random.default_rng(3)
a_host = rng.standard_normal((64, 64), dtype=np.float32)
b_host = rng.standard_normal((64, 64), dtype=np.float32)
out = {}
for dtype, data_type, compute, convert in (
        ("fp32", gemm.CUDA_R_32F, gemm.CUBLAS_COMPUTE_32F, lambda x: x),
        ("bf16", gemm.CUDA_R_16BF, gemm.CUBLAS_COMPUTE_32F, gemm.bf16_bits)):
    a, b = cp.asarray(convert(a_host)), cp.asarray(convert(b_host))
    c = cp.empty((64, 64), dtype=a.dtype)
    gemm.gemm_ex(cp, a, b, c, 64, data_type, compute)()
    cp.cuda.runtime.deviceSynchronize()
    result = c.get()
    if dtype == "bf16":
        result = (result.astype(np.uint32) << 16).view(np.float32)
        a_host_used = (gemm.bf16_bits(a_host).astype(np.uint32) << 16).view(np.float32)
        b_host_used = (gemm.bf16_bits(b_host).astype(np.uint32) << 16).view(np.float32)
    else:
        a_host_used, b_host_used = a_host, b_host
    # cuBLAS is column-major: the row-major arrays are the transposes, so C (row-major) = B @ A
    out[dtype] = float(np.max(np.abs(result - b_host_used @ a_host_used)))
print(json.dumps(out))
"""


def test_gemm_ex_is_column_major_as_cublas() -> None:
    errors = last_json(run_python(GEMM_EX, environment()))
    assert errors["fp32"] < 1e-3
    assert errors["bf16"] < 0.5  # bf16 rounding of the result (8 significant bits)


@pytest.mark.gpu
def test_gemm_ex_is_column_major_on_the_real_gpu() -> None:
    errors = last_json(run_python(GEMM_EX, environment(fake=False)))
    assert errors["fp32"] < 1e-3 and errors["bf16"] < 0.5


OUT_OF_MEMORY = """
import json
import cupy as cp
free0, total = cp.cuda.runtime.memGetInfo()
big = cp.empty(40 * 2**20, dtype=cp.uint8)
free1 = cp.cuda.runtime.memGetInfo()[0]
try:
    cp.empty(40 * 2**20, dtype=cp.uint8)
    refused = None
except MemoryError as exc:
    refused = type(exc).__name__
del big
free2 = cp.cuda.runtime.memGetInfo()[0]
try:
    import numpy as np
    np.asarray(cp.zeros(2))
    implicit = "allowed"
except TypeError:
    implicit = "refused"
print(json.dumps([free0, free1, free2, total, refused, implicit]))
"""


def test_fake_memory_runs_out_and_comes_back_like_a_gpus() -> None:
    free0, free1, free2, total, refused, implicit = last_json(run_python(OUT_OF_MEMORY, environment()))
    assert free0 == 64 * 2**20 and total > free0
    assert free1 == free0 - 40 * 2**20
    assert refused == "OutOfMemoryError"
    assert free2 == free0
    assert implicit == "refused"  # as CuPy: device arrays reach numpy only through .get()


MODELLED = """
import json, time
import cupy as cp
from gpucheck.gpuwork import gemm
found = {}
for device in (0, 1):
    with cp.cuda.Device(device):
        for dtype in ("bf16", "fp32"):
            found[f"{device} {dtype}"] = gemm.measure(cp, dtype, 128, 10)
        call = gemm.gemm_call(cp, "fp32", 128)
        began = time.perf_counter()
        call()
        found[f"{device} launch_s"] = time.perf_counter() - began
        cp.cuda.runtime.deviceSynchronize()
print(json.dumps(found))
"""


def test_a_gpu_on_the_modelled_clock_measures_its_set_speed_and_a_slowed_one_ten_percent_less() -> None:
    """FAKECUPY_TFLOPS: each GEMM takes its flops at that rate, whatever the CPU; FAKECUPY_SPEED names the second
    GPU by its CUDA_VISIBLE_DEVICES entry, as a worker sees it. A launch returns before its GEMM's time is up."""
    rate = 0.00005  # 2 x 128^3 flops in 84 ms: numpy needs well under 1 ms, and a late wake-up is a small part
    env = environment(CUDA_VISIBLE_DEVICES="GPU-aaaa,GPU-bbbb", FAKECUPY_TFLOPS=str(rate),
                      FAKECUPY_SPEED="GPU-bbbb:0.9")
    found = last_json(run_python(MODELLED, env))
    # A late wake-up (a loaded machine) only ever makes a GEMM slower, never faster: each figure is at most its
    # modelled rate and a few percent under it, and the slowed GPU about 0.9 of its sibling.
    for dtype in ("bf16", "fp32"):
        for device, expected in ((0, rate), (1, 0.9 * rate)):
            assert 0.95 * expected <= found[f"{device} {dtype}"] <= 1.001 * expected, (device, dtype, found)
        assert found[f"1 {dtype}"] / found[f"0 {dtype}"] == pytest.approx(0.9, abs=0.04), found
    assert found["0 launch_s"] < 0.5 * 2 * 128**3 / (rate * 1e12)
