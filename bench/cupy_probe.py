# Provenance: copied unchanged below this header from tools/cupy_probe.py of the project's shared folder (the one
# that sat beside the clone, not in the repository), so that bench/gpu_session.sh can run it on a lent GPU
# machine. It checks whether CuPy does what the burn-in needs (bf16/tf32 cuBLAS gemmEx, fp16/fp32/fp64 matmul,
# HBM copy, pinned host copies, a RawKernel memory test that finds planted faults, NCCL, fp16 GEMM determinism);
# about half a minute on an H100/H200 (8192^3 GEMMs, a pass over 0.85 of free memory). Kept as written: no lint.
# ruff: noqa
"""Probe, on a machine with a CUDA GPU, whether CuPy does what the burn-in needs: bf16/tf32 GEMM through
cuBLAS gemmEx on raw buffers (CuPy has no bfloat16 dtype), fp16/fp32/fp64 matmul, device copy, pinned
host copies, a RawKernel pattern memory test with planted faults, NCCL bindings, GEMM determinism.
Usage on the GPU machine: python3 cupy_probe.py   (prints one CUPYPROBE {json} line). Not yet run: its
figures are yours to take. Written against CuPy 14 and cuBLAS 12/13 (cudaDataType and compute-type
numbers in gemm_ex are from library_types.h and cublas_api.h)."""
import json, time, traceback
import numpy as np
import cupy as cp
out = {"cupy": cp.__version__, "runtime": cp.cuda.runtime.runtimeGetVersion(), "driver": cp.cuda.runtime.driverGetVersion()}
def t(fn, iters=20, warm=3):
    for _ in range(warm): fn()
    cp.cuda.Device().synchronize(); s = cp.cuda.Event(); e = cp.cuda.Event(); s.record()
    for _ in range(iters): fn()
    e.record(); e.synchronize(); return cp.cuda.get_elapsed_time(s, e) / 1000 / iters
def attempt(name, fn):
    try: out[name] = fn()
    except Exception as ex: out[name] = "ERROR " + repr(ex)[:300]
n = 8192
attempt("bf16_dtype", lambda: str(cp.empty(4, dtype="bfloat16").dtype))
def ml_bf16():
    import ml_dtypes; a = cp.asarray(np.ones(4, dtype=ml_dtypes.bfloat16)); return str(a.dtype)
attempt("ml_dtypes_bf16", ml_bf16)
def gemm_ex(dt_name):
    from cupy_backends.cuda.libs import cublas
    from cupy.cuda import device
    h = device.get_cublas_handle()
    R16BF, R16F, R32F = 14, 2, 0  # cudaDataType: CUDA_R_16BF=14, CUDA_R_16F=2, CUDA_R_32F=0
    COMPUTE_32F = 68; COMPUTE_32F_FAST_TF32 = 77
    if dt_name == "bf16":
        a = cp.random.standard_normal((n, n), dtype=cp.float32).view(cp.uint32)
        a = (a >> 16).astype(cp.uint16); b = a.copy(); c = cp.empty((n, n), dtype=cp.uint16); dt, ct = R16BF, COMPUTE_32F
    elif dt_name == "tf32":
        a = cp.random.standard_normal((n, n), dtype=cp.float32); b = a.copy(); c = cp.empty_like(a); dt, ct = R32F, COMPUTE_32F_FAST_TF32
    one = np.array(1.0, dtype=np.float32); zero = np.array(0.0, dtype=np.float32)
    f = lambda: cublas.gemmEx(h, 0, 0, n, n, n, one.ctypes.data, a.data.ptr, dt, n, b.data.ptr, dt, n, zero.ctypes.data, c.data.ptr, dt, n, ct, -1)
    return round(2 * n**3 / t(f) / 1e12, 1)
attempt("gemmEx_bf16_TFLOPS", lambda: gemm_ex("bf16"))
attempt("gemmEx_tf32_TFLOPS", lambda: gemm_ex("tf32"))
def g(dt):
    a = cp.random.standard_normal((n, n), dtype=cp.float32).astype(dt); b = a.copy()
    return round(2 * n**3 / t(lambda: a @ b) / 1e12, 1)
attempt("matmul_fp16_TFLOPS", lambda: g(cp.float16))
attempt("matmul_fp32_TFLOPS", lambda: g(cp.float32))
attempt("matmul_fp64_TFLOPS", lambda: g(cp.float64))
def hbm():
    x = cp.empty(1 << 30, dtype=cp.float32); y = cp.empty_like(x)
    return round(2 * x.nbytes / t(lambda: y.__setitem__(Ellipsis, x)) / 1e9)
attempt("hbm_copy_GBps", hbm)
def h2d():
    nbytes = 1 << 30
    mem = cp.cuda.alloc_pinned_memory(nbytes); d = cp.cuda.alloc(nbytes)
    f = lambda: cp.cuda.runtime.memcpyAsync(d.ptr, mem.ptr, nbytes, cp.cuda.runtime.memcpyHostToDevice, 0)
    g_ = lambda: cp.cuda.runtime.memcpyAsync(mem.ptr, d.ptr, nbytes, cp.cuda.runtime.memcpyDeviceToHost, 0)
    return [round(nbytes / t(f, 10) / 1e9, 1), round(nbytes / t(g_, 10) / 1e9, 1)]
attempt("h2d_d2h_pinned_GBps", h2d)
def memtest():
    k = cp.RawKernel(r'''
    extern "C" __global__ void fill_check(unsigned long long* p, unsigned long long n, unsigned long long pat, int mode, unsigned long long* bad) {
      for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long v = mode == 2 ? i : pat;
        if (mode == 0 || mode == 2) p[i] = v; else if (p[i] != (mode == 3 ? i : pat)) atomicAdd(bad, 1ULL);
      }
    }''', "fill_check")
    free, total = cp.cuda.runtime.memGetInfo()
    nwords = int(free * 0.85) // 8
    buf = cp.empty(nwords, dtype=cp.uint64); bad = cp.zeros(1, dtype=cp.uint64)
    s = time.perf_counter()
    for pat in (0x5555555555555555, 0xAAAAAAAAAAAAAAAA, 0, 0xFFFFFFFFFFFFFFFF):
        k((1056,), (256,), (buf, cp.uint64(nwords), cp.uint64(pat), cp.int32(0), bad))
        k((1056,), (256,), (buf, cp.uint64(nwords), cp.uint64(pat), cp.int32(1), bad))
    k((1056,), (256,), (buf, cp.uint64(nwords), cp.uint64(0), cp.int32(2), bad))
    k((1056,), (256,), (buf, cp.uint64(nwords), cp.uint64(0), cp.int32(3), bad))
    cp.cuda.Device().synchronize()
    # plant a fault: change 3 words between fill and verify
    k((1056,), (256,), (buf, cp.uint64(nwords), cp.uint64(0x5555555555555555), cp.int32(0), bad)); cp.cuda.Device().synchronize()
    before = int(bad.get()[0]); buf[12345] = 7; buf[nwords - 1] = 9; buf[999999] = 0
    k((1056,), (256,), (buf, cp.uint64(nwords), cp.uint64(0x5555555555555555), cp.int32(1), bad)); cp.cuda.Device().synchronize()
    return {"bytes": nwords * 8, "s": round(time.perf_counter() - s, 2), "bad_clean": before, "bad_after_plant": int(bad.get()[0]) - before}
attempt("memtest_rawkernel", memtest)
def nccl():
    from cupy.cuda import nccl as N
    uid = N.get_unique_id(); comm = N.NcclCommunicator(1, uid, 0)
    x = cp.ones(1 << 26, dtype=cp.float32); y = cp.empty_like(x)
    f = lambda: comm.allReduce(x.data.ptr, y.data.ptr, x.size, N.NCCL_FLOAT32, N.NCCL_SUM, cp.cuda.Stream.null.ptr)
    tt = t(f, 10)
    return {"nccl_version": N.get_version(), "algbw_GBps_1rank": round(x.nbytes / tt / 1e9), "sum_ok": bool((y == 1).all())}
attempt("nccl", nccl)
def determinism():
    rs = cp.random.RandomState(7); a = rs.standard_normal((n, n), dtype=cp.float32).astype(cp.float16); b = rs.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    c1 = a @ b; c2 = a @ b
    import hashlib
    return {"bitwise_equal": bool((c1.view(cp.uint16) == c2.view(cp.uint16)).all()), "sha256": hashlib.sha256(c1.get().tobytes()).hexdigest()[:16]}
attempt("determinism_fp16", determinism)
print("CUPYPROBE " + json.dumps(out))
