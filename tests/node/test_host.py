"""host.memory never judges RAM against a made-up GPU memory total: a GPU whose memory size NVML did not
read makes the total unknown, and the check says which GPU, which call and why (per_gpu's rule)."""

from __future__ import annotations

from gpucheck.model import Status
from gpucheck.node import host
from gpucheck.profiles import load

H100 = load("dgx-h100")  # RAM at least 2x the GPU memory
GPU_MiB = 81559  # an H100 80GB HBM3 as NVML reports it


def gpu(index: int, **fields) -> dict:
    return {"index": index, "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0", "memory_total_MiB": GPU_MiB,
            "errors": {}, **fields}


def facts(gpus: list[dict], ram_GiB: float = 1200.0) -> dict:
    """7 x 80 GB read = 557 GiB: 1200 GiB of RAM is enough for them (2x), not for all eight (2 x 637)."""
    return {"host": {"ram_GiB": ram_GiB, "cpu_cores_logical": 224, "cpu_cores_physical": 112,
                     "disk_free_GiB": {"/": 400.0}},
            "nvml": {"gpus": gpus}}


def unread_memory(error: str, text: str) -> dict:
    return {"memory": {"call": "nvmlDeviceGetMemoryInfo", "error": error, "text": text}}


def test_a_gpu_whose_memory_was_not_read_makes_host_memory_an_error_not_a_pass():
    gpus = [gpu(i) for i in range(7)] + [gpu(7, memory_total_MiB=None,
                                              errors=unread_memory("NVML_ERROR_UNKNOWN", "Unknown Error"))]
    result = host.memory(facts(gpus), H100)
    assert result.status == Status.ERROR
    assert result.reason == ("total GPU memory unknown: GPU7 (00000000:1F:00.0): memory not read: "
                             "nvmlDeviceGetMemoryInfo answered NVML_ERROR_UNKNOWN (Unknown Error)")
    assert "nvidia-smi" in result.remediation


def test_a_hung_memory_read_is_an_error_naming_the_hang():
    gpus = [gpu(0), gpu(1, memory_total_MiB=None, errors=unread_memory("hung", "did not return within 10 s"))]
    result = host.memory(facts(gpus), H100)
    assert result.status == Status.ERROR
    assert result.reason.endswith("GPU1 (00000000:19:00.0): memory not read: nvmlDeviceGetMemoryInfo hung "
                                  "(did not return within 10 s)")


def test_a_memory_read_answering_hardware_trouble_fails():
    gpus = [gpu(0), gpu(1, memory_total_MiB=None, errors=unread_memory(
        "NVML_ERROR_GPU_IS_LOST", "GPU is lost"))]
    assert host.memory(facts(gpus), H100).status == Status.FAIL


def test_a_memory_size_missing_without_a_reason_is_an_error():
    gpus = [gpu(0), gpu(1, memory_total_MiB=None)]
    result = host.memory(facts(gpus), H100)
    assert result.status == Status.ERROR and "GPU1 (00000000:19:00.0): memory size not reported" in result.reason


def test_every_gpu_read_is_judged_as_before():
    assert host.memory(facts([gpu(i) for i in range(7)]), H100).status == Status.PASS
    short = host.memory(facts([gpu(i) for i in range(8)]), H100)
    assert short.status == Status.FAIL and "1200 GiB RAM < 2 x 637 GiB" in short.reason


def test_a_lost_gpu_is_left_to_gpu_count():
    gpus = [gpu(i) for i in range(7)] + [gpu(7, lost=True, memory_total_MiB=None)]
    assert host.memory(facts(gpus), H100).status == Status.PASS
