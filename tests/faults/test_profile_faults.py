"""Profiles under faults: a site edits YAML, never code, so whatever a profile file holds, `gpucheck node
--profile FILE` and `gpucheck profiles --profiles-dir DIR` end quickly, with one line that names the file
and the key (exit 3), never a traceback, a hang, or a check silently turned off.

Each case runs the real command line in its own process (support.run_gpucheck)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import run_gpucheck

LIMIT_S = 60  # a hang is a failure (subprocess.TimeoutExpired), not a wait


def node_with(profile: Path):
    return run_gpucheck(["node", "--profile", str(profile), "--only", "host", "--format", "json"], timeout=LIMIT_S)


def error_line(done) -> str:
    """The one line a refused profile gets: exit 3, one line on stderr, no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 3, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    return lines[0]


def laughs(levels: int = 10) -> str:
    """A "billion laughs" chain of anchors: level n is nine aliases of level n-1 (9**10 strings)."""
    anchors = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    anchors += [f"&l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, levels)]
    return ", ".join(anchors)


# name -> (the profile file's text, the error after "gpucheck: error: profile {path}")
BAD_TEXT: dict[str, tuple[str, str]] = {
    # 7. anchors: the description is not judged, but the list that aliases it is, and the report prints both
    "billion-laughs": (f"name: bomb\ndescription: [{laughs()}]\nlibraries:\n  required: *l9\n",
                       " expands to more than 10000 YAML nodes (anchors and aliases used over and over)"),
    "alias-inside-its-anchor": ("name: loop\ndescription: &self [a, *self]\n",
                                " has an alias inside the anchor it refers to"),
    "nested-3000-deep": ("name: deep\ndescription: " + "[" * 3000 + "]" * 3000 + "\n", " is nested too deeply"),
    "larger-than-1-MiB": ("name: big\n" + "# padding\n" * 120_000, " is larger than 1 MiB"),
    "not-a-mapping": ("- gpu\n- host\n", " must be a YAML mapping"),
}

# name -> (the profile file's text, the error after "gpucheck: error: {path}: ")
BAD_VALUE: dict[str, tuple[str, str]] = {
    # 11. numbers: finite and in range, the key named
    "nan-threshold": ("gpu:\n  temperature_C_max: .nan\n",
                      "'gpu.temperature_C_max' must be a finite number >= 0, got nan"),
    "inf-threshold": ("bandwidth:\n  nccl_allreduce_busbw_GBps_min: .inf\n",
                      "'bandwidth.nccl_allreduce_busbw_GBps_min' must be a finite number >= 0, got inf"),
    "negative-count": ("gpu:\n  ecc_volatile_uncorrected_max: -1\n",
                       "'gpu.ecc_volatile_uncorrected_max' must be a finite number >= 0, got -1"),
    "negative-ratio": ("host:\n  ram_to_gpu_memory_ratio_min: -0.5\n",
                       "'host.ram_to_gpu_memory_ratio_min' must be a finite number >= 0, got -0.5"),
    "zero-message-size": ("bandwidth:\n  nccl_allreduce_size_B: 0\n",
                          "'bandwidth.nccl_allreduce_size_B' must be a finite number >= 1, got 0"),
    "negative-disk-minimum": ("host:\n  disk_free_GiB_min:\n    /: -.inf\n",
                              "'host.disk_free_GiB_min./' must be a finite number >= 0, got -inf"),
    "relative-disk-path": ("host:\n  disk_free_GiB_min:\n    tmp: 5\n",
                           "'host.disk_free_GiB_min' keys are absolute paths, got 'tmp'"),
    "disk-minimum-not-a-number": ("host:\n  disk_free_GiB_min:\n    /tmp: lots\n",
                                  "'host.disk_free_GiB_min./tmp' must be a number, got 'lots'"),
    # 9. a misspelt name in a list would turn its check off: refused, with the names that exist
    "library-typo": ("libraries:\n  required: [cudart, cudnnn]\n",
                     "'libraries.required' has unknown name 'cudnnn' (did you mean 'cudnn'? "
                     "known: cudart, cudnn, nccl, mpi)"),
    "library-upper-case": ("libraries:\n  required: [NCCL]\n",
                           "'libraries.required' has unknown name 'NCCL' (known: cudart, cudnn, nccl, mpi)"),
    "clock-reason-typo": ("health:\n  clocks_event_reasons_fail: [hw_slowdwn]\n",
                          "'health.clocks_event_reasons_fail' has unknown name 'hw_slowdwn' (did you mean "
                          "'hw_slowdown'? known: gpu_idle, applications_clocks_setting, sw_power_cap, hw_slowdown, "
                          "sync_boost, sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown, "
                          "display_clock_setting)"),
    "framework-typo": ("frameworks:\n  required: [tensorflw]\n",
                       "'frameworks.required' has unknown name 'tensorflw' (did you mean 'tensorflow'? "
                       "known: tensorflow, horovod, torch)"),
    "op-as-controller": ("frameworks:\n  horovod_controllers_required: [nccl]\n",
                         "'frameworks.horovod_controllers_required' has unknown name 'nccl' (known: mpi, gloo)"),
    "horovod-op-typo": ("frameworks:\n  horovod_ops_required: [ncl]\n",
                        "'frameworks.horovod_ops_required' has unknown name 'ncl' (did you mean 'nccl'? "
                        "known: nccl, mpi, gloo, ddl, ccl, mlsl)"),
    "list-item-not-a-name": ("libraries:\n  required: [3]\n", "'libraries.required' holds names, got 3"),
    "inherits-not-text": ("inherits: [generic, lab]\n", "'inherits' must be text, got ['generic', 'lab']"),
    # a version that is no version compared as nothing and enforced nothing
    "driver-latest": ("gpu:\n  driver_version_min: latest\n",
                      "'gpu.driver_version_min' must be a version such as \"535.54.03\" or \"12.2\", got 'latest'"),
    "cuda-empty": ("gpu:\n  cuda_driver_version_min: ''\n",
                   "'gpu.cuda_driver_version_min' must be a version such as \"535.54.03\" or \"12.2\", got ''"),
    "capability-word": ("gpu:\n  compute_capability_min: hopper\n",
                        "'gpu.compute_capability_min' must be a version such as \"535.54.03\" or \"12.2\", got "
                        "'hopper'"),
    "bad-regex": ("gpu:\n  name_regex: 'H100('\n",
                  "'gpu.name_regex' is a bad regular expression 'H100(': missing ), unterminated subpattern "
                  "at position 4"),
}


@pytest.mark.parametrize("case", list(BAD_TEXT))
def test_a_profile_file_that_cannot_be_loaded_is_one_line(tmp_path: Path, case: str) -> None:
    text, error = BAD_TEXT[case]
    profile = tmp_path / f"{case}.yaml"
    profile.write_text(text)
    assert error_line(node_with(profile)) == f"gpucheck: error: profile {profile}{error}"


@pytest.mark.parametrize("case", list(BAD_VALUE))
def test_a_value_out_of_range_or_unknown_is_one_line_naming_the_key(tmp_path: Path, case: str) -> None:
    text, error = BAD_VALUE[case]
    profile = tmp_path / f"{case}.yaml"
    profile.write_text(f"name: {case}\n{text}")
    assert error_line(node_with(profile)) == f"gpucheck: error: {profile}: {error}"


def test_a_profile_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    # 10. Latin-1 from an editor: "é" is the single byte 0xe9.
    profile = tmp_path / "latin1.yaml"
    profile.write_bytes("name: latin1\ndescription: nœud de calcul, réseau\n".encode("latin-1", "replace"))
    offset = profile.read_bytes().index(b"\xe9")
    assert error_line(node_with(profile)) == (f"gpucheck: error: profile {profile} is not UTF-8 text "
                                              f"(byte 0xe9 at offset {offset})")


def inherits_chain(directory: Path, length: int) -> Path:
    """p0 inherits p1 inherits ... p{length}; the last inherits nothing."""
    for n in range(length + 1):
        parent = f"inherits: p{n + 1}\n" if n < length else ""
        (directory / f"p{n}.yaml").write_text(f"name: p{n}\n{parent}gpu:\n  count: {n % 8 + 1}\n")
    return directory / "p0.yaml"


def test_a_1200_deep_inherits_chain_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    # 8. Before: RecursionError (a traceback). The chain is read in a loop and stops at 32 profiles.
    first = inherits_chain(tmp_path, 1200)
    assert error_line(node_with(first)) == (f"gpucheck: error: profile {first}: its `inherits` chain is longer "
                                            "than 32 profiles (p0 -> p1 -> ... -> p32)")


def test_a_32_deep_chain_still_loads_with_the_nearest_value(tmp_path: Path) -> None:
    first = inherits_chain(tmp_path, 31)
    done = node_with(first)
    assert done.returncode != 3 and "Traceback" not in done.stderr, done.stderr
    assert '"count": 1' in done.stdout and '"profile": "p0"' in done.stdout  # p0's own count wins


def test_a_profile_inheriting_itself_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\ninherits: b\n")
    (tmp_path / "b.yaml").write_text("name: b\ninherits: a\n")
    assert error_line(node_with(tmp_path / "a.yaml")) == (
        f"gpucheck: error: profile {tmp_path / 'a.yaml'} inherits itself "
        f"(through {tmp_path / 'a.yaml'} -> {tmp_path / 'b.yaml'})")


def listing(directory: Path, *extra: str) -> dict[str, str]:
    """`gpucheck profiles --profiles-dir DIR`: name -> the rest of its line."""
    done = run_gpucheck(["profiles", "--profiles-dir", str(directory), *extra], timeout=LIMIT_S)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    rows = [line[2:].split(None, 1) for line in done.stdout.splitlines() if line[:1] in (" ", "*") and line[2:]]
    return {name: rest for name, rest in rows}


def test_profiles_lists_every_broken_profile_of_a_directory_and_selection_goes_on(tmp_path: Path) -> None:
    # Selection loads every profile of the directory: a bomb or a deep chain among them must neither hang it
    # nor stop it. Each broken one is listed with its one-line reason; the generic profile is still chosen.
    (tmp_path / "bomb.yaml").write_text(BAD_TEXT["billion-laughs"][0])
    (tmp_path / "latin1.yaml").write_bytes(b"name: latin1\ndescription: r\xe9seau\n")
    (tmp_path / "typo.yaml").write_text("name: typo\nlibraries:\n  required: [cudnnn]\n")
    inherits_chain(tmp_path, 40)
    rows = listing(tmp_path)
    assert rows["bomb"] == (f"BROKEN: profile {tmp_path / 'bomb.yaml'} expands to more than 10000 YAML nodes "
                            f"(anchors and aliases used over and over)  [{tmp_path / 'bomb.yaml'}]")
    assert rows["latin1"].startswith(f"BROKEN: profile {tmp_path / 'latin1.yaml'} is not UTF-8 text (byte 0xe9")
    assert rows["typo"].startswith(f"BROKEN: {tmp_path / 'typo.yaml'}: 'libraries.required' has unknown name")
    assert rows["p0"].startswith(f"BROKEN: profile {tmp_path / 'p0.yaml'}: its `inherits` chain is longer than 32")
    assert not rows["p9"].startswith("BROKEN")  # 31 below it: loads
    assert rows["generic"].startswith("any NVIDIA GPU node")


def test_names_are_checked_as_the_checks_read_them(tmp_path: Path) -> None:
    # "libcudnn" is read as cudnn, Horovod names in any case: these load.
    (tmp_path / "site.yaml").write_text(
        "name: site\ninherits: generic\ndescription: site variant\nlibraries:\n  required: [libcudnn, nccl]\n"
        "frameworks:\n  required: [torch]\n  horovod_controllers_required: [MPI, gloo]\n"
        "  horovod_ops_required: [NCCL]\nhealth:\n  clocks_event_reasons_warn: [sw_power_cap]\n")
    assert listing(tmp_path, "--no-detect")["site"].startswith("site variant  [")
