"""The GPU burn-in of `gpucheck node --full` (docs/burnin.md): the programs run on every GPU at once,
the host around them, and the verdicts on what they measured."""
