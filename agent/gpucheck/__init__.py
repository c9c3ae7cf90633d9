"""gpucheck: prove that GPU servers are ready for distributed training."""

__version__ = "0.1.0"
