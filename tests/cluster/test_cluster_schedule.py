"""The pair schedule (circle method) and the blame logic, exhaustively for small clusters."""

from __future__ import annotations

import itertools

import pytest

from gpucheck.cluster.stages.schedule import blame, disjoint_rounds, pair, round_robin, sample, suspects


def names(n: int) -> list[str]:
    return [f"node{i:02d}" for i in range(1, n + 1)]


@pytest.mark.parametrize("n", range(2, 13))
def test_every_pair_meets_exactly_once_and_no_node_twice_in_a_round(n: int) -> None:
    nodes = names(n)
    rounds = round_robin(nodes)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    met = [pair(a, b) for r in rounds for a, b in r]
    assert sorted(met) == sorted(pair(a, b) for a, b in itertools.combinations(nodes, 2))
    assert len(met) == len(set(met))
    for r in rounds:
        in_round = [x for p in r for x in p]
        assert len(in_round) == len(set(in_round)), f"a node twice in round {r}"
        assert len(r) == n // 2  # n/2 pairs; odd n: (n-1)/2 and one bye
    if n % 2:
        byes = [next(x for x in nodes if all(x not in p for p in r)) for r in rounds]
        assert sorted(byes) == nodes, "each node sits out exactly one round"


def test_fewer_than_two_nodes_have_no_rounds() -> None:
    assert round_robin([]) == []
    assert round_robin(["node01"]) == []


def test_sample_keeps_k_rounds_spread_over_the_schedule() -> None:
    rounds = round_robin(names(16))  # 15 rounds
    kept = sample(rounds, 3)
    assert [rounds.index(r) for r in kept] == [0, 5, 10]
    assert sample(rounds, None) == rounds
    assert sample(rounds, 99) == rounds
    for k in range(1, 16):
        picked = [rounds.index(r) for r in sample(rounds, k)]
        assert len(set(picked)) == k and picked == sorted(picked)


def full_matrix(nodes: list[str], value) -> dict[tuple[str, str], float]:
    return {pair(a, b): value(a, b) for a, b in itertools.combinations(nodes, 2)}


@pytest.mark.parametrize("n", range(3, 13))
def test_the_node_slow_with_every_partner_is_blamed(n: int) -> None:
    nodes = names(n)
    bad = nodes[n // 2]
    speed = lambda a, b: 20.0 if bad in (a, b) else 95.0  # noqa: E731
    for first_pass in (full_matrix(nodes, speed),  # every round
                       {pair(a, b): speed(a, b) for r in sample(round_robin(nodes), 2) for a, b in r}):
        plan = suspects(first_pass, threshold=80.0)
        # a sampled first pass may leave an innocent partner of the bad node suspect: the re-test clears it
        assert plan.suspects == [bad] if len(first_pass) == n * (n - 1) // 2 else bad in plan.suspects
        assert bad not in plan.good and plan.good
        for r in plan.rounds:
            in_round = [x for p in r for x in p]
            assert len(in_round) == len(set(in_round))
        retest = {pair(s, g): speed(s, g) for r in plan.rounds for s, g in r}
        verdict = blame(plan, retest, threshold=80.0)
        assert list(verdict.bad) == [bad]
        assert len(verdict.bad[bad]) == min(2, len(plan.good))
        assert all(v == 20.0 for _, v in verdict.bad[bad])
        assert verdict.cleared == [s for s in plan.suspects if s != bad]
        assert verdict.slow_paths == [] and verdict.inconclusive == {}


def test_two_bad_nodes_are_both_blamed() -> None:
    nodes = names(8)
    bad = {"node02", "node07"}
    speed = lambda a, b: 20.0 if bad & {a, b} else 95.0  # noqa: E731
    plan = suspects(full_matrix(nodes, speed), threshold=80.0)
    assert plan.suspects == sorted(bad)
    retest = {pair(s, g): speed(s, g) for r in plan.rounds for s, g in r}
    assert set(blame(plan, retest, threshold=80.0).bad) == bad


def test_a_slow_path_between_two_good_nodes_blames_neither() -> None:
    nodes = names(6)
    results = full_matrix(nodes, lambda a, b: 30.0 if {a, b} == {"node02", "node05"} else 95.0)
    plan = suspects(results, threshold=80.0)
    assert plan.suspects == ["node02", "node05"] and plan.slow_pairs == [("node02", "node05")]
    assert all(g not in plan.suspects for g in plan.good)
    retest = {pair(s, g): 95.0 for r in plan.rounds for s, g in r}
    verdict = blame(plan, retest, threshold=80.0)
    assert verdict.bad == {}
    assert verdict.cleared == ["node02", "node05"]
    assert verdict.slow_paths == [("node02", "node05")]


def test_mixed_retest_results_are_inconclusive_not_blamed() -> None:
    results = full_matrix(names(6), lambda a, b: 30.0 if {a, b} == {"node01", "node02"} else 95.0)
    plan = suspects(results, threshold=80.0)
    assert plan.suspects == ["node01", "node02"]
    first = plan.rounds[0][0]
    retest = {pair(s, g): 95.0 for r in plan.rounds for s, g in r}
    retest[pair(*first)] = 10.0
    verdict = blame(plan, retest, threshold=80.0)
    assert first[0] in verdict.inconclusive and first[0] not in verdict.bad


def test_two_nodes_have_no_known_good_partner() -> None:
    plan = suspects({("node02", "node01"): 5.0}, threshold=80.0)
    assert plan.untestable == ["node01", "node02"] and plan.rounds == []
    verdict = blame(plan, {}, threshold=80.0)
    assert verdict.bad == {} and set(verdict.inconclusive) == {"node01", "node02"}


def test_disjoint_rounds_keep_the_order_and_never_put_a_node_in_two_pairs_at_once() -> None:
    pairs = [("a", "b"), ("a", "c"), ("d", "e"), ("b", "c"), ("a", "d")]
    rounds = disjoint_rounds(pairs)
    assert rounds == [[("a", "b"), ("d", "e")], [("a", "c")], [("b", "c"), ("a", "d")]]
    assert all(len({n for p in r for n in p}) == 2 * len(r) for r in rounds)
    assert disjoint_rounds([]) == []
