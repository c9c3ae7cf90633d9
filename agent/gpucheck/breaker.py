"""The circuit breaker: a bad profile, a bad driver or a power event must not empty the cluster. When more nodes
than a set share of the fleet, or of one rack or leaf switch, were drained by gpucheck within a window, gpucheck's
automatic paths (the watcher, the health check, a prolog, a scheduled check) hold further drains and say so.

gpucheck's recent drains are counted in the order they were stamped (then by node name): by Slurm, a drain's
reason time; on Kubernetes, gpucheck's taint's annotation (kubernetes/node_rule). A node whose place in that order,
in the fleet or in one of its groups, is past the limit is held. Every node computes the same order
from the same Slurm state, so two watchers that drained at the same moment agree on which of them went past the
limit: that one takes its drain back (`drain_rule.tell` asks `held` again after draining, once `settle_s` has
passed: Slurm stamps to the second by its own clock, so only when that second is over there has every drain stamped
in it reached slurmctld; asked sooner, two watchers each saw the other's drain missing and both kept theirs). A limit
is max(1, fraction x size): one node of any group may always be drained.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable

from .config import BreakerSettings
from .slurm import NodeState

GPUCHECK_HOLDERS = ("passive", "active", "watch")  # the upgrade drains one node at a time, by plan: not counted
AUTOMATIC_PATHS = ("watch", "health-check", "prolog", "scheduled")  # `cluster --drain` has a person reading it
CLOCK_SKEW_S = 1.0  # how far a node's clock may be from slurmctld's (NTP keeps a cluster's far closer)


def limit(fraction: float, size: int) -> int:
    return max(1, math.floor(fraction * size + 1e-9))


def stamped(node: NodeState) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(node.reason_at)
    except ValueError:
        return None


def settle_s(stamp: dt.datetime | None, now: dt.datetime | None = None) -> float:
    """Seconds until every drain Slurm stamped up to `stamp` is visible to every node, so that the order of those
    drains is final."""
    if stamp is None:
        return 0.0
    over = stamp + dt.timedelta(seconds=1 + CLOCK_SKEW_S)
    return max(0.0, (over - (now or dt.datetime.now())).total_seconds())


def second_look(stamp: dt.datetime | None, ask: Callable[[], str | None], take_back: Callable[[], object],
                now: Callable[[], dt.datetime] = dt.datetime.now) -> str | None:
    """After a drain stamped `stamp` (of a node that was in service): once every drain stamped up to it is visible
    (settle_s), `ask` the breaker again; a drain past its limit now, because another node drained at once came
    first, is taken back: why, or None when it stands."""
    time.sleep(settle_s(stamp, now()))
    if why := ask():
        take_back()
        return why
    return None


def held(settings: BreakerSettings, stamps: dict[str, dt.datetime | None], name: str,
         now: dt.datetime | None = None) -> str | None:
    """Why a drain of node `name` is held ("held by breaker: 3 of 4 nodes of rack B drained by gpucheck within 10
    min"), or None. `stamps` has every node of the fleet (`name` included) with when gpucheck drained it, or None
    where gpucheck holds it not (in service, an admin's, the upgrade's): only gpucheck's own recent drains count.
    `name`, not yet drained by gpucheck, counts as drained now. Its place in the order of those drains decides, in
    the fleet and in each of its groups (node.yaml's breaker.groups). `now` and the stamps: both naive local
    times, or both aware."""
    now = now or dt.datetime.now()
    since = now - dt.timedelta(seconds=settings.window_s)
    order: list[tuple[dt.datetime, str]] = []
    for node, at in stamps.items():
        if node == name and (at is None or at < since):
            at = now  # the drain being decided
        if at is not None and at >= since:
            order.append((at, node))
    order.sort()
    scopes = [(f"{{}} of {len(stamps)} nodes", set(stamps), settings.fleet_fraction)]
    scopes += [(f"{{}} of {len(members)} nodes of {kind.replace('_', ' ')} {group}", set(members),
                settings.group_fraction) for kind, (group, members) in settings.groups.items()]
    for words, members, fraction in scopes:
        ahead = [node for _, node in order if node in members]
        place = ahead.index(name) + 1 if name in ahead else 0
        if place > limit(fraction, len(members)):
            return (f"held by breaker: {words.format(place)} drained by gpucheck within {window(settings.window_s)} "
                    f"(node.yaml breaker: {fraction_words(settings)}); look for a cause they share (a profile, a "
                    "driver, power, the switch) before draining more")
    return None


def window(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds % 60 == 0 else f"{seconds:g} s"


def fraction_words(settings: BreakerSettings) -> str:
    return f"fleet_fraction {settings.fleet_fraction:g}, group_fraction {settings.group_fraction:g}"
