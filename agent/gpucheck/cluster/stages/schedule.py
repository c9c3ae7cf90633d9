"""Which pairs of nodes test the network together, and which node to blame for a slow pair. Pure.

round_robin: the circle method. With n nodes (a bye added when n is odd), node 0 stays put and the
others rotate one place per round: every pair meets exactly once, no node is in two pairs of a
round, so each round runs in parallel without two tests sharing a node.

suspects/blame: the second pass of a pairwise test (as in Google's cluster-health-scanner). A slow
pair says only that one of two nodes (or the path between them) is slow; re-testing each member
against known-good partners names the node that is slow with every partner."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

Pair = tuple[str, str]


def pair(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)


def round_robin(nodes: Sequence[str]) -> list[list[Pair]]:
    """n-1 rounds of n/2 disjoint pairs for even n; n rounds of (n-1)/2 pairs (one bye each) for odd n."""
    players: list[str | None] = list(nodes)
    if len(players) < 2:
        return []
    if len(players) % 2:
        players.append(None)  # whoever meets None sits this round out
    n = len(players)
    rounds = []
    for _ in range(n - 1):
        matches = [(players[i], players[n - 1 - i]) for i in range(n // 2)]
        rounds.append([(a, b) for a, b in matches if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def sample(rounds: list[list[Pair]], keep: int | None) -> list[list[Pair]]:
    """`keep` rounds spread evenly over the schedule (--network-sample): on a large cluster each
    node still meets `keep` partners spread over the whole rotation, not only its neighbours."""
    if keep is None or keep >= len(rounds):
        return rounds
    if keep <= 0:
        return []
    step = len(rounds) / keep
    return [rounds[int(i * step)] for i in range(keep)]


def disjoint_rounds(pairs: Sequence[Pair]) -> list[list[Pair]]:
    """Lay pairs out, in their order, in rounds where no node is in two pairs: a round runs at once."""
    rounds: list[list[Pair]] = []
    todo = list(pairs)
    while todo:
        busy: set[str] = set()
        this_round, later = [], []
        for a, b in todo:
            if a in busy or b in busy:
                later.append((a, b))
            else:
                this_round.append((a, b))
                busy.update((a, b))
        rounds.append(this_round)
        todo = later
    return rounds


@dataclass
class RetestPlan:
    slow_pairs: list[Pair]
    suspects: list[str]  # nodes of slow pairs that are not known-good
    good: list[str]  # in a fast pair, and every slow pair of theirs has a worse partner
    rounds: list[list[Pair]]  # (suspect, good partner) pairs; disjoint within a round
    untestable: list[str] = field(default_factory=list)  # suspects with no known-good partner left


@dataclass
class Blame:
    bad: dict[str, list[tuple[str, float]]]  # node -> [(partner, value)]: slow with every partner
    cleared: list[str]  # suspects fast with every partner
    inconclusive: dict[str, str]  # node -> why it could not be decided
    slow_paths: list[Pair]  # slow pairs with neither node to blame: the link/switch between them


def _normalise(results: Mapping[Pair, float]) -> dict[Pair, float]:
    return {pair(a, b): value for (a, b), value in results.items()}


def suspects(pair_results: Mapping[Pair, float], threshold: float, partners: int = 2) -> RetestPlan:
    """pair_results: (a, b) -> measured bandwidth; a pair below `threshold` is slow.

    In a full round-robin every node meets a bad node once, so "in a slow pair" alone clears nobody.
    A node is known-good when it is in a fast pair and each of its slow pairs is explained by a
    partner in more slow pairs than itself. The other nodes of slow pairs are the suspects, each
    planned against up to `partners` known-good nodes (ones it has not met yet first)."""
    results = _normalise(pair_results)
    slow = sorted(p for p, v in results.items() if v < threshold)
    slow_count = {n: 0 for p in results for n in p}
    for a, b in slow:
        slow_count[a] += 1
        slow_count[b] += 1
    in_fast = {n for p, v in results.items() if v >= threshold for n in p}

    def explained(node: str) -> bool:
        return all(slow_count[other] > slow_count[node] for p in slow if node in p for other in p if other != node)

    good = sorted(n for n in slow_count if n in in_fast and explained(n))
    suspect_list = sorted({n for p in slow for n in p} - set(good))
    wanted: dict[str, list[str]] = {}
    for s in suspect_list:
        fresh = [g for g in good if pair(s, g) not in results]
        wanted[s] = (fresh + [g for g in good if g not in fresh])[:partners]
    untestable = [s for s, chosen in wanted.items() if not chosen]
    rounds = disjoint_rounds([(s, g) for s, chosen in wanted.items() for g in chosen])
    return RetestPlan(slow, suspect_list, good, rounds, untestable)


def blame(plan: RetestPlan, retest_results: Mapping[Pair, float], threshold: float) -> Blame:
    """Given the re-test measurements, the node slow with every known-good partner is the bad one."""
    results = _normalise(retest_results)
    bad: dict[str, list[tuple[str, float]]] = {}
    cleared: list[str] = []
    inconclusive: dict[str, str] = {s: "no known-good partner to re-test against" for s in plan.untestable}
    for s in plan.suspects:
        if s in inconclusive:
            continue
        measured = [(g, results[pair(s, g)]) for r in plan.rounds for (x, g) in r if x == s and pair(s, g) in results]
        if not measured:
            inconclusive[s] = "no re-test result"
        elif all(v < threshold for _, v in measured):
            bad[s] = measured
        elif all(v >= threshold for _, v in measured):
            cleared.append(s)
        else:
            inconclusive[s] = "slow with some known-good partners, fast with others: " + ", ".join(
                f"{g} {v:g}" for g, v in measured)
    # A slow pair with neither node blamed nor undecided: the link or switch path between them.
    slow_paths = [p for p in plan.slow_pairs if not any(n in bad or n in inconclusive for n in p)]
    return Blame(bad, cleared, inconclusive, slow_paths)
