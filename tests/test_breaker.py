"""The circuit breaker (breaker.held): gpucheck's own recent drains, in the order Slurm stamped them, against the
fleet's and each group's limit; and node.yaml's `breaker:` read strictly."""

from __future__ import annotations

import datetime as dt

import pytest

from gpucheck import breaker, config
from gpucheck.config import BreakerSettings
from gpucheck.model import EXIT_FAIL
from gpucheck.slurm import NodeState

NOW = dt.datetime(2026, 11, 29, 18, 30, 0)


def node(name: str, reason: str = "", ago_s: float | None = None) -> NodeState:
    stamp = (NOW - dt.timedelta(seconds=ago_s)).isoformat(timespec="seconds") if ago_s is not None else ""
    return NodeState(name, "IDLE+DRAIN" if reason else "IDLE", reason, reason_at=stamp)


def stamps(nodes: dict[str, NodeState]) -> dict[str, dt.datetime | None]:
    """What drain_rule gives the breaker: each node's drain time where gpucheck drained it."""
    from gpucheck.drain_rule import holder_of

    return {n: breaker.stamped(s) if holder_of(s) in breaker.GPUCHECK_HOLDERS else None for n, s in nodes.items()}


def fleet(*states: NodeState) -> dict[str, NodeState]:
    return {s.name: s for s in states}


WATCH = "gpucheck: watch: gpu.xid GPU 0000:18:00 has fallen off the bus"


def test_the_drain_past_the_fleets_limit_is_held_and_says_how_many():
    nodes = fleet(node("a", WATCH, 60), node("b", "gpucheck: gpu.ecc_errors 2", 30), node("c"), node("d"))
    settings = BreakerSettings(fleet_fraction=0.5)
    said = breaker.held(settings, stamps(nodes), "c", NOW)
    assert said.startswith("held by breaker: 3 of 4 nodes drained by gpucheck within 10 min")
    assert breaker.held(BreakerSettings(fleet_fraction=0.75), stamps(nodes), "c", NOW) is None


def test_only_gpuchecks_recent_drains_count():
    nodes = fleet(node("a", WATCH, 601), node("b", "PSU swap", 30), node("c", "gpucheck: upgrade to r550", 10),
                  node("d"))
    assert breaker.held(BreakerSettings(fleet_fraction=0.25), stamps(nodes), "d", NOW) is None


def test_a_rack_has_a_limit_of_its_own_and_one_node_may_always_go():
    rack = ("B", ("b1", "b2", "b3", "b4"))
    others = (node(f"x{i}") for i in range(8))
    nodes = fleet(node("b1", WATCH, 50), node("b2", WATCH, 40), node("b3"), node("b4"), *others)
    settings = BreakerSettings(fleet_fraction=1.0, group_fraction=0.5, groups={"rack": rack})
    assert breaker.held(settings, stamps(nodes), "b3", NOW).startswith(
        "held by breaker: 3 of 4 nodes of rack B drained by gpucheck")
    alone = fleet(node("solo"))
    assert breaker.held(BreakerSettings(fleet_fraction=0.01), stamps(alone), "solo", NOW) is None


def test_two_drains_at_once_agree_on_which_one_went_past_the_limit():
    """Both watchers drained in the same second; asked again after, each sees the same order: the later name is held."""
    nodes = fleet(node("a", WATCH, 5), node("c", WATCH, 0), node("d", WATCH, 0), node("e"))
    settings = BreakerSettings(fleet_fraction=0.5)
    assert breaker.held(settings, stamps(nodes), "c", NOW) is None
    assert "3 of 4 nodes" in breaker.held(settings, stamps(nodes), "d", NOW)


@pytest.mark.parametrize("text, says", [
    ("breaker: 3", "'breaker' must be a mapping"),
    ("breaker: {fleet_fraction: 0}", "'breaker.fleet_fraction' is 0: a number more than 0, at most 1"),
    ("breaker: {window_s: true}", "'breaker.window_s' is True"),
    ("breaker: {groups: {row: {name: 1, nodes: []}}}", "'breaker.groups' must map rack or leaf_switch"),
    ("breaker: {limit: 3}", "'breaker' has unknown key(s) limit"),
])
def test_a_wrong_breaker_is_one_line_naming_the_key(tmp_path, text, says):
    path = tmp_path / "node.yaml"
    path.write_text(text + "\n")
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_node_yaml_gives_the_breaker_its_groups(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("breaker:\n  window_s: 300\n  groups:\n    rack: {name: B, nodes: [b1, b2]}\n")
    settings = config.load(path).breaker
    assert settings == BreakerSettings(window_s=300.0, groups={"rack": ("B", ("b1", "b2"))})


class Slurmctld:
    """Slurm as drain_rule.tell sees it: drains stamped to the second, by the controller, as they arrive."""

    def __init__(self, *names: str) -> None:
        self.nodes = {name: NodeState(name, "IDLE", "") for name in names}

    def drain(self, name: str, reason: str) -> None:
        stamp = dt.datetime.now().isoformat(timespec="seconds")
        self.nodes[name] = NodeState(name, "IDLE+DRAIN", reason, reason_at=stamp)

    def scontrol(self, args: list[str], node: str = "", doing: str = "") -> str:
        name = args[1].removeprefix("nodename=")
        if args[2] == "state=drain":
            self.drain(name, args[3].removeprefix("reason="))
        else:
            self.nodes[name] = NodeState(name, "IDLE", "")
        return ""


def test_a_drain_made_while_another_node_asks_again_is_seen_before_it_decides(monkeypatch):
    """a and c drained; c asks again while b's drain, made in the same second, is still on its way to slurmctld.
    tell waits until that second is over there before asking: c then sees a, b, c and takes its drain back (asked at
    once it saw a and c only, and kept a drain past the limit)."""
    from gpucheck import drain_rule

    slurm = Slurmctld("a", "b", "c", "d")
    slurm.drain("a", WATCH)
    waits: list[float] = []

    def meanwhile(seconds: float) -> None:  # the time tell waits, in which b's drain reaches slurmctld
        waits.append(seconds)
        slurm.drain("b", WATCH)

    monkeypatch.setattr(drain_rule, "show_node", lambda name: slurm.nodes[name])
    monkeypatch.setattr(drain_rule, "all_nodes", lambda: dict(slurm.nodes))
    monkeypatch.setattr(drain_rule, "scontrol", slurm.scontrol)
    monkeypatch.setattr(breaker.time, "sleep", meanwhile)
    settings = BreakerSettings(fleet_fraction=0.5)
    action = drain_rule.tell("watch", EXIT_FAIL, ["gpu.xid Xid 79 on 0000:18:00"], "c", held_by=settings)
    assert action.verb == "held" and "3 of 4 nodes drained by gpucheck" in action.reason, action
    assert "(its drain taken back)" in action.reason and not slurm.nodes["c"].drained
    assert len(waits) == 1 and 1 + breaker.CLOCK_SKEW_S - 1 < waits[0] <= 1 + breaker.CLOCK_SKEW_S, waits
    assert drain_rule.tell("watch", EXIT_FAIL, ["gpu.xid Xid 79"], "d", held_by=settings).verb == "held"
    assert len(waits) == 1  # held before its drain: nothing made, nothing to wait for


def test_settle_s_is_the_rest_of_the_stamps_second_and_the_clocks_skew():
    stamp = dt.datetime(2026, 11, 29, 18, 30, 0)
    assert breaker.settle_s(stamp, stamp + dt.timedelta(seconds=0.25)) == 1.75
    assert breaker.settle_s(stamp, stamp + dt.timedelta(seconds=3)) == 0.0
    assert breaker.settle_s(None) == 0.0
