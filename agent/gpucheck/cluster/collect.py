"""`gpucheck history collect`: every node's kept reports into the admin node's history store (docs/history.md), so
what Slurm's health check and the scheduled checks saw between two cluster runs is in the history. Over SSH, each
node's `gpucheck kept --json`, a page at a time, from where its last collect ended: the newest kept report already
recorded from it, by name (runs.source `NODE:kept/NAME`). A report is recorded under the node's inventory name, as
a cluster run records it. A node that cannot be read costs that node only; what was recorded from it stays."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..history.records import NotAReport, from_node_report
from ..history.store import HistoryError, Store
from ..model import KEPT_REPORTS_MAX
from .context import Options
from .inventory import Host
from .ssh import client as ssh
from .ssh.result import Remote

PAGE = 50  # reports per SSH command: a full 8-GPU report is ~50 kB, a node may keep KEPT_REPORTS_MAX
SOURCE = "{node}:kept/{name}"
# What one node may send in one collect: all it can keep, and a page more for those written meanwhile. A node that
# sends more, or a report twice, is answering wrongly (a loop, a broken or hostile agent): it is stopped there.
MOST_PER_NODE = KEPT_REPORTS_MAX + PAGE


@dataclass
class Collected:
    node: str
    recorded: int = 0
    known: int = 0  # recorded before (by content)
    newest: str | None = None  # the newest kept report read from it, by name
    failed: str | None = None  # why the node could not be read (to its end)
    problems: list[str] = field(default_factory=list)  # kept reports that could not be recorded, and why


def last_collected(store: Store, node: str) -> str | None:
    """The newest kept report recorded from `node` by an earlier collect: the last recorded, as each collect records
    them oldest first. (One recorded before by other means is not; reading it again records nothing.)"""
    prefix = SOURCE.format(node=node, name="")
    rows = store.query("SELECT source FROM runs WHERE substr(source, 1, ?) = ? ORDER BY id DESC LIMIT 1",
                       (len(prefix), prefix))
    return rows[0]["source"][len(prefix):] if rows else None


def page_command(options: Options, after: str | None) -> str:
    argv = [*options.agent_argv(), "kept", "--json", "--max", str(PAGE)]
    return ssh.command([*argv, "--after", after] if after else argv)


def entries(stdout: str) -> Iterator[dict]:
    for line in stdout.splitlines():
        if line.strip():
            entry = json.loads(line)
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ValueError(f"not a kept report's entry: {line[:80]!r}")
            yield entry


def collect_node(host: Host, options: Options, path: Path, timeout: float) -> Collected:
    """Pages of the node's kept reports into the store until a page comes back short. Never raises."""
    done = Collected(host.name)
    try:
        with Store(path) as store:
            after = done.newest = last_collected(store, host.name)
            seen: set[str] = set()
            while True:
                remote = ssh.run(host, options, page_command(options, after), timeout)
                if not remote.ok:
                    done.failed = failure(remote, host, options)
                    return done
                try:
                    page = list(entries(remote.stdout))
                except ValueError as exc:
                    done.failed = f"`gpucheck kept` answered what is no list of kept reports: {exc}"
                    return done
                for entry in page:
                    if entry["name"] in seen or len(seen) >= MOST_PER_NODE:
                        said = (f"sent kept report {entry['name']} again" if entry["name"] in seen else
                                f"sent more than the {MOST_PER_NODE} kept reports a node can hold")
                        done.failed = f"{said}: stopped there, what came before is recorded"
                        return done
                    seen.add(entry["name"])
                    record(store, host.name, entry, done)
                if len(page) < PAGE:
                    return done
                after = page[-1]["name"]
    except HistoryError as exc:
        done.failed = str(exc)
    return done


def failure(remote: Remote, host: Host, options: Options) -> str:
    if remote.error:
        return remote.error.removeprefix(f"{host.name}: ")
    last = remote.output.splitlines()[-1] if remote.output.strip() else "no output"
    return f"`{shlex.join(options.agent_argv())} kept` exited {remote.exit}: {last} (an agent older than `kept`?)"


def record(store: Store, node: str, entry: dict, done: Collected) -> None:
    name = entry["name"]
    done.newest = name
    report = entry.get("report")
    try:
        if not isinstance(report, dict) or not isinstance(report.get("results"), list):
            raise NotAReport(entry.get("error") or "not a gpucheck node report")
        _, new = store.record(from_node_report(report, node), SOURCE.format(node=node, name=name))
    except (NotAReport, RecursionError) as exc:
        done.problems.append(f"kept report {name}: {exc}")
        return
    done.recorded += new
    done.known += not new


def collect(hosts: list[Host], options: Options, path: Path, timeout: float,
            progress: Callable[[Collected], None]) -> list[Collected]:
    """Every host at once, up to --forks; `progress` hears of each in the hosts' order. HistoryError when the store
    cannot be opened."""
    with Store(path):
        pass  # created and migrated once, before the writers
    with ThreadPoolExecutor(max_workers=max(1, min(options.forks, len(hosts)))) as pool:
        found = []
        for done in pool.map(lambda host: collect_node(host, options, path, timeout), hosts):
            progress(done)
            found.append(done)
    return found
