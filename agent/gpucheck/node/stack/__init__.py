"""The installed stack as the node checks see it: the CUDA, cuDNN, NCCL and MPI libraries the frameworks
load, the frameworks themselves per virtualenv (TensorFlow, Horovod, PyTorch), their extension links and the pins."""
