"""Where a job's ranks go: nodes in rank order, each with its number of ranks. Shared by the jobs that start
over SSH (jobs.py) and through Slurm (slurm/jobs.py), and how a failed rank is traced to its node."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Layout:
    """Ranks on nodes, in rank order (mpirun --map-by slot fills each host's slots in turn)."""

    slots: list[tuple[str, int]]  # (node, ranks)

    @property
    def ranks(self) -> int:
        return sum(n for _, n in self.slots)

    def node_of(self, rank: int) -> str | None:
        for node, count in self.slots:
            if rank < count:
                return node
            rank -= count
        return None
