"""`gpucheck schedule`: the periodic active checks on idle nodes, as Slurm jobs in a low-priority partition that
user jobs preempt (docs/slurm.md, "Scheduled active checks")."""
