"""Stage `shape`: blame that follows the cluster's shape (docs/shape.md). The inventory's host variables `rack`,
`leaf_switch` and `pdu` say which nodes share a component; when the nodes that failed or warned, in their own
checks or in any stage before this one, gather behind one component beyond what chance explains, the report names
the component ("rack B: 3 of 4 nodes ..."), not each node alone. The network stage's slow pairs are read the same
way against the leaf switches, and so are the nodes whose InfiniBand error counters rose in this run (ib.counters'
`rose`), within their limits or past them: ports behind one switch moving together point at the switch, where
each node alone looks healthy. Warn, never fail: the nodes' own verdicts stand; this says what they share.

Beyond chance: at least 2 bad nodes (or slow pairs) there, at least half of the component's, and either every one
of its nodes and no other node of the cluster, or a chance below CHANCE_MAX of so many landing there if the bad
ones were spread at random (the hypergeometric tail, the same count drawn from the cluster without replacement).
Pure: it reads the context only."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

from ...model import Result, Status
from ..context import ClusterContext, ClusterResult

CHECK = "cluster.shape"
IB_COUNTERS = "ib.counters"  # the node check whose `rose` says which ports' error counters moved
ROSE = "nodes whose InfiniBand error counters rose"
COMPONENTS = ("rack", "leaf_switch", "pdu")  # the inventory variables, as the report names them
LABEL = {"rack": "rack", "leaf_switch": "leaf switch", "pdu": "PDU"}
CHANCE_MAX = 0.01  # a 1-in-100 draw: a 26-node cluster with 4 bad nodes, 3 of them in one 4-node rack, is 0.6 %
BAD = (Status.FAIL, Status.WARN)
SHOWN_MAX = 8  # items named in a reason (a rack's nodes; a switch's slow pairs are many)
REMEDIATION = ("look at what the nodes share before replacing parts of each: the rack's cooling and power, the "
               "PDU's load and breakers, the leaf switch's uplinks, cables and error counters")


@dataclass(frozen=True)
class Cluster:
    """Where bad things gathered: `bad` of `members` behind one component, `total_bad` of `total` in all."""

    kind: str  # rack | leaf_switch | pdu
    name: str
    members: tuple[Hashable, ...]  # node names, or pairs of them
    bad: tuple[Hashable, ...]
    total: int
    total_bad: int
    chance: float
    what: str  # "nodes" or "pairs"

    def text(self) -> str:
        outside = self.total_bad - len(self.bad)
        named = [item if isinstance(item, str) else "-".join(item) for item in self.bad]
        shown = ", ".join(named[:SHOWN_MAX]) + (f" and {len(named) - SHOWN_MAX} more" if len(named) > SHOWN_MAX else "")
        return (f"{LABEL[self.kind]} {self.name}: {len(self.bad)} of {len(self.members)} {self.what} ({shown}), "
                f"{outside} of {self.total - len(self.members)} elsewhere (by chance: {self.chance:.2%})")

    def nodes(self) -> set[str]:
        return {n for item in self.bad for n in ([item] if isinstance(item, str) else item)}


def chance_at_least(total: int, total_bad: int, drawn: int, bad: int) -> float:
    """P(X >= bad) for X hypergeometric: `drawn` of `total` items, `total_bad` of them bad."""
    ways = math.comb(total, drawn)
    return sum(math.comb(total_bad, k) * math.comb(total - total_bad, drawn - k)
               for k in range(bad, min(drawn, total_bad) + 1)) / ways


def gathered(kind: str, groups: dict[str, list[Hashable]], bad: set[Hashable], what: str = "nodes") -> list[Cluster]:
    """The components whose members hold more of the bad items than chance explains. `groups`: component ->
    its items (nodes, or pairs of nodes); an item may sit behind two components (a pair's two ends)."""
    items = {item for members in groups.values() for item in members}
    total, total_bad = len(items), len(bad & items)
    found = []
    for name, members in sorted(groups.items()):
        hit = tuple(m for m in members if m in bad)
        if len(hit) < 2 or 2 * len(hit) < len(members) or len(members) == total:
            continue
        chance = chance_at_least(total, total_bad, len(members), len(hit))
        if chance < CHANCE_MAX or (len(hit) == len(members) == total_bad):
            found.append(Cluster(kind, name, tuple(members), hit, total, total_bad, chance, what))
    return found


def components(ctx: ClusterContext, nodes: list[str]) -> dict[str, dict[str, list[str]]]:
    """kind -> component -> its nodes, from the hosts' inventory variables (a node without one is in none)."""
    found: dict[str, dict[str, list[str]]] = {}
    for host in ctx.inventory.hosts:
        if host.name in nodes:
            for kind in COMPONENTS:
                if host.vars.get(kind):
                    found.setdefault(kind, {}).setdefault(str(host.vars[kind]), []).append(host.name)
    return found


def bad_nodes(ctx: ClusterContext, nodes: list[str]) -> dict[str, list[str]]:
    """node -> the checks it failed or warned in: its own, and the stages' results that name it."""
    found: dict[str, list[str]] = {}
    for name in nodes:
        report = ctx.nodes[name].report or {}
        own = [str(r.get("check")) for r in report.get("results") or [] if isinstance(r, dict)
               and r.get("status") in {s.value for s in BAD}]
        if own or ctx.nodes[name].status in BAD:
            found[name] = own or ["its own verdict"]
    for result in ctx.results:
        if result.status in BAD and result.check != CHECK:
            for name in getattr(result, "nodes", {}) or {}:
                if name in nodes:
                    found.setdefault(name, []).append(result.check)
    return found


def slow_pairs(ctx: ClusterContext) -> tuple[dict[str, list[Hashable]], set[Hashable]]:
    """leaf switch -> the network stage's pairs with an end behind it, and the slow ones: `warn`, slow with nobody to
    blame (a pair that failed has an end the network stage blamed: that node explains it, and is left out)."""
    leaf = {h.name: str(h.vars["leaf_switch"]) for h in ctx.inventory.hosts if h.vars.get("leaf_switch")}
    groups: dict[str, list[Hashable]] = {}
    slow: set[Hashable] = set()
    for pair in ctx.pairs:
        if pair.get("a") not in leaf or pair.get("b") not in leaf or pair.get("status") == "fail":
            continue
        key = (pair["a"], pair["b"])
        for switch in sorted({leaf[pair["a"]], leaf[pair["b"]]}):
            groups.setdefault(switch, []).append(key)
        if pair.get("status") == "warn":
            slow.add(key)
    return groups, slow


def counters_rose(ctx: ClusterContext, nodes: list[str]) -> set[Hashable]:
    """The nodes whose InfiniBand error counters rose since their last run (their report's ib.counters)."""
    found: set[Hashable] = set()
    for name in nodes:
        for result in (ctx.nodes[name].report or {}).get("results") or []:
            if isinstance(result, dict) and result.get("check") == IB_COUNTERS and isinstance(
                    result.get("measured"), dict) and result["measured"].get("rose"):
                found.add(name)
    return found


def shared_checks(found: dict[str, list[str]], nodes: tuple[Hashable, ...]) -> str:
    """What the nodes have in common: the checks every one of them failed or warned in."""
    common = set.intersection(*(set(found[str(n)]) for n in nodes))
    return f"all in {', '.join(sorted(common))}" if common else "different checks"


def shape_stage(ctx: ClusterContext) -> list[Result]:
    nodes = ctx.checked()
    where = components(ctx, nodes)
    if not where:
        return [ClusterResult(CHECK, Status.SKIP, reason="no host has a rack, leaf_switch or pdu variable in the "
                                                         "inventory: the cluster's shape is unknown")]
    found = bad_nodes(ctx, nodes)
    clusters = [c for kind, groups in where.items() for c in gathered(kind, groups, set(found))]
    pair_groups, slow = slow_pairs(ctx)
    clusters += gathered("leaf_switch", pair_groups, slow, "pairs") if pair_groups else []
    named = {c.name for c in clusters if c.kind == "leaf_switch"}  # a switch already blamed is not named twice
    clusters += [c for c in gathered("leaf_switch", where.get("leaf_switch", {}), counters_rose(ctx, nodes), ROSE)
                 if c.name not in named]
    measured = {kind: {name: len(members) for name, members in groups.items()} for kind, groups in where.items()}
    known = ", ".join(f"{len(groups)} {LABEL[kind]}(s)" for kind, groups in where.items())
    if not clusters:
        return [ClusterResult(CHECK, Status.PASS, measured, "failures spread as chance spreads them",
                              f"{len(found)} of {len(nodes)} node(s) failed or warned; none gather behind one of "
                              f"{known}" + (f", nor do {len(slow)} slow pair(s)" if slow else ""))]
    behind = {h.name: h.vars for h in ctx.inventory.hosts}
    blamed: dict[str, str] = {}
    reasons = []
    for c in clusters:
        why = c.text() + (f": {shared_checks(found, c.bad)}" if c.what == "nodes" else "")
        reasons.append(why)
        for name in sorted(c.nodes()):
            if str(behind[name].get(c.kind)) == c.name:  # a slow pair's far end is not behind the switch
                blamed.setdefault(name, why)
    return [ClusterResult(CHECK, Status.WARN, measured, "failures spread as chance spreads them", "; ".join(reasons),
                          REMEDIATION, nodes=blamed)]
