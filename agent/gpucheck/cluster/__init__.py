"""`gpucheck cluster`: read the Ansible inventory, run `gpucheck node` on every host over SSH, compare
the nodes, run the cluster stages, write the handoff report.

One module per job: inventory (hosts from Ansible) and ssh_args (the ssh options Ansible would pass);
ssh (the one SSH layer) and fanout (`gpucheck node` on every host); context (what the stages share:
options, node outcomes, results) and nodes (questions stages ask about nodes: who takes part, each
node's thresholds from its report, addresses); stages (the ordered list of stages) with consistency and
stragglers (pure comparisons), schedule (pair rounds and blame, pure), pair_bandwidth (measuring a
pair), network (the network stage) and network_verdict (its result, pairs and figures), mpi, allreduce
and smoke (the other stages), jobs (running a workload across nodes) and frameworks (the jobs
--framework picks); handoff (drain list, exit code, the report document), progress, cli.
"""
