"""`gpucheck cluster`: read the Ansible inventory, run `gpucheck node` on every host over SSH, compare
the nodes, run the cluster stages, write the handoff report.

One module per job: inventory (hosts from Ansible), ssh_args (the ssh options Ansible would pass),
fanout (SSH with Fabric), consistency and stragglers (pure comparisons), schedule (pair rounds and
blame), context (what stages share), stages (the ordered list of cluster stages), verdict (node
status, drain list, exit code, the report document), progress, cli.
"""
