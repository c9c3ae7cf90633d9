"""stack.pins and node.yaml's pins: what an installed version must be to match its pin, the check's verdicts on
facts as the collectors leave them, and the shapes node.yaml's `pins:` may take."""

from __future__ import annotations

import pytest

from gpucheck import config
from gpucheck.model import Status
from gpucheck.node.stack import pins
from gpucheck.profiles import Profile

ANY = Profile("any", None, {})
PINS = {"driver": "535.261.03", "cuda": "12.2", "cudnn": "8.9.7.29", "nccl": "2.18.5"}


@pytest.mark.parametrize("pin,installed,parts,ok", [
    ("535.261.03", "535.261.03", None, True),
    ("535.261.03", "550.54.15", None, False),  # upgraded by hand
    ("535.261.03", "535.261.3", None, True),  # the same number
    ("535.*", "535.183.01", None, True),  # Debian's branch glob
    ("535.*", "550.54.15", None, False),
    ("12.2", "12.2", 2, True),  # cudaRuntimeGetVersion of CUDA 12.2.140
    ("12.2", "12.4", 2, False),
    ("12.2", "12", 2, False),  # less than the pin says cannot confirm it
    ("8.9.7.29", "8.9.7", 3, True),  # cudnnGetVersion reports three parts of the package version
    ("8.9.7.29", "8.9.6", 3, False),
    ("8.9.7.29", "8.9.7", None, False),  # without the reader's precision the fourth part is missing
    ("2.18.5", "2.19.3", 3, False),
    ("2.5.1", "2.5.1+cu121", None, True),  # a pin without a local label takes any build of it
    ("2.5.1+cpu", "2.5.1+cpu", None, True),
    ("2.5.1+cpu", "2.5.1+cu121", None, False),  # the wrong build
    ("2.15.1", "2.15.1rc0", None, False),  # a release candidate is not the release
    ("2.15.1", "2.15.10", None, False),
    ("2.15", "2.15.1", None, True),  # the pin's own precision
])
def test_an_installed_version_matches_its_pin(pin, installed, parts, ok):
    assert pins.matches(pin, installed, parts) is ok


# ---------------------------------------------------------------- the check on facts

def lib(version: str | None, origin: str = "ldconfig", error: str | None = None, name: str = "libx.so") -> dict:
    entry = {"path": f"/{origin}/{name}", "origins": [origin]}
    if version:
        entry["version"] = version
    if error:
        entry["error"] = error
    return entry


def facts(system=None, stacks=None, driver="535.261.03", libraries=None, frameworks=None) -> dict:
    return {
        "pins": {"system": system if system is not None else dict(PINS), "stacks": stacks or {}},
        "nvml": {"driver_version": driver, "errors": {}, "gpus": []},
        "libraries": {"libraries": libraries if libraries is not None else {
            "cudart": [lib("12.2")], "cudnn": [lib("8.9.7")], "nccl": [lib("2.18.5")]}},
        "frameworks": frameworks or {"configured": True, "stacks": []},
    }


def probed(name: str, **records) -> dict:
    return {"name": name, "probe": {"horovod": {}, **records}, "error": None, "harness": False}


def test_everything_as_pinned_passes():
    result = pins.pins(facts(), ANY)
    assert result.status == Status.PASS, result.reason
    assert result.measured["system"] == {"driver": "535.261.03", "cuda": "12.2", "cudnn": "8.9.7", "nccl": "2.18.5"}
    assert result.expected["system"] == PINS


def test_a_driver_upgraded_by_hand_fails_naming_both_versions():
    result = pins.pins(facts(driver="550.54.15"), ANY)
    assert result.status == Status.FAIL
    assert result.reason == "driver 550.54.15 installed, pinned 535.261.03"
    assert "site.yml --tags gpu" in result.remediation and "versions.yml" in result.remediation


def test_library_drift_fails_for_each_library():
    drifted = {"cudart": [lib("12.4")], "cudnn": [lib("8.9.6")], "nccl": [lib("2.19.3")]}
    result = pins.pins(facts(libraries=drifted), ANY)
    assert result.status == Status.FAIL
    assert result.reason == ("cuda 12.4 installed, pinned 12.2; cudnn 8.9.6 installed, pinned 8.9.7.29; "
                             "nccl 2.19.3 installed, pinned 2.18.5")


def test_system_pins_judge_the_systems_copy_not_a_stacks_own_wheels():
    libraries = {"cudart": [lib("12.1", origin="stack:torch"), lib("12.2", origin="ldconfig")],
                 "cudnn": [lib("8.9.7")], "nccl": [lib("2.21.5", origin="stack:torch"), lib("2.18.5")]}
    result = pins.pins(facts(libraries=libraries), ANY)
    assert result.status == Status.PASS, result.reason


def test_an_unread_pinned_version_is_an_error_never_a_pass():
    libraries = {"cudart": [lib("12.2")], "cudnn": [lib(None, error="has no symbol cudnnGetVersion")],
                 "nccl": [lib("2.18.5")]}
    result = pins.pins(facts(libraries=libraries), ANY)
    assert result.status == Status.ERROR
    assert result.reason == "cudnn (libcudnn) version not read: /ldconfig/libx.so has no symbol cudnnGetVersion"
    unread_driver = facts(driver=None)
    unread_driver["nvml"]["errors"]["driver_version"] = {"error": "hung", "call": "nvmlSystemGetDriverVersion",
                                                         "text": "did not return within 2 s"}
    result = pins.pins(unread_driver, ANY)
    assert result.status == Status.ERROR
    assert result.reason == "driver_version not read: nvmlSystemGetDriverVersion hung (did not return within 2 s)"
    no_nvml = facts()
    no_nvml["nvml"] = None
    assert pins.pins(no_nvml, ANY).status == Status.ERROR


def test_a_pinned_library_that_is_not_installed_fails():
    result = pins.pins(facts(libraries={"cudart": [], "cudnn": [lib("8.9.7")], "nccl": [lib("2.18.5")]}), ANY)
    assert result.status == Status.FAIL and result.reason.startswith("cuda (libcudart) is pinned but not installed")


def test_only_what_is_pinned_is_compared():
    result = pins.pins(facts(system={"driver": "535.*"}, libraries={}), ANY)
    assert result.status == Status.PASS and result.measured["system"] == {"driver": "535.261.03"}


def test_framework_drift_in_one_stack_fails_naming_the_stack():
    frameworks = {"configured": True, "stacks": [
        probed("tf-horovod", tensorflow={"import_ok": True, "version": "2.15.0"},
               horovod={"tensorflow": {"import_ok": True, "version": "0.28.1"}}),
        probed("torch", torch={"import_ok": True, "version": "2.5.1+cu121"}),
    ]}
    stacks = {"tf-horovod": {"tensorflow": "2.15.1", "horovod": "0.28.1"}, "torch": {"torch": "2.5.1"}}
    result = pins.pins(facts(system={}, stacks=stacks, frameworks=frameworks), ANY)
    assert result.status == Status.FAIL
    assert result.reason == "stack tf-horovod: tensorflow 2.15.0 installed, pinned 2.15.1"
    assert result.measured["stacks"] == {"tf-horovod": {"tensorflow": "2.15.0", "horovod": "0.28.1"},
                                         "torch": {"torch": "2.5.1+cu121"}}


def test_a_framework_that_did_not_import_or_was_not_probed_is_an_error():
    frameworks = {"configured": True, "stacks": [
        probed("tf-horovod", tensorflow={"import_ok": False, "import_error": "ImportError: libcudart.so.12"}),
        {"name": "torch", "probe": {"horovod": {}}, "error": "the probe did not finish within 60 s", "harness": True},
    ]}
    stacks = {"tf-horovod": {"tensorflow": "2.15.1"}, "torch": {"torch": "2.5.1"}}
    result = pins.pins(facts(system={}, stacks=stacks, frameworks=frameworks), ANY)
    assert result.status == Status.ERROR
    assert result.reason == ("stack tf-horovod: tensorflow version not read: import failed: ImportError: "
                             "libcudart.so.12; stack torch: torch version not read: the probe did not finish "
                             "within 60 s")
    assert "frameworks.*" in result.remediation


def test_no_pins_skips_saying_how_to_get_them():
    result = pins.pins(facts(system={}), ANY)
    assert result.status == Status.SKIP
    assert "site.yml" in result.reason and "gpucheck_agent" in result.reason and "versions.yml" in result.reason


def test_the_collector_carries_node_yamls_pins_into_the_facts():
    from gpucheck.node import Context

    site = config.NodeConfig(pins={"driver": "535.*"}, stacks=[
        config.Stack("tf", "/py", ["tensorflow"], {"tensorflow": "2.15.1"}), config.Stack("t", "/py", ["torch"])])
    assert pins.collect(Context(config=site)) == {"system": {"driver": "535.*"},
                                                  "stacks": {"tf": {"tensorflow": "2.15.1"}}}


# ---------------------------------------------------------------- node.yaml's pins

def load(tmp_path, text: str) -> config.NodeConfig:
    path = tmp_path / "node.yaml"
    path.write_text(text)
    return config.load(path)


def test_node_yaml_pins_as_the_role_writes_them(tmp_path):
    site = load(tmp_path, 'profile: dgx-h100\npins:\n  driver: "535.261.03"\n  cuda: "12.2"\n  cudnn: ""\n'
                          "stacks:\n  tf-horovod:\n    python: /opt/stacks/tf-horovod/bin/python\n"
                          '    frameworks: [tensorflow, horovod]\n'
                          '    pins: {"tensorflow": "2.15.1", "horovod": "0.28.1"}\n'
                          "  torch: {python: /p, frameworks: [torch]}\n")
    assert site.profile == "dgx-h100"
    assert site.pins == {"driver": "535.261.03", "cuda": "12.2"}  # empty: not pinned
    assert [(s.name, s.pins) for s in site.stacks] == [("tf-horovod", {"tensorflow": "2.15.1", "horovod": "0.28.1"}),
                                                       ("torch", {})]


@pytest.mark.parametrize("text,message", [
    ("pins: [535]\n", "'pins' must be a mapping of component to version, like {driver: \"1.2.3\"}, not a list"),
    ("pins: {gpu: '1'}\n", "'pins' names 'gpu', which is not one of driver, cuda, cudnn, nccl"),
    ("pins: {cuda: 12.10}\n", "'pins.cuda' must be a quoted version like \"12.2\", not a number "
                              "(YAML reads 12.10 as the number 12.1)"),
    ("pins: {driver: latest}\n", "'pins.driver' is 'latest': a pin is a version like 535.261.03 or a glob like 535.*"),
    ("pins: {driver: '535 .1'}\n", "'pins.driver' is '535 .1': a pin is a version"),
    ("stacks: {s: {python: p, frameworks: [tensorflow], pins: {torch: '2.5.1'}}}\n",
     "'stacks.s.pins' names 'torch', which is not among that stack's frameworks (tensorflow)"),
    ("stacks: {s: {python: p, pins: {torch: '2.5.1'}}}\n",
     "'stacks.s.pins' names 'torch', which is not among that stack's frameworks (none)"),
    ("stacks: {s: {python: p, frameworks: [torch], pins: torch}}\n", "'stacks.s.pins' must be a mapping"),
])
def test_node_yaml_pins_of_the_wrong_shape_are_one_line_errors(tmp_path, text, message):
    with pytest.raises(config.ConfigError) as refused:
        load(tmp_path, text)
    assert message in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert str(refused.value).startswith(f"{tmp_path / 'node.yaml'}: ")


def laughs(levels: int = 10) -> str:
    anchors = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    anchors += [f"&l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, levels)]
    return ", ".join(anchors)


@pytest.mark.parametrize("text,message", [
    (f"profile: auto\nstacks: {{s: {{python: p, frameworks: [{laughs()}]}}}}\n",
     "expands to more than 10000 YAML nodes (anchors and aliases used over and over)"),
    ("pins: &a {driver: [*a]}\n", "has an alias inside the anchor it refers to"),
    ("profile: " + "[" * 3000 + "]" * 3000 + "\n", "is nested too deeply"),
    ("profile: auto\n" + "# padding\n" * 120_000, "is larger than 1 MiB"),
])
def test_node_yaml_is_read_with_the_guarded_loader(tmp_path, text, message):
    with pytest.raises(config.ConfigError) as refused:  # refused as it reads: unguarded, the laughs never end
        load(tmp_path, text)
    assert str(refused.value) == f"{tmp_path / 'node.yaml'} {message}"
