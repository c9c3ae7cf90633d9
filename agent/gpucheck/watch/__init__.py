"""`gpucheck watch`: a long-running watcher on each node (docs/watch.md). It follows the kernel log as it is written
and polls NVML's cheap fields; a change runs only the checks it concerns, with `gpucheck node`'s verdicts, and
drains in Slurm at once through drain_rule's table (path `watch`)."""
