"""The node knows what it is supposed to be and what site.yml installed: node.yaml as the gpucheck_agent role
renders it from each inventory (Ansible's own inventory, variables and templating, read back by the agent's
loader), the profiles' driver minimums against the stacks that could meet them, and the preflight that stops
a site whose stack's driver is too old for the profile it names."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from gpucheck import config, profiles
from gpucheck.node.stack.pins import matches
from gpucheck.versions import version_tuple

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "roles" / "gpucheck_agent" / "templates" / "node.yaml.j2"
DEFAULTS = REPO / "roles" / "gpucheck_agent" / "defaults" / "main.yml"


def lab_inventory(tmp_path: Path) -> Path:
    """The shape lab/inventory.py writes (its hosts.yml is generated), with the repository's lab group_vars."""
    directory = tmp_path / "lab-inventory"
    directory.mkdir()
    hosts = {"all": {"vars": {"lab_proxy_url": "http://10.77.0.1:3128"},
                     "children": {"admin": {"hosts": {}}, "gpu_nodes": {"hosts": {"node01": {}}}}}}
    (directory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    shutil.copytree(REPO / "inventory" / "lab" / "group_vars", directory / "group_vars")
    return directory


def render(inventory: Path, host: str) -> str:
    """node.yaml.j2 for one host as the role renders it: the host's variables by Ansible's precedence over
    the role's defaults, templated by Ansible (lazily, as a play does)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    try:  # ansible-core 2.19 templates only trusted text: what the role's files are
        from ansible.template import trust_as_template
    except ImportError:  # older ansible-core trusts every string
        def trust_as_template(text):
            return text
    from ansible.vars.hostvars import HostVars

    loader = DataLoader()
    inventory_manager = InventoryManager(loader=loader, sources=[str(inventory)])
    manager = VariableManager(loader=loader, inventory=inventory_manager)
    host_vars = manager.get_vars(host=inventory_manager.get_host(host))
    defaults = yaml.safe_load(DEFAULTS.read_text())
    variables = {**{k: trust_as_template(v) if isinstance(v, str) else v for k, v in defaults.items()}, **host_vars,
                 "hostvars": HostVars(inventory=inventory_manager, variable_manager=manager, loader=loader)}
    return Templar(loader=loader, variables=variables).template(trust_as_template(TEMPLATE.read_text()))


def node_yaml(tmp_path: Path, inventory: Path, host: str) -> config.NodeConfig:
    path = tmp_path / f"{host}.node.yaml"
    path.write_text(render(inventory, host))
    return config.load(path)


def catalog(site: str) -> dict:
    return yaml.safe_load((REPO / "inventory" / site / "group_vars" / "all" / "versions.yml").read_text())


def test_prod_gpu_node_knows_its_profile_and_the_stacks_pins(tmp_path) -> None:
    site = node_yaml(tmp_path, REPO / "inventory" / "prod", "node01")
    tf = catalog("prod")["gpu_stack_catalog"]["tf-horovod"]
    assert site.profile == "dgx-h100"
    assert site.pins == {"driver": tf["driver_version"], "cuda": tf["cuda_version"],
                         "cudnn": tf["cudnn_version"], "nccl": tf["nccl_version"]}
    stacks = {s.name: s for s in site.stacks}
    assert stacks["tf-horovod"].pins == {"tensorflow": "2.15.1", "horovod": "0.28.1"}
    assert stacks["torch"].pins == {"torch": "2.5.1"}
    assert stacks["tf-horovod"].python == "/opt/stacks/tf-horovod/bin/python"


def test_prod_admin_node_has_no_gpu_pins_and_chooses_its_profile(tmp_path) -> None:
    site = node_yaml(tmp_path, REPO / "inventory" / "prod", "admin01")
    assert site.profile == "auto" and site.pins == {} and site.stacks == []


def test_lab_node_is_the_lab_profile_with_what_the_lab_installs(tmp_path) -> None:
    """The stand-in NVIDIA repository's R535 driver and CUDA 12.4 with cuDNN and NCCL (exact versions),
    tensorflow-cpu==2.15.1 read as TensorFlow 2.15.1."""
    text = render(lab_inventory(tmp_path), "node01")
    assert "profile: lab\n" in text  # as tests/ansible/test_check_mode.py reads it in the role's diff
    (tmp_path / "node.yaml").write_text(text)
    site = config.load(tmp_path / "node.yaml")
    assert site.profile == "lab"
    assert site.pins == {"driver": "535.261.03", "cuda": "12.4", "cudnn": "8.9.7.29", "nccl": "2.18.5"}
    assert [(s.name, s.pins) for s in site.stacks] == [("tf-horovod", {"tensorflow": "2.15.1", "horovod": "0.28.1"})]


def test_a_prometheus_textfile_is_written_only_when_asked(tmp_path) -> None:
    inventory = lab_inventory(tmp_path)
    assert config.load(write(tmp_path / "default.yaml", render(inventory, "node01"))).prometheus_textfile is None
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    textfile = "/var/lib/prometheus/node-exporter/gpucheck.prom"
    hosts["all"]["children"]["gpu_nodes"]["hosts"]["node01"] = {"gpucheck_agent_prometheus_textfile": textfile}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    assert config.load(write(tmp_path / "asked.yaml", render(inventory, "node01"))).prometheus_textfile == textfile


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_lab_driver_pin_accepts_what_a_healthy_lab_host_reports() -> None:
    """A lab node's NVML answers the installed libnvidia-ml1's driver version (its scenario ends by reading what
    the stand-in package installs): the pin must be that package's version at the stack's branch."""
    from lab.nvidia_repo import load
    from lab.nvidia_repo.payloads import nvml_scenario

    stack = catalog("lab")["gpu_stack_catalog"][catalog("lab")["gpu_stack"]]
    nvml = next(p for p in load().packages
                if p.name == "libnvidia-ml1" and p.params["branch"] == stack["driver_branch"])
    reported = next(line.split("=", 1)[1].strip() for line in nvml_scenario(nvml).splitlines()
                    if line.startswith("driver_version"))
    assert matches(stack["driver_version"], reported), (stack["driver_version"], reported)


def minimums() -> dict[str, str]:
    """profile -> gpu.driver_version_min, with `inherits` followed by the agent's own loader."""
    found = {}
    listed = profiles.available(REPO / "checks")  # the profiles, not the other tables beside them (gpus.yaml)
    for name in sorted(n for n, path in listed.items() if path.parent == REPO / "checks"):
        minimum = profiles.load(str(listed[name])).get("gpu", "driver_version_min")
        if minimum:
            found[name] = str(minimum)
    return found


def test_every_profiles_driver_minimum_is_met_by_a_prod_stack() -> None:
    drivers = {name: s["driver_version"] for name, s in catalog("prod")["gpu_stack_catalog"].items()}
    found = minimums()
    assert {"dgx-h100", "hgx-h200", "lab"} <= set(found)
    unmet = {profile: minimum for profile, minimum in found.items()
             if not any(version_tuple(d) >= version_tuple(minimum) for d in drivers.values())}
    assert not unmet, f"no stack in inventory/prod meets these profiles' driver minimums: {unmet} (stacks: {drivers})"
    assert version_tuple(drivers["tf-horovod-r550"]) >= version_tuple(found["hgx-h200"]) > version_tuple(
        drivers["tf-horovod"])


def test_prods_expected_profile_accepts_prods_stack_driver() -> None:
    profile = yaml.safe_load((REPO / "inventory" / "prod" / "group_vars" / "gpu_nodes.yml").read_text())[
        "gpucheck_profile"]
    versions = catalog("prod")
    driver = versions["gpu_stack_catalog"][versions["gpu_stack"]]["driver_version"]
    assert version_tuple(driver) >= version_tuple(minimums()[profile]), (profile, driver)


PREFLIGHT_PLAY = """\
- name: The preflight's profile check alone
  hosts: all
  gather_facts: false
  tasks:
    - name: Run it
      ansible.builtin.include_role:
        name: preflight
        tasks_from: profile
"""


OLD = {"driver_branch": "470", "driver_version": "470.57.02"}
GLOB = {"driver_branch": "535", "driver_version": "535.*"}


CASES = {  # host: (profile, stack, passes)
    "h200-r535": ("hgx-h200", "tf-horovod", False),  # R535 cannot drive an H200
    "h200-r550": ("hgx-h200", "tf-horovod-r550", True),
    "h100-r535": ("dgx-h100", "tf-horovod", True),
    "a100-r470": ("dgx-a100", OLD, False),  # its minimum (535.54.03) is inherited from dgx-h100
    "lab-glob": ("lab", GLOB, True),  # the lab's glob: some 535 build can meet 535.54.03
    "auto-r470": ("auto", OLD, True),  # nothing to compare with
}


def host_lines(output: str) -> dict[str, str]:
    """What the run printed for each host: its result lines (`ok: [h]`, `fatal: [h]: ...`) and what is indented
    under them."""
    found: dict[str, str] = {}
    host = None
    for line in output.splitlines():
        if line[:1] in (" ", "\t") and host:
            found[host] += line + "\n"
            continue
        head = line.split("[", 1)
        host = head[1].split("]", 1)[0] if len(head) == 2 and head[0].rstrip(": ") in (
            "ok", "fatal", "skipping", "changed") else None
        if host:
            found[host] = found.get(host, "") + line + "\n"
    return found


def test_preflight_stops_a_stack_too_old_for_the_expected_profile(ansible_repo) -> None:
    """One run, a host for each case: the prod pins as the inventory's variables, each host's profile and stack."""
    play = ansible_repo.tmp_path / "play.yml"
    play.write_text(PREFLIGHT_PLAY)
    hosts = {host: {"ansible_connection": "local", "gpucheck_profile": profile,
                    **({"gpu_stack": stack} if isinstance(stack, str) else
                       {"gpu_stack": "other", "gpu_stack_catalog": {"other": stack}})}
             for host, (profile, stack, _) in CASES.items()}
    inventory = ansible_repo.tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"vars": catalog("prod"), "hosts": hosts}}))
    done = ansible_repo.run("ansible-playbook", "-i", str(inventory), str(play), timeout=300)
    output = done.stdout + done.stderr
    recap, printed = ansible_repo.recap(output), host_lines(output)
    assert set(recap) == set(CASES), output[-3000:]
    for host, (profile, _, ok) in CASES.items():
        said = " ".join(printed.get(host, "").split()).replace("''", "'")  # unfolded, unquoted (YAML results)
        assert (recap[host]["failed"] == 0) == ok, (host, said)
        if not ok:
            minimum, pin = ("550.54.14", "535.261.03") if profile == "hgx-h200" else ("535.54.03", "470.57.02")
            assert f"gpucheck_profile '{profile}' needs driver {minimum} or newer" in said, (host, said)
            assert f"pins driver {pin}" in said and "tf-horovod-r550" in said, (host, said)
        else:  # compared and passed, or (auto) not compared at all
            assert "needs driver" not in said and said.startswith("skipping:" if profile == "auto" else "ok:"), \
                (host, said)


def test_prod_node_knows_its_rack_and_leaf_switch_for_the_breaker(tmp_path) -> None:
    """The inventory's rack and leaf_switch, each with the Slurm names of the nodes that share it (the breaker's
    groups); the shares are the role's defaults."""
    breaker = node_yaml(tmp_path, REPO / "inventory" / "prod", "node01").breaker
    hosts = yaml.safe_load((REPO / "inventory" / "prod" / "hosts.yml").read_text())
    nodes = hosts["all"]["children"]["gpu_nodes"]["hosts"]
    rack_a = [name for name, spec in nodes.items() if spec.get("rack") == nodes["node01"]["rack"]]
    assert breaker.groups["rack"] == (nodes["node01"]["rack"], tuple(rack_a)) and len(rack_a) > 1
    assert breaker.groups["leaf_switch"][0] == nodes["node01"]["leaf_switch"]
    assert set(rack_a) < set(breaker.groups["leaf_switch"][1])  # a leaf switch serves two racks here
    assert (breaker.fleet_fraction, breaker.group_fraction, breaker.window_s) == (0.25, 0.5, 600.0)


def test_node_yaml_carries_what_the_owner_allows_repairs(tmp_path) -> None:
    """The role's repair settings reach node.yaml, written out, as config.load reads them: no reboot unless
    allowed."""
    from gpucheck.config import RepairSettings

    text = yaml.safe_load(render(REPO / "inventory" / "prod", "node01"))
    assert text["repair"] == {"allow_reboot": False, "return_window_s": 86400, "jobs_wait_s": 3600, "burn_s": 120}
    assert node_yaml(tmp_path, REPO / "inventory" / "prod", "node01").repair == RepairSettings()
