"""A stack's framework probe is kept and reused while nothing its answers depend on changed (kept_probes.py):
the stand-in stacks of test_frameworks.py, probed for real by their own interpreter; what a run does is told by
whether the probe process was started and by the line each stack's evidence carries."""

from __future__ import annotations

import pytest
from test_frameworks import GPU_PROFILE, FakeStack

from gpucheck.config import NodeConfig
from gpucheck.model import Status
from gpucheck.node import Context
from gpucheck.node.pipeline import all_checks
from gpucheck.node.stack import framework_probe, frameworks, kept_probes


def nvml(uuids: list[str], driver: str = "535.183.01") -> dict:
    return {"driver_version": driver, "cuda_driver_version": "12.2",
            "gpus": [{"index": i, "uuid": u, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
                      "lost": False} for i, u in enumerate(uuids)]}


EIGHT = [f"GPU-{i:08x}-0000-0000-0000-000000000000" for i in range(8)]


@pytest.fixture
def probes(monkeypatch, tmp_path):
    """Runs the frameworks' collector as a node run would, counting the probe processes it starts."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    started = []
    real_run = framework_probe.run

    def counted(argv, **kwargs):
        if str(framework_probe.PROBE) in argv:
            started.append(argv)
        return real_run(argv, **kwargs)

    monkeypatch.setattr(framework_probe, "run", counted)

    def collect(stack, gpus=EIGHT, full=False, driver="535.183.01"):
        before = len(started)
        facts = framework_probe.collect(Context(config=NodeConfig(stacks=[stack]), full=full,
                                                facts={"nvml": nvml(gpus, driver)}))
        return facts["stacks"][0], len(started) > before, facts

    return collect


def test_a_second_run_reuses_the_answers_and_gives_the_same_verdict(probes, tmp_path):
    fake = FakeStack(tmp_path / "tf").tensorflow().horovod()
    stack = fake.stack("tf-horovod", "tensorflow", "horovod")
    first, asked, facts = probes(stack)
    assert asked and first["reuse"].startswith("asked: no answers kept from an earlier run; kept for the next runs")
    again, asked_again, facts_again = probes(stack)
    assert not asked_again
    assert "reused: the stack's files, the system's libraries, the driver, the GPUs" in again["reuse"]
    for check in (frameworks.tensorflow, frameworks.horovod):
        now = check({"frameworks": facts_again, "nvml": nvml(EIGHT)}, GPU_PROFILE)
        then = check({"frameworks": facts, "nvml": nvml(EIGHT)}, GPU_PROFILE)
        assert (now.status, now.reason, now.measured) == (then.status, then.reason, then.measured) == (
            Status.PASS, now.reason, now.measured)
        assert "stack tf-horovod: the answers of " in now.evidence and ", reused: " in now.evidence


@pytest.mark.parametrize("change, words", [
    ("files", "the stack's files changed since"),
    ("gpus", "the driver or the GPUs changed since"),
    ("driver", "the driver or the GPUs changed since"),
    ("environment", "the probe's environment changed since"),
])
def test_a_change_to_what_the_answers_depend_on_asks_again(probes, tmp_path, monkeypatch, change, words):
    fake = FakeStack(tmp_path / "tf").tensorflow(gpus=8)
    stack = fake.stack("tf", "tensorflow")
    assert probes(stack)[1]
    gpus, driver = EIGHT, "535.183.01"
    if change == "files":  # an upgrade in place: TensorFlow now sees 7 of the 8 GPUs
        fake.tensorflow(gpus=7)
    elif change == "gpus":  # GPU3 swapped for another board
        gpus = [*EIGHT[:3], "GPU-ffffffff-0000-0000-0000-000000000000", *EIGHT[4:]]
    elif change == "driver":
        driver = "550.163.01"
    else:
        monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    entry, asked, facts = probes(stack, gpus=gpus, driver=driver)
    assert asked and entry["reuse"].startswith(f"asked again: {words}"), entry["reuse"]
    if change == "files":  # a CUDA build that cannot use every GPU is asked again on every run
        result = frameworks.tensorflow({"frameworks": facts, "nvml": nvml(EIGHT)}, GPU_PROFILE)
        assert result.status == Status.FAIL and "sees 7 of the 8 GPUs" in result.reason, result
        assert entry["reuse"].endswith("not kept: only answers that found nothing wrong are reused")
        assert probes(stack, gpus=gpus, driver=driver)[1]
    else:
        assert not probes(stack, gpus=gpus, driver=driver)[1]  # kept again: the run after reuses


def test_a_deep_run_always_asks_and_keeps_what_it_found(probes, tmp_path):
    stack = FakeStack(tmp_path / "tf").tensorflow().stack("tf", "tensorflow")
    assert probes(stack)[1]
    entry, asked, _ = probes(stack, full=True)
    assert asked and entry["reuse"].startswith("asked: a deep run (--full) always asks; kept for the next runs")
    assert not probes(stack)[1]


def test_answers_that_found_something_wrong_are_never_kept(probes, tmp_path):
    stack = FakeStack(tmp_path / "tf").tensorflow().horovod(init="raise").stack("tf", "tensorflow", "horovod")
    for _ in range(2):
        entry, asked, facts = probes(stack)
        assert asked and "not kept: only answers that found nothing wrong are reused" in entry["reuse"]
        assert frameworks.horovod({"frameworks": facts}, GPU_PROFILE).status == Status.FAIL


def test_kept_answers_that_cannot_be_read_are_asked_again(probes, tmp_path):
    stack = FakeStack(tmp_path / "tf").tensorflow().stack("tf", "tensorflow")
    probes(stack)
    for damaged in ("{not json", '{"digests": [], "entry": 1, "probed_at": "x"}'):
        kept_probes.place(stack).write_text(damaged)
        entry, asked, _ = probes(stack)
        assert asked and entry["reuse"].startswith("asked: the kept answers could not be read")
        assert not probes(stack)[1]


def test_without_nvml_or_a_package_folder_nothing_is_kept(probes, tmp_path, monkeypatch):
    stack = FakeStack(tmp_path / "tf").tensorflow().stack("tf", "tensorflow")
    for _ in range(2):
        facts = framework_probe.collect(Context(config=NodeConfig(stacks=[stack])))
        assert "not kept: a later run could not tell whether anything changed" in facts["stacks"][0]["reuse"]
    assert not kept_probes.place(stack).exists()


def test_every_check_that_reads_the_probe_has_nvml_gathered_before_it():
    """The collector reuses answers only for the driver and GPUs they were given with: NVML's facts must be there
    when it runs, so every check that needs the frameworks' facts needs NVML's earlier."""
    for check in all_checks():
        names = [n.rstrip("?") for n in check.needs]
        if "frameworks" in names:
            assert "nvml" in names[:names.index("frameworks")], check.id
