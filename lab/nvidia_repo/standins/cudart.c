/*
 * Stand-in for NVIDIA's libcudart.so.12 (package cuda-cudart-X-Y): the runtime's version functions only.
 * STANDIN_CUDART_VERSION is the package's CUDA version as CUDART_VERSION encodes it, 1000*major + 10*minor
 * (12020 = 12.2). Built by lab/nvidia_repo/payloads.py; declared in the stand-in cuda_runtime_api.h.
 */
#include "cuda_runtime_api.h"

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (runtimeVersion == NULL)
        return cudaErrorInvalidValue;
    *runtimeVersion = STANDIN_CUDART_VERSION;
    return cudaSuccess;
}

/* The real runtime answers 0 (and success) where no driver is installed; the stand-in has no driver. */
cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return cudaErrorInvalidValue;
    *driverVersion = 0;
    return cudaSuccess;
}
