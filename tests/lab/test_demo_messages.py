"""What `lab build`, `lab demo` and `lab up` tell the user, without booting anything: the lab's seams (its hosts
coming up and going, ansible-playbook, the validation) are stand-ins. A "try `python3 -m lab ssh`" hint is said
only of a lab that stays up for the user, and every log path printed exists once the command is over."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from lab import cli, cluster, config, demo, golden, images, state
from lab.errors import LabError
from lab.state import HostState, LabState

HINT = "try `python3 -m lab ssh"
KEY = "0123456789abcdef"


class FakeLab:
    """The lab as the state file says it is: `up` brings hosts, `down` removes them."""

    def __init__(self) -> None:
        self.st: LabState | None = None

    def up(self, opts: cluster.UpOptions) -> LabState:
        names = ([config.ADMIN_HOST] if opts.admin else []) + [config.host_name(i) for i in range(1, opts.hosts + 1)]
        self.st = LabState(subnet=config.DEFAULT_SUBNET, bridge=config.BRIDGE, bridge_address="10.213.7.1",
                           lowers=["/var/cache/gpucheck-lab/base-x"])
        self.st.hosts = [HostState(name=n, address=f"10.213.7.{11 + i}", netns=n, veth=n, scenario="dgx-h100")
                         for i, n in enumerate(names)]
        return self.st

    def down(self) -> str:
        self.st = None
        return "lab is down: removed the hosts, the bridge and the proxy"

    def load_up(self) -> LabState:
        if self.st is None:
            raise LabError("no lab is up")
        return self.st


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeLab:
    fake = FakeLab()
    monkeypatch.setattr(config, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(config, "host_data_dir", lambda name: tmp_path / "data" / name)
    monkeypatch.setattr(cluster, "require_root", lambda: None)
    monkeypatch.setattr(cluster, "up", fake.up)
    monkeypatch.setattr(cluster, "down", fake.down)
    monkeypatch.setattr(state, "load", lambda: fake.st)
    monkeypatch.setattr(state, "load_up", fake.load_up, raising=False)
    monkeypatch.setattr(cluster, "load_up", fake.load_up, raising=False)
    monkeypatch.setattr(images, "golden_key", lambda playbook: KEY)
    monkeypatch.setattr("lab.host.end", lambda host: None)
    monkeypatch.setattr(golden, "clean_layer", lambda upper: None)
    monkeypatch.setattr(golden, "run", lambda argv, timeout: types.SimpleNamespace(stdout="42\tlayer\n"))
    (tmp_path / "data" / "node01" / "upper" / "etc").mkdir(parents=True)
    return fake


def playbook_stand_in(code: int = 0):
    def run_playbook(playbook: Path, log: Path, extra_vars: dict | None = None) -> int:
        log.write_text("PLAY [stand-in] ***\nnode01 : ok=3 changed=0 unreachable=0 failed=0\n")
        return code
    return run_playbook


def paths_said(text: str) -> list[Path]:
    return [Path(p) for p in re.findall(r"(/\S+?\.log)\b", text)]


def test_the_golden_build_says_no_hint_and_its_log_is_where_it_said(
        lab: FakeLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(golden, "run_playbook", playbook_stand_in())
    playbook = tmp_path / "site.yml"
    playbook.write_text("- hosts: all\n")
    said = golden.build(playbook)
    out = capsys.readouterr()
    text = out.err + out.out + said
    assert HINT not in text and lab.st is None  # the build host is gone: nothing to try
    logs = paths_said(text)
    assert logs and all(log.is_file() for log in logs), logs
    assert set(logs) == {golden.build_log(KEY)}  # one place, printed at the start and at the end
    assert images.find(playbook) is not None and images.meta(KEY)["log"] == str(golden.build_log(KEY))
    again = golden.build(playbook)  # up to date: says where the log of its build is
    assert "is up to date" in again and str(golden.build_log(KEY)) in again


def test_a_failed_golden_build_names_a_log_that_exists(
        lab: FakeLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(golden, "run_playbook", playbook_stand_in(2))
    playbook = tmp_path / "site.yml"
    playbook.write_text("- hosts: all\n")
    with pytest.raises(LabError) as failed:
        golden.build(playbook)
    text = capsys.readouterr().err + failed.value.message
    assert HINT not in text and lab.st is None
    logs = paths_said(failed.value.message)
    assert logs and all(log.is_file() for log in logs), logs


def test_an_image_whose_log_is_gone_is_described_without_a_path(lab: FakeLab, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(golden, "run_playbook", playbook_stand_in())
    playbook = tmp_path / "site.yml"
    playbook.write_text("- hosts: all\n")
    golden.build(playbook)
    golden.build_log(KEY).unlink()
    said = golden.build(playbook)
    assert "is up to date" in said and ".log" not in said


@pytest.mark.parametrize("keep", [False, True], ids=["down-at-the-end", "keep"])
def test_the_demo_says_what_to_try_only_when_the_lab_stays_up(
        keep: bool, lab: FakeLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(demo, "REPORTS", tmp_path / "reports")
    monkeypatch.setattr(golden, "run_playbook", playbook_stand_in())
    monkeypatch.setattr(demo, "run_playbook", playbook_stand_in())
    monkeypatch.setattr(demo, "_slurm_client", lambda: None)
    monkeypatch.setattr(demo, "_cluster_validation", lambda out_dir, stages, env: (["  node04: FAIL"], {"node04"}))
    playbook = tmp_path / "site.yml"
    playbook.write_text("- hosts: all\n")
    argv = ["demo", "--playbook", str(playbook)] + (["--keep"] if keep else [])
    assert cli.dispatch(cli.build_parser().parse_args(argv)) == 0
    out = capsys.readouterr()
    lines = out.err.splitlines()
    assert all(log.is_file() for log in paths_said(out.err + out.out)), paths_said(out.err + out.out)
    if keep:
        assert lab.st is not None
        [hint] = [line for line in lines if HINT in line]
        assert "--keep: the lab stays up" in hint and "node01" in hint and "python3 -m lab down" in hint
        assert hint == lines[-1]  # said last, after the demo's own lines
    else:
        assert lab.st is None and not any(HINT in line for line in lines), out.err


def test_a_demo_with_keep_whose_hosts_did_not_come_up_says_no_hint(
        lab: FakeLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    def up_fails(opts: cluster.UpOptions) -> None:
        raise LabError("cannot build the lab here: no namespaces")

    monkeypatch.setattr(demo, "REPORTS", tmp_path / "reports")
    monkeypatch.setattr(golden, "run_playbook", playbook_stand_in())
    playbook = tmp_path / "site.yml"
    playbook.write_text("- hosts: all\n")
    golden.build(playbook)
    monkeypatch.setattr(cluster, "up", up_fails)
    with pytest.raises(LabError):
        cli.dispatch(cli.build_parser().parse_args(["demo", "--keep", "--playbook", str(playbook)]))
    assert HINT not in capsys.readouterr().err


def test_lab_up_says_what_to_try(lab: FakeLab, capsys: pytest.CaptureFixture) -> None:
    assert cli.dispatch(cli.build_parser().parse_args(["up", "--hosts", "2", "--admin"])) == 0
    err = capsys.readouterr().err
    assert "try `python3 -m lab ssh node01`" in err and "admin01, node01, node02" in err
