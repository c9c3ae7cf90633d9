/*
 * Stand-in for NVIDIA's libnccl.so.2 (package libnccl2): ncclGetVersion and ncclGetErrorString only, compiled
 * against the stand-in nccl.h that libnccl-dev ships, so the header declares what the library exports.
 */
#include "nccl.h"

#include <stddef.h>

ncclResult_t ncclGetVersion(int *version)
{
    if (version == NULL)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t pncclGetVersion(int *version)
{
    return ncclGetVersion(version);
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    default: return "unknown result code (gpucheck lab stand-in: no collectives)";
    }
}
