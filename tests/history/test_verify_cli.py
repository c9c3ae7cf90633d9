"""`gpucheck verify REPORT --driver V`: the rolling upgrade's last word on a node, read on the node so that the
report's text stays in gpucheck's output (issue 35: node data out of Ansible templates)."""

from __future__ import annotations

import json

import pytest

from gpucheck.main import main


def write(tmp_path, results, driver="550.163.01"):
    path = tmp_path / "after.json"
    path.write_text(json.dumps({"facts": {"driver_version": driver}, "results": results}))
    return str(path)


PASS = [{"check": "gpu.count", "status": "pass", "reason": "8 GPUs"}, {"check": "gpu.x", "status": "warn"}]


def test_a_passing_report_on_the_wanted_driver_passes(tmp_path, capsys):
    assert main(["verify", write(tmp_path, PASS), "--driver", "550.163.01*"]) == 0
    assert capsys.readouterr().out.endswith("after.json: passes on driver 550.163.01\n")


def test_the_old_driver_or_a_failed_check_is_one_line_saying_why(tmp_path, capsys):
    assert main(["verify", write(tmp_path, PASS, driver="535.261.03"), "--driver", "550.163.01*"]) == 2
    assert capsys.readouterr().out == "gpucheck node exits 0, NVML driver 535.261.03 (wanted 550.163.01*)\n"
    bad = [*PASS, {"check": "stack.pins", "status": "fail", "reason": "libnccl2 2.18.5\n(pinned 2.21.5)"},
           {"check": "gpu.ecc", "status": "error", "reason": "{{ lookup('pipe', 'id') }} \x1b[2J"}]
    assert main(["verify", write(tmp_path, bad), "--driver", "550.*"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("gpucheck node exits 2, NVML driver 550.163.01 (wanted 550.*): stack.pins libnccl2 2.18.5 "
                          "(pinned 2.21.5); gpu.ecc {{ lookup('pipe', 'id') }}")
    assert "\x1b" not in out and out.count("\n") == 1  # a node's text, escaped for the terminal, on one line


@pytest.mark.parametrize("content, says", [
    ("not json", "not JSON"), ("[1, 2]", "not a node report"), ('{"results": 3}', "not a node report"),
    ('{"results": [], "facts": []}', "not a node report"),
])
def test_what_is_not_a_node_report_is_one_line_and_exit_3(tmp_path, capsys, content, says):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(SystemExit) as done:
        main(["verify", str(path)])
    err = capsys.readouterr().err
    assert done.value.code == 3 and says in err and err.count("\n") == 1
