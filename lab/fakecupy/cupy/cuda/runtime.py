"""cupy.cuda.runtime is cupy_backends.cuda.api.runtime, as in real CuPy."""

from cupy_backends.cuda.api.runtime import *  # noqa: F403
from cupy_backends.cuda.api.runtime import CUDARuntimeError  # noqa: F401
