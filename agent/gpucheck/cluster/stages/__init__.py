"""The cluster stages after the fan-out, one module each (consistency, network, mpi, allreduce, smoke,
training, stragglers) with their verdicts; `order.py` is the one list of them, in the order they run."""
