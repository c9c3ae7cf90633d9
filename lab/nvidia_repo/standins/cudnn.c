/*
 * Stand-in for NVIDIA's libcudnn.so.8 (package libcudnn8): cuDNN's version functions only.
 * cudnnGetVersion answers CUDNN_VERSION as cuDNN 8's cudnn_version.h defines it: 1000*major + 100*minor + patch
 * (8907 = 8.9.7); cudnnGetCudartVersion the CUDA runtime it was built for (12020 = 12.2).
 */
#include "cudnn_version.h"

#include <stddef.h>

size_t cudnnGetVersion(void);
size_t cudnnGetCudartVersion(void);

size_t cudnnGetVersion(void)
{
    return CUDNN_VERSION;
}

size_t cudnnGetCudartVersion(void)
{
    return STANDIN_CUDNN_CUDART_VERSION;
}
