"""The inventory, read by real ansible-core from temporary INI and YAML inventories: groups, patterns,
--limit, host_vars/group_vars, connection variables, ansible.cfg, and every bad input as one line."""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import pytest
import yaml
from cluster_helpers import run_cluster

from gpucheck.cluster.inventory import InventoryError, load

INI = """\
[gpu_nodes]
node01 ansible_host=127.0.0.1 ansible_port=2201 ansible_user=alice ansible_ssh_private_key_file={key}
node02 ansible_host=127.0.0.1 ansible_port=2202 ib_address=127.0.1.2
node03 ansible_ssh_common_args='-o UserKnownHostsFile={known} -o StrictHostKeyChecking=no -o ConnectTimeout=4'

[admin]
admin01 ansible_host=127.0.0.1

[empty]
"""


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "id_test"
    path.write_text("not really a key, but readable\n")
    return path


@pytest.fixture
def ini(tmp_path: Path, key: Path) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text(INI.format(key=key, known=tmp_path / "known_hosts"))
    return path


def names(inventory) -> list[str]:
    return [h.name for h in inventory.hosts]


def test_ini_hosts_get_their_connection_variables(ini: Path, key: Path, tmp_path: Path) -> None:
    inv = load([str(ini)])
    assert inv.pattern == "gpu_nodes" and names(inv) == ["node01", "node02", "node03"]
    node01, node02, node03 = inv.hosts
    assert (node01.address, node01.port, node01.user, node01.key_file) == ("127.0.0.1", 2201, "alice", str(key))
    assert node02.vars == {"ib_address": "127.0.1.2"} and node02.groups == ("gpu_nodes",)
    assert node02.user == getpass.getuser()  # no ansible_user: the current user
    assert (node03.address, node03.port, node03.key_file) == ("node03", 22, None)
    assert node03.known_hosts[-1] == str(tmp_path / "known_hosts")
    assert node03.strict_host_key_checking is False and node03.connect_timeout == 4.0
    assert node01.strict_host_key_checking is True  # ansible's host_key_checking default


def test_without_a_gpu_nodes_group_the_default_is_all(tmp_path: Path) -> None:
    path = tmp_path / "plain.ini"
    path.write_text("a1 ansible_host=127.0.0.1\n[rack]\nb1 ansible_host=127.0.0.1\n")
    inv = load([str(path)])
    assert inv.pattern == "all" and sorted(names(inv)) == ["a1", "b1"]


@pytest.mark.parametrize(("pattern", "limit", "expected"), [
    ("all", None, ["node01", "node02", "node03", "admin01"]),
    ("admin", None, ["admin01"]),
    ("gpu_nodes:!node02", None, ["node01", "node03"]),
    ("~node0[13]", None, ["node01", "node03"]),
    ("node0*", None, ["node01", "node02", "node03"]),
    (None, "node02", ["node02"]),
    (None, "gpu_nodes[0:1]", ["node01", "node02"]),
    ("all", "admin,node03", ["node03", "admin01"]),
])
def test_patterns_and_limits_select_as_ansible_does(ini: Path, pattern, limit, expected) -> None:
    assert names(load([str(ini)], pattern, limit)) == expected


def test_yaml_inventory_with_group_vars_and_host_vars_dirs(tmp_path: Path, key: Path) -> None:
    root = tmp_path / "inv"
    (root / "group_vars").mkdir(parents=True)
    (root / "host_vars").mkdir()
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-a": {"ansible_host": "127.0.0.1"}, "gpu-b": {"ansible_host": "127.0.0.2"}}}}}}))
    (root / "group_vars" / "gpu_nodes.yml").write_text(f"ansible_user: ops\nansible_ssh_private_key_file: {key}\n"
                                                        "ansible_port: 2222\n")
    (root / "host_vars" / "gpu-b.yml").write_text("ansible_port: 2223\nib_address: '{{ ansible_host }}'\n")
    inv = load([str(root)])
    a, b = inv.hosts
    assert (a.user, a.port, a.key_file) == ("ops", 2222, str(key))
    assert (b.user, b.port, b.vars) == ("ops", 2223, {"ib_address": "127.0.0.2"})  # templated, as in Ansible


def test_the_cluster_is_the_inventorys_cluster_name_and_one_per_inventory(tmp_path: Path) -> None:
    """What its runs are recorded under (one history store per cluster): group_vars/all's cluster_name, templated;
    Slurm's default name where there is none; two names in one inventory are refused, naming the hosts. (A folder
    each: Ansible's vars plugin remembers what a folder held within one process.)"""
    def inventory(name: str, all_vars: str = "", gpu_b_vars: str = "") -> str:
        root = tmp_path / name
        (root / "group_vars").mkdir(parents=True)
        (root / "host_vars").mkdir()
        (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
            "gpu-a": {"ansible_host": "127.0.0.1"}, "gpu-b": {"ansible_host": "127.0.0.2"}}}}}}))
        (root / "group_vars" / "all.yml").write_text(all_vars or "{}\n")
        (root / "host_vars" / "gpu-b.yml").write_text(gpu_b_vars or "{}\n")
        return str(root)

    assert load([inventory("unnamed")]).cluster == "gpucheck"
    assert load([inventory("named", "site: west\ncluster_name: '{{ site }}-gpu'\n")]).cluster == "west-gpu"
    two = inventory("two", "cluster_name: west-gpu\n", "cluster_name: east-gpu\n")
    with pytest.raises(InventoryError, match=r"more than one cluster_name: east-gpu \(gpu-b\); west-gpu \(gpu-a\)"):
        load([two])
    assert load([two], limit="gpu-b").cluster == "east-gpu"


def test_templated_connection_variables(tmp_path: Path) -> None:
    path = tmp_path / "t.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": {"base_port": 2200}, "hosts": {
        "n1": {"ansible_host": "{{ inventory_hostname }}.loopback.test", "ansible_port": "{{ base_port + 5 }}"}}}}))
    [host] = load([str(path)]).hosts
    assert (host.address, host.port) == ("n1.loopback.test", 2205)


def test_several_inventories_are_merged(ini: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra.ini"
    extra.write_text("[gpu_nodes]\nnode09 ansible_host=127.0.0.1\n")
    assert names(load([str(ini), str(extra)])) == ["node01", "node02", "node03", "node09"]


def test_default_inventory_comes_from_ansible_cfg_in_the_current_directory(tmp_path: Path, ini: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ansible.cfg").write_text(f"[defaults]\ninventory = {ini.name}\nremote_user = zed\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    inv = load()
    assert inv.sources == [str(ini)] and inv.config_file == str(tmp_path / "ansible.cfg")
    assert [h.user for h in inv.hosts] == ["alice", "zed", "zed"]  # remote_user is the default user


def test_ansible_config_variable_names_the_config(tmp_path: Path, ini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "conf"
    elsewhere.mkdir()
    (elsewhere / "site.cfg").write_text(f"[defaults]\ninventory = {ini}\nhost_key_checking = False\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(elsewhere / "site.cfg"))
    monkeypatch.chdir(elsewhere)
    inv = load()
    assert inv.sources == [str(ini)]
    assert [h.strict_host_key_checking for h in inv.hosts] == [False, False, False]


# ---- bad input: one line each, and nothing from Ansible on the terminal

@pytest.mark.parametrize(("args", "message"), [
    (lambda d, ini: ([str(d / "nope.ini")], None, None), "inventory not found: "),
    (lambda d, ini: ([str(ini)], "empty", None), "group 'empty' has no hosts in "),
    (lambda d, ini: ([str(ini)], "nothere", None), "no host matches 'nothere' in "),
    (lambda d, ini: ([str(ini)], None, "node42"), "no host matches 'gpu_nodes' with --limit 'node42'"),
    (lambda d, ini: ([str(ini)], "~(", None), "bad host pattern '~(': "),
    (lambda d, ini: ([str(ini)], "gpu_nodes:&", None), "bad host pattern 'gpu_nodes:&'"),
    (lambda d, ini: ([str(ini)], None, "@missing-limit-file"), "bad host pattern"),
])
def test_bad_input_is_one_line(tmp_path: Path, ini: Path, capfd: pytest.CaptureFixture, args, message) -> None:
    with pytest.raises(InventoryError) as caught:
        load(*args(tmp_path, ini))
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)
    out, err = capfd.readouterr()
    assert out == "" and err == "", "Ansible printed on its own"


def test_an_unreadable_key_file_is_left_to_that_hosts_connection(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """One host's missing key must not stop the others: the inventory keeps the path, the fan-out makes it
    that host's `auth` error (tests/faults/test_cluster_faults.py runs it)."""
    path = tmp_path / "hosts.ini"
    path.write_text(f"[gpu_nodes]\nn1 ansible_ssh_private_key_file={tmp_path / 'missing_key'}\n"
                    f"n2 ansible_ssh_private_key_file={tmp_path}\nn3\n")
    assert [h.key_file for h in load([str(path)]).hosts] == [str(tmp_path / "missing_key"), str(tmp_path), None]
    assert capfd.readouterr() == ("", "")


@pytest.mark.parametrize(("name", "shown"), [
    ("node 01", "'node 01'"), ("node01\nnode99", "'node01\\nnode99'"), ("n\tx", "'n\\tx'"),
    ("n\u200bx", "'n\\u200bx'"), ("n\u2028x", "'n\\u2028x'")])
def test_a_host_name_that_is_not_one_word_is_refused(tmp_path: Path, name: str, shown: str) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"ok1": {}, name: {}}}}}}))
    with pytest.raises(InventoryError) as caught:
        load([str(path)])
    assert str(caught.value).startswith(f"host name {shown} has whitespace or a control character: ")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("variables", "message"), [
    ({"ansible_host": "-oProxyCommand=touch /tmp/pwned"}, "n2: ansible_host '-oProxyCommand=touch /tmp/pwned' is not "),
    ({"ansible_host": "-np"}, "n2: ansible_host '-np' is not one word"),
    ({"ansible_user": "-lroot"}, "n2: ansible_user '-lroot' is not one word"),
    ({"ib_address": "10.0.0.2 --mca"}, "n2: ib_address '10.0.0.2 --mca' is not one word"),
    ({"slurm_node_name": "--partition=x"}, "n2: slurm_node_name '--partition=x' is not one word"),
    ({"slurm_node_name": ""}, "n2: slurm_node_name '' is not one word"),
])
def test_no_inventory_value_reaches_a_command_line_as_an_option(tmp_path: Path, variables: dict, message: str) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"n1": {}, "n2": variables}}}}}))
    with pytest.raises(InventoryError) as caught:
        load([str(path)])
    assert str(caught.value).startswith(message) and "read as an option" in str(caught.value)


def test_rack_leaf_switch_and_pdu_are_labels_taken_as_written(tmp_path: Path) -> None:
    """They never reach a command line (stage shape, the burn's racks and the reports read them): spaces are fine, an
    empty one is no label, a label that starts with '-' is a label; only a control character is refused."""
    path = tmp_path / "hosts.yml"
    hosts = {"n1": {"rack": "Rack 12 (row B)", "leaf_switch": "-leaf 3", "pdu": ""},
             "n2": {"rack": "Rack 12 (row B)", "leaf_switch": " ", "pdu": "PDU A"}}
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    assert [h.vars for h in load([str(path)]).hosts] == [{"rack": "Rack 12 (row B)", "leaf_switch": "-leaf 3"},
                                                         {"rack": "Rack 12 (row B)", "pdu": "PDU A"}]
    hosts["n2"]["rack"] = "Rack 12\nnode99 drained"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    with pytest.raises(InventoryError) as caught:
        load([str(path)])
    assert str(caught.value) == ("n2: rack 'Rack 12\\nnode99 drained' has a control character: a label is one line "
                                 "of text")


def test_a_host_named_like_an_option_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"n1": {}, "-oProxyCommand=x": {}}}}}}))
    with pytest.raises(InventoryError, match="host name '-oProxyCommand=x' starts with '-'"):
        load([str(path)])


@pytest.mark.parametrize(("pattern", "limit", "message"), [
    (None, "node01,nothere", "--limit 'nothere' matches no host or group in "),
    (None, "!nothere", "--limit 'nothere' matches no host or group in "),
    (None, "gpu_nodes:&gpu_nodes:!typo", "--limit 'typo' matches no host or group in "),
    ("gpu_nodes:nothere", None, "--pattern 'nothere' matches no host or group in "),
    (None, "", "--limit '' matches no host: it names no host or group"),
    (None, " , ", "--limit ' , ' matches no host: it names no host or group"),
])
def test_a_pattern_part_that_ansible_would_skip_is_refused(ini: Path, capfd: pytest.CaptureFixture, pattern, limit,
                                                           message) -> None:
    with pytest.raises(InventoryError) as caught:
        load([str(ini)], pattern, limit)
    assert str(caught.value).startswith(message), str(caught.value)
    assert capfd.readouterr() == ("", "")


def test_an_inventory_that_does_not_parse(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    path = tmp_path / "broken.yml"
    path.write_text("all:\n  hosts:\n    n1: {ansible_host: [unclosed\n")
    with pytest.raises(InventoryError, match=r"^cannot read inventory .*broken\.yml: "):
        load([str(path)])
    assert capfd.readouterr() == ("", "")


def test_bad_values(tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text("[gpu_nodes]\nn1 ansible_port=ssh\n")
    with pytest.raises(InventoryError, match=r"^n1: ansible_port 'ssh' is not a port number$"):
        load([str(path)])
    path.write_text("[gpu_nodes]\nn1 ansible_host='{{ undefined_thing }}'\n")
    with pytest.raises(InventoryError, match=r"^n1: cannot template ansible_host: "):
        load([str(path)])
    path.write_text("[gpu_nodes]\nn1 ansible_ssh_common_args='-o \"UserKnownHostsFile=/x'\n")
    with pytest.raises(InventoryError, match=r"^n1: cannot split ssh arguments"):
        load([str(path)])
    for value in ("inf", "nan", "0", "-1", "soon", "1e400"):
        path.write_text(f"[gpu_nodes]\nn1 ansible_ssh_common_args='-o ConnectTimeout={value}'\n")
        with pytest.raises(InventoryError, match=rf"^n1: ConnectTimeout='{value}' is not a number of seconds above 0$"):
            load([str(path)])


def vault(text: str) -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret

    return VaultLib([("default", VaultSecret(b"correct horse"))]).encrypt(text).decode()


def test_vault_encrypted_values_are_a_clear_error(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    encrypted = vault("10.0.0.7")
    path = tmp_path / "hosts.yml"
    path.write_text("all:\n  hosts:\n    n1:\n      ansible_host: !vault |\n"
                    + "".join(f"        {line}\n" for line in encrypted.splitlines()))
    with pytest.raises(InventoryError, match=r"^n1: ansible_host is vault-encrypted and gpucheck cluster takes no "
                                             r"vault password"):
        load([str(path)])
    root = tmp_path / "inv"
    (root / "host_vars").mkdir(parents=True)
    (root / "hosts.ini").write_text("n2\n")
    (root / "host_vars" / "n2.yml").write_text(vault("ansible_user: ops\n"))
    with pytest.raises(InventoryError, match=r"^n2: a vars file is vault-encrypted"):
        load([str(root)])
    assert capfd.readouterr() == ("", "")


def test_the_command_line_says_one_line_and_exits_3(tmp_path: Path, ini: Path) -> None:
    for args, message in (
        (["-i", str(tmp_path / "nope.ini")], "gpucheck: error: inventory not found: "),
        (["-i", str(ini), "--pattern", "empty"], "gpucheck: error: group 'empty' has no hosts in "),
        (["-i", str(ini), "--limit", "~("], "gpucheck: error: bad host pattern"),
        (["-i", str(ini), "--forks", "0"], "gpucheck: error: argument --forks: must be greater than 0"),
        (["-i", str(ini), "--straggler-fraction", "1.5"], "gpucheck: error: argument --straggler-fraction"),
        (["-i", str(ini), "--remote-command", "'unbalanced"], "gpucheck: error: --remote-command: "),
        (["-i", str(ini), "--report", str(ini / "sub")], "gpucheck: error: cannot create report directory"),
    ):
        done = run_cluster(args, cwd=tmp_path)
        assert done.returncode == 3, (args, done.stdout, done.stderr)
        assert done.stderr.startswith(message), (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
        assert done.stdout == ""


def test_no_inventory_anywhere_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_INVENTORY"] = str(tmp_path / "absent-hosts")
    done = run_cluster([], cwd=tmp_path, env=env)
    assert done.returncode == 3
    assert done.stderr.startswith("gpucheck: error: no inventory: pass -i INVENTORY"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
