"""Which value most nodes share: the one rule both consistency comparisons (versions, GEMM checksums) blame by.

Nodes are grouped by their value and the groups ranked by size; the nodes off the largest group are the odd
ones, unless the two largest groups are the same size: a tie, where there is no majority to blame anyone against.
"""

from __future__ import annotations

from collections import Counter

SHOW_NODES = 8


def grouped(values: dict[str, str]) -> tuple[dict[str, list[str]], list[tuple[str, int]]]:
    """(value -> its nodes, in the order met; [(value, node count)] largest first)."""
    groups: dict[str, list[str]] = {}
    for node, value in values.items():
        groups.setdefault(value, []).append(node)
    return groups, Counter({value: len(nodes) for value, nodes in groups.items()}).most_common()


def tied(ranked: list[tuple[str, int]]) -> bool:
    """Whether the two largest groups are the same size (no majority)."""
    return len(ranked) > 1 and ranked[0][1] == ranked[1][1]


def names(nodes: list[str]) -> str:
    """Nodes as a reason lists them: the first SHOW_NODES, then how many more."""
    shown = ", ".join(nodes[:SHOW_NODES])
    return shown + (f" and {len(nodes) - SHOW_NODES} more" if len(nodes) > SHOW_NODES else "")
