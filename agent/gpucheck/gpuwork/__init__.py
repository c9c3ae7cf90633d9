"""The burn-in's GPU programs (docs/burnin.md): run by the node side as child processes of the agent's own
interpreter, one per GPU (`python -m gpucheck.gpuwork.worker`) or one for all GPUs (`gpucheck.gpuwork.p2p`,
`gpucheck.gpuwork.allreduce`). Each prints `GPUCHECK_GPUWORK {json}` lines on standard output.

They import only the standard library, numpy, pynvml, CuPy and each other (never the rest of gpucheck):
they run in a child process and must stay light. CuPy is imported lazily (`device.import_cupy`), so a
machine without it gets a clean `unavailable` event, not a traceback."""
