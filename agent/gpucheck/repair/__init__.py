"""gpucheck's own repairs of a node it drained: the plan (which repair a fault gets), the repairs themselves, the
proof before the node returns, and what the node remembers of them (docs/watch.md "Repair, proof, return")."""
