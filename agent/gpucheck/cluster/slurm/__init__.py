"""`gpucheck cluster` through Slurm (`--launcher slurm`, `--drain`): the node checks as one srun, the stages'
jobs as srun steps, and the report's drain list applied with scontrol."""
