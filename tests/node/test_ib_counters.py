"""ib.counters: InfiniBand error counters judged by their change since the last run of this boot. The real outputs
(tests/fixtures/real/ib-counters/) read as counts, N/A and saturated counters; the lab's simulated ports
(lab/ib_ports.py) stepped between runs of the agent as a process: a flap fails the node though the port is ACTIVE,
the next run passes, symbol errors past the limit warn, a new boot judges since boot."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from gpucheck.model import Status
from gpucheck.node import ib_counters
from gpucheck.parsers import parse
from gpucheck.profiles import Profile, ProfileError, validate
from lab import ib_ports
from lab.errors import LabError
from support import REAL, by_check, report_of, run_gpucheck

GPUD = REAL / "ib-counters" / "h100-cx7-ndr400-mlx5_1-port1-link_downed-255-saturated-gpud943.txt"
NO_PMA = REAL / "ib-counters" / "i40iw-iwarp-no-pma-grep-node-exporter966.txt"
BOOT = "6f1c2a44-0d0c-4a55-9f57-5d1f1b0a9e01"


def tree_of(fixture: Path, root: Path, device: str) -> Path:
    """A published listing of one port's counters as that port's sysfs directory (ACTIVE, NDR 400)."""
    [counters] = parse("ib-counters", fixture.read_text())["ports"].values()
    port = root / "class" / "infiniband" / device / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    for name, text in ib_ports.PORT.items():
        (port / name).write_text(text + "\n")
    for name, count in counters.items():
        (port / "counters" / name).write_text(("N/A (no PMA)" if count is None else str(count)) + "\n")
    return root


@pytest.fixture
def node(tmp_path, monkeypatch) -> Path:
    """A node with two simulated ports, its boot id and its own state directory."""
    proc = tmp_path / "proc" / "sys" / "kernel" / "random"
    proc.mkdir(parents=True)
    (proc / "boot_id").write_text(BOOT + "\n")
    ib_ports.write(tmp_path / "sys", 2)
    for name, value in (("GPUCHECK_SYSFS_ROOT", tmp_path / "sys"), ("GPUCHECK_PROC_ROOT", tmp_path / "proc"),
                        ("GPUCHECK_STATE_DIR", tmp_path / "state")):
        monkeypatch.setenv(name, str(value))
    return tmp_path


def judged(profile: Profile | None = None):
    return ib_counters.judge({"ib_counters": ib_counters.collect(None)}, profile or Profile("generic", None, {}))


def test_the_published_h100_port_fails_for_its_flaps_since_boot_and_warns_of_each_saturated_counter(tmp_path,
                                                                                                  monkeypatch):
    """gpud #943's ConnectX-7 port on its first run of a boot: link_downed 255 is 255 flaps since boot (a failure,
    though the port is ACTIVE), and four counters stand at the top of their widths (8, 16, 4 and 32 bits) where
    they count no more: the three error counters among them are said, port_xmit_wait (congestion) is not."""
    monkeypatch.setenv("GPUCHECK_SYSFS_ROOT", str(tree_of(GPUD, tmp_path / "sys", "mlx5_1")))
    monkeypatch.setenv("GPUCHECK_STATE_DIR", str(tmp_path / "state"))
    result = judged()
    assert result.status == Status.FAIL
    assert result.reason.startswith("since boot (no earlier run this boot): mlx5_1/1 flapped: link_downed +255 "
                                    "(now 255), port ACTIVE now")
    assert "mlx5_1/1 port_xmit_discards +65535 (now 65535): packets dropped on the way out" in result.reason
    stuck = [part for part in result.reason.split("; ") if "its top" in part]
    assert sorted(s.split()[1] for s in stuck) == ["excessive_buffer_overrun_errors", "link_downed",
                                                   "port_xmit_discards"]
    assert result.measured["rose"]["mlx5_1/1"] == {"link_downed": 255, "port_xmit_discards": 65535,
                                                   "excessive_buffer_overrun_errors": 15,
                                                   "port_rcv_switch_relay_errors": 2}
    assert result.measured["ports"]["mlx5_1/1"]["port_rcv_data"] == 205128687774249  # kept, never judged


def test_counters_no_port_management_agent_answers_for_are_not_counts_and_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCHECK_SYSFS_ROOT", str(tree_of(NO_PMA, tmp_path / "sys", "i40iw0")))
    monkeypatch.setenv("GPUCHECK_STATE_DIR", str(tmp_path / "state"))
    result = judged()
    assert result.status == Status.PASS, result.reason
    assert result.measured["ports"]["i40iw0/1"]["link_downed"] is None and result.measured["rose"] == {}


def test_a_node_without_infiniband_skips(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCHECK_SYSFS_ROOT", str(tmp_path))
    assert judged().status == Status.SKIP


def test_each_run_judges_the_change_since_the_last_run_of_this_boot(node):
    """Symbol errors within the limit pass and say so; past it they warn naming the port and the cable; a flap
    fails; nothing new passes again; counters lower than last run's were reset, counted from 0; a profile's limit
    wins over ibqueryerrors'."""
    def run(profile: Profile | None = None):
        result = judged(profile)
        ib_counters.remember([result])
        return result

    assert run().status == Status.PASS
    ib_ports.step(node / "sys", "mlx5_1/symbol_error+4")
    within = run()
    assert within.status == Status.PASS and "(1 rose within it)" in within.reason
    assert within.reason.startswith("2 port(s): no error counter past its limit since the last run (")
    ib_ports.step(node / "sys", "mlx5_1/symbol_error+11")
    over = run()
    assert over.status == Status.WARN
    assert "mlx5_1/1 symbol_error +11 (now 15): symbol errors on the wire: a bad cable" in over.reason
    assert "(limit 10 a run)" in over.reason and over.remediation.startswith("reseat or replace the cable")
    ib_ports.step(node / "sys", "link_downed")
    flap = run()
    assert flap.status == Status.FAIL and "mlx5_0/1 flapped: link_downed +1 (now 1), port ACTIVE now" in flap.reason
    assert run().status == Status.PASS
    (node / "sys" / ib_ports.CLASS_DIR / "mlx5_1" / "ports" / "1" / "counters" / "symbol_error").write_text("3\n")
    reset = run()
    assert reset.measured["rose"] == {"mlx5_1/1": {"symbol_error": 3}} and reset.status == Status.PASS
    ib_ports.step(node / "sys", "mlx5_1/symbol_error+5")
    strict = run(Profile("site", None, {"infiniband": {"counter_limits": {"symbol_error": 2, "symbol_errors": 0}}}))
    assert strict.status == Status.WARN and "(limit 2 a run)" in strict.reason
    assert strict.reason.endswith("counter_limits name no such counter: symbol_errors (ignored)")
    assert strict.expected["symbol_error"] == 2 and strict.expected["link_downed"] == 0


def test_a_new_boot_judges_since_boot_and_a_saturated_counter_warns_until_reset(node):
    ib_ports.step(node / "sys", "mlx5_0/local_link_integrity_errors+40")  # a 4-bit counter: stops at 15
    first = judged()
    ib_counters.remember([first])
    assert first.status == Status.WARN and "mlx5_0/1 local_link_integrity_errors at 15, its top" in first.reason
    assert "+15 (now 15)" in first.reason  # past ibqueryerrors' 10 since boot
    again = judged()
    assert again.status == Status.WARN and again.measured["rose"] == {}  # no change, still no count
    (node / "proc" / "sys" / "kernel" / "random" / "boot_id").write_text("another-boot\n")
    assert judged().reason.startswith("since boot (no earlier run this boot)")


def test_the_lab_steps_only_counters_a_port_has_up_to_their_top(tmp_path):
    ib_ports.write(tmp_path, 1)
    assert ib_ports.step(tmp_path, "link_downed+300") == "mlx5_0 port 1 link_downed now 255"
    with pytest.raises(LabError, match="COUNTER one of link_downed"):
        ib_ports.step(tmp_path, "mlx5_0/no_such_counter")
    with pytest.raises(LabError, match="no simulated InfiniBand port"):
        ib_ports.step(tmp_path / "none", None)


def test_the_agent_fails_a_flapping_port_then_passes_and_keeps_the_counters_in_its_report(node):
    """`gpucheck node` as a process, three runs: a healthy pass, a flap stepped between (exit 2, the port named),
    and a pass once nothing moved; the state file holds the last run's counts."""
    env = dict(os.environ)
    args = ["node", "--only", "ib.counters", "--profile", "generic", "--format", "json"]
    first = run_gpucheck(args, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    ib_ports.step(node / "sys", "mlx5_1/link_downed+2")
    flap = run_gpucheck(args, env=env)
    result = by_check(report_of(flap))["ib.counters"]
    assert flap.returncode == 2 and result["status"] == "fail", flap.stdout
    assert "mlx5_1/1 flapped: link_downed +2 (now 2), port ACTIVE now" in result["reason"]
    assert result["measured"]["ports"]["mlx5_1/1"]["link_downed"] == 2
    assert run_gpucheck(args, env=env).returncode == 0
    state = json.loads((node / "state" / ib_counters.STATE_FILE).read_text())
    assert state["boot_id"] == BOOT and state["ports"]["mlx5_1/1"]["link_downed"] == 2


@pytest.mark.parametrize(("limits", "says"), [
    ({"symbol_error": -1}, "'infiniband.counter_limits.symbol_error' must be a whole number >= 0, got -1"),
    ({"symbol_error": 2.5}, "must be a whole number >= 0, got 2.5"),
    ({"/dev/x": 1}, "'infiniband.counter_limits' keys are counter names (symbol_error), got '/dev/x'"),
])
def test_a_profiles_counter_limits_are_counts_of_named_counters(limits, says):
    with pytest.raises(ProfileError, match=re.escape(says)):
        validate({"infiniband": {"counter_limits": limits}}, "site.yaml")
