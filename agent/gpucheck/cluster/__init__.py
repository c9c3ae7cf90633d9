"""`gpucheck cluster`: read the Ansible inventory, run `gpucheck node` on every host (over SSH or through Slurm),
compare the nodes, run the cluster stages, write the handoff report (docs/architecture.md has the map)."""
