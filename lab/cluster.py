"""The lab as a whole: up, down, status, faults. Each step is recorded in the state file as it is
taken, so `down` (or a failed/interrupted `up`) can remove exactly what exists.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from lab import (
    config,
    gpus,
    host,
    ib_ports,
    images,
    inventory,
    kernel_log,
    keys,
    net,
    procs,
    rootfs,
    slurm,
    standin_repo,
    state,
)
from lab.errors import EXIT_FAIL, EXIT_OK, EXIT_WARN, LabError
from lab.kubernetes import agent_image, build, lab_plane, node_host, node_kit
from lab.progress import fmt_duration, plural, say, step
from lab.ssh import ssh_run
from lab.state import HostState, LabState

PROXY_SCRIPT = Path(__file__).resolve().parent / "proxy.py"


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, mounts, a bridge): run it as root")


def _leftovers() -> list[str]:
    found = [f"namespace {n}" for n in net.list_netns()] + [f"link {n}" for n in net.list_links()]
    found += [f"process {p}" for p in procs.tagged() + procs.host_boots() + lab_plane.running()]
    return found


# --------------------------------------------------------------------------------------------- up
@dataclass
class UpOptions:
    hosts: int = 3
    scenarios: list[str] | None = None  # one per host; default: config.DEFAULT_SCENARIO everywhere
    subnet: str = config.DEFAULT_SUBNET
    allow: tuple[str, ...] = ()
    golden: bool = True
    playbook: Path = config.DEFAULT_PLAYBOOK
    admin: bool = False  # also an admin node, config.ADMIN_HOST (no GPUs; the Slurm controller)
    kubernetes: bool = False  # a control plane on the bridge, and every GPU host a Kubernetes node
    share: tuple[Path, ...] = ()  # directories bound read-only at their own path into every GPU host
    ib_ports: int = 0  # simulated InfiniBand ports in every GPU host's fake sysfs (lab/ib_ports.py)


@dataclass(frozen=True)
class KubernetesKit:
    binaries: Path  # the control plane's (lab/kubernetes/build.py)
    node: Path  # the node kit (lab/kubernetes/node_kit.py)
    agent_image: Path  # the lab's gpucheck image (lab/kubernetes/agent_image.py)


def up(opts: UpOptions) -> LabState:
    require_root()
    if not 1 <= opts.hosts <= config.MAX_HOSTS:
        raise LabError(f"--hosts must be between 1 and {config.MAX_HOSTS} (got {opts.hosts})")
    scenarios = opts.scenarios or [config.DEFAULT_SCENARIO] * opts.hosts
    if len(scenarios) != opts.hosts:
        raise LabError(f"--scenarios names {len(scenarios)} scenarios for {opts.hosts} hosts: give one per host")
    if not 0 <= opts.ib_ports <= 18:
        raise LabError(f"--ib-ports must be between 0 and 18 (got {opts.ib_ports})")
    if unshared := [str(d) for d in opts.share if not (d.is_absolute() and d.is_dir())]:
        raise LabError(f"--share takes an absolute path of a directory: {', '.join(unshared)}")
    why = net.namespaces_available()
    if why:
        raise LabError(f"cannot build the lab here: {why}")
    with state.locked():
        existing = state.load()
        if existing is not None:
            raise LabError(f"a lab is already up ({describe(existing)}): run `python3 -m lab down` first")
        leftovers = _leftovers()
        if leftovers:
            raise LabError(f"pieces of an earlier lab are still here ({', '.join(leftovers[:3])}): "
                           "run `python3 -m lab down` first")
        for name in sorted(set(scenarios)):
            gpus.scenario_file(name)  # fail before creating anything
        net.check_subnet(opts.subnet, opts.hosts + int(opts.admin))
        begin = time.monotonic()
        base = rootfs.ensure_base()
        lowers, image = [str(base)], "base"
        if opts.golden:
            found = images.find(opts.playbook)
            if found:
                lowers.insert(0, str(found[1]))
                image = f"golden {found[0]}"
            else:
                say(f"no golden image for {opts.playbook.name} as it is now: hosts start from the bare base "
                    "(`python3 -m lab build` makes one)")
        library = gpus.library()
        kube = KubernetesKit(build.build(say), node_kit.ensure(say), agent_image.ensure(say)) \
            if opts.kubernetes else None
        st = LabState(subnet=opts.subnet, bridge=config.BRIDGE, bridge_address=net.bridge_address(opts.subnet),
                      lowers=lowers, image=image, netns_dir_mounted_by_lab=not net.netns_dir_is_mount())
        state.save(st)
        try:
            _create(st, opts, scenarios, library, kube)
        except BaseException as exc:
            reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            say(f"up {reason}: removing what it had created")
            _teardown(st)
            raise
        admin = f" and {config.ADMIN_HOST}" if opts.admin else ""
        say(f"hosts up: {plural(opts.hosts, 'host')}{admin} in {fmt_duration(time.monotonic() - begin)}; "
            f"inventory {os.path.relpath(config.INVENTORY)}")
        return st


def _create(st: LabState, opts: UpOptions, scenarios: list[str], library: Path, kube: KubernetesKit | None) -> None:
    namespaces = opts.hosts + int(opts.admin)
    with step(f"network: bridge {config.BRIDGE} {st.bridge_address}/24, proxy, {plural(namespaces, 'namespace')}"):
        net.create_bridge(st.bridge_address)
        st.bridge_created = True
        state.save(st)
        _start_proxy(st, opts.allow)
        plan = [(config.ADMIN_HOST, 0, "", "admin")] if opts.admin else []
        plan += [(config.host_name(i), i, scenarios[i - 1], "node") for i in range(1, opts.hosts + 1)]
        for name, index, scenario, role in plan:
            h = HostState(name=name, address=net.host_address(opts.subnet, index), netns=config.netns_name(name),
                          veth=config.veth_name(name), scenario=scenario, role=role)
            st.hosts.append(h)
            state.save(st)
            net.create_host_link(h.netns, h.veth, h.address)
    standin_repo.start(st)
    plane, nodes = None, [h.name for h in st.hosts if h.role == "node"]
    if kube:
        with step(f"kubernetes: a control plane on {st.bridge_address} (etcd, apiserver, controller-manager, "
                  "scheduler)"):
            plane = lab_plane.start(kube.binaries, st.bridge_address, nodes)
            st.kubernetes_server = plane.server
            state.save(st)
    with step(f"hosts: {', '.join(h.name for h in st.hosts)} (overlay root, systemd, simulated GPUs on the nodes)"):
        client_pub = keys.generate(config.KEY_FILE, host.LAB_KEY_COMMENT)
        client_key = config.KEY_FILE.read_text()
        idents: dict[str, host.HostIdentity] = {}
        known: list[str] = []
        for h in st.hosts:
            keyfile = config.host_run_dir(h.name) / "ssh_host_ed25519_key"
            pub = keys.generate(keyfile, f"root@{h.name}")
            idents[h.name] = host.HostIdentity(keyfile.read_text(), pub, client_key, client_pub)
            known.append(keys.known_hosts_line([h.name, h.address], pub))
        known_text = "\n".join(known) + "\n"
        config.KNOWN_HOSTS.write_text(known_text)
        started = {}
        for h in st.hosts:
            rootfs.prepare_host_dirs(h.name)
            if h.role == "node":
                gpus.install(h.scenario, config.host_run_dir(h.name) / "fakenvml", h.name, gpus.reset_layer(h.name))
                h.ib_ports = opts.ib_ports
                ib_ports.write(sys_tree(h.name), h.ib_ports)
            node = node_host.parts(h.name, h.address, config.cgroup_name(h.name), kube.node,
                                   lab_plane.join(plane, h.name), kube.agent_image) \
                if kube and plane and h.name in nodes else None
            if opts.share and h.role == "node":
                node = {**(node or {}), "binds": [*(node or {}).get("binds", []),
                                                  *({"source": str(d), "target": str(d)} for d in opts.share)]}
            spec = host.spec(h, st.hosts, st.lowers, idents[h.name], known_text, st.proxy_url,
                             library if h.role == "node" else None, node)
            proc = host.start(h, spec)
            h.pid = proc.pid
            state.save(st)
            started[h.name] = (h, proc)
        host.wait_ready(started)
    with step("checking SSH into every host with the lab's key and known_hosts"):
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda h: (h, ssh_run(h.address, "hostname", timeout=30)), st.hosts))
        for h, proc in results:
            if proc.returncode != 0 or proc.stdout.strip() != h.name:
                why = proc.stderr.strip().splitlines()[-1:] or [proc.stdout.strip()]
                raise LabError(f"ssh root@{h.address} ({h.name}) does not work: {why[0]}")
    if plane:
        lab_plane.wait_ready(plane, {h.name: h.address for h in st.hosts if h.name in nodes}, say)
    st.phase = "up"
    state.save(st)
    inventory.write(st)


def _start_proxy(st: LabState, extra: tuple[str, ...]) -> None:
    allowed = rootfs.archive_hosts(rootfs.debian_sources()) + [h for h in extra if h]
    st.allowed_hosts = sorted(set(allowed))
    listen = f"{st.bridge_address}:{config.PROXY_PORT}"
    cmd = [sys.executable, "-I", str(PROXY_SCRIPT), "--listen", listen]
    for name in st.allowed_hosts:
        cmd += ["--allow", name]
    config.PROXY_LOG.unlink(missing_ok=True)
    proc = procs.spawn([*cmd, config.TAG], config.PROXY_LOG)
    st.proxy_pid = proc.pid
    st.proxy_url = f"http://{listen}"
    state.save(st)
    procs.wait_serving(proc, st.bridge_address, config.PROXY_PORT, "the lab proxy", config.PROXY_LOG)


# ------------------------------------------------------------------------------------------- down
def down() -> str:
    require_root()
    with state.locked():
        st = state.load()
        if st is None and not _leftovers() and not config.INVENTORY.exists():
            return "no lab is up; nothing to remove"
        begin = time.monotonic()
        n = _teardown(st)
        took = fmt_duration(time.monotonic() - begin)
        return f"lab is down: removed {plural(n, 'host')}, the bridge and the proxy in {took}"


def _teardown(st: LabState | None) -> int:
    """Remove everything of the lab: what the state names, then whatever carries the lab's prefix/tag."""
    hosts = st.hosts if st else []
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(host.end, hosts))
    for ns in net.list_netns():
        pids = net.netns_pids(ns)
        for pid in pids:
            procs.signal_pid(pid, 9)
        procs.wait_gone(pids, 3.0)
        net.delete_netns(ns)
    for pid in (st.proxy_pid, st.nvidia_repo_pid) if st else ():
        if procs.is_lab_process(pid):
            procs.end([pid])  # type: ignore[list-item]
    slurm.stop(st)
    lab_plane.stop()
    procs.end(procs.tagged(), grace=2.0)
    procs.end(procs.host_boots(), grace=10.0)  # a host whose supervisor was killed: halt it
    for link in net.list_links():
        net.delete_link(link)
    if st and st.netns_dir_mounted_by_lab:
        net.unmount_netns_dir_if_empty()
    for directory in (config.RUN_DIR / "hosts", config.DATA_DIR / "hosts"):
        shutil.rmtree(directory, ignore_errors=True)
    standin_repo.remove()
    for path in (config.KEY_FILE, config.KEY_FILE.with_name(config.KEY_FILE.name + ".pub"), config.KNOWN_HOSTS):
        path.unlink(missing_ok=True)
    inventory.remove()
    state.remove()
    left = _leftovers()
    if left:
        raise LabError(f"down could not remove: {', '.join(left)}")
    return len(hosts)


# ----------------------------------------------------------------------------------------- status
def status() -> tuple[int, list[dict]]:
    """(exit code, one row per host): 0 every host runs and answers SSH (unless a fault says
    otherwise), 1 something is not as expected."""
    require_root()
    st = state.load_up()
    rows = []
    healthy = st.phase == "up" and procs.is_lab_process(st.proxy_pid)
    for h in st.hosts:
        is_running = host.running(h)
        answers = is_running and host.sshd_answers(h)
        expected = is_running and (answers or "down" in h.faults)
        healthy = healthy and expected
        rows.append({
            "name": h.name, "address": h.address, "running": is_running, "ssh": answers,
            "scenario": h.scenario or f"{h.role} (no GPUs)", "faults": list(h.faults),
        })
    return (EXIT_OK if healthy else EXIT_WARN), rows


def describe(st: LabState) -> str:
    since = time.strftime("%H:%M:%S", time.localtime(st.started_at))
    proxy = "running" if procs.is_lab_process(st.proxy_pid) else "NOT RUNNING"
    return (f"lab {st.phase} since {since}: {plural(len(st.hosts), 'host')} on {st.subnet}, image {st.image}, "
            f"proxy {st.proxy_url} ({proxy})" + (f", kubernetes {st.kubernetes_server} "
                                                  f"({'running' if lab_plane.running() else 'NOT RUNNING'})"
                                                  if st.kubernetes_server else ""))


# ----------------------------------------------------------------------------------------- faults
FAULT_KINDS = ("down", "up", "hang", "scenario", "drift", "xid", "ib")


def sys_tree(name: str) -> Path:
    """Host `name`'s fake sysfs as the machine sees it (what its GPUCHECK_SYSFS_ROOT names inside)."""
    return config.host_run_dir(name) / "fakenvml" / Path(config.FAKE_SYSFS_DIR).name


def fault(name: str, kind: str, arg: str | None = None, venv: str | None = None) -> str:
    require_root()
    with state.locked():
        st = state.load_up()
        h = st.host(name)
        if h.role != "node" and kind in ("hang", "scenario", "xid", "ib"):
            raise LabError(f"{h.name} is the {h.role} node: it has no simulated GPUs to fault")
        fake_dir = config.host_run_dir(h.name) / "fakenvml"
        if kind == "down":
            host.set_sshd(h, up=False)
            _set_fault(h, "down", "down")
            msg = f"{h.name}: sshd stopped; the host is unreachable (`fault {h.name} up` starts it again)"
        elif kind == "up":
            host.set_sshd(h, up=True)
            h.faults = [f for f in h.faults if f != "down"]
            msg = f"{h.name}: sshd started again"
        elif kind == "hang":
            call = arg or gpus.HANG_CALL
            gpus.add_hang(fake_dir, call)
            _set_fault(h, "hang", f"hang {call}")
            msg = f"{h.name}: NVML call {call} now hangs (scenario {h.scenario} + hang)"
        elif kind == "scenario":
            if not arg:
                raise LabError("fault HOST scenario needs a scenario name, e.g. "
                               "`fault node02 scenario ecc-uncorrected`")
            gpus.install(arg, fake_dir, h.name, gpus.reset_layer(h.name))
            ib_ports.write(sys_tree(h.name), h.ib_ports)  # the new tree is the scenario's PCI bus alone
            h.scenario = arg
            h.faults = [f for f in h.faults if not f.startswith(("hang", "scenario"))] + [f"scenario {arg}"]
            msg = f"{h.name}: simulated GPUs now from scenario {arg}"
        elif kind == "xid":
            code = arg or "79"
            if not code.isdigit() or not 0 < int(code) < 1000:
                raise LabError(f"fault HOST xid takes an Xid code (a number such as 79), not {code!r}")
            kernel_log.plant(h.name, kernel_log.xid_message(int(code)))
            return f"{h.name}: Xid {code} logged in {kernel_log.HOST_FILE}"  # a line, not a state: nothing to undo
        elif kind == "ib":
            return f"{h.name}: {ib_ports.step(sys_tree(h.name), arg)}"  # a count, not a state: nothing to undo
        elif kind == "drift":
            msg = _drift(h, arg, venv)
            _set_fault(h, f"drift {arg}", f"drift {arg}")
        else:
            raise LabError(f"unknown fault {kind!r} (kinds: {', '.join(FAULT_KINDS)})")
        state.save(st)
        inventory.write(st)
        return msg


def _set_fault(h: HostState, prefix: str, value: str) -> None:
    h.faults = [f for f in h.faults if not f.startswith(prefix)] + [value]


DRIFT_SCRIPT = r"""
import glob, os, re, subprocess, sys
spec, venv = sys.argv[1], sys.argv[2]
if "==" in spec:
    name = spec.split("==")[0].strip()
    if venv:
        venvs = [venv]
    else:
        venvs = sorted({os.path.dirname(p) for top in ("/opt", "/usr/local", "/root", "/srv")
                        for p in glob.glob(top + "/**/pyvenv.cfg", recursive=True)})
    done = []
    for v in venvs:
        py = os.path.join(v, "bin", "python")
        show = subprocess.run([py, "-m", "pip", "show", name], capture_output=True, text=True)
        if show.returncode != 0 and not sys.argv[2]:
            continue
        old = re.search(r"^Version: (.*)$", show.stdout, re.M)
        inst = subprocess.run([py, "-m", "pip", "install", "--no-deps", "--quiet", spec],
                              capture_output=True, text=True)
        if inst.returncode != 0:
            print("pip install %s in %s failed: %s" % (spec, v, (inst.stderr.strip().splitlines() or ["?"])[-1]))
            sys.exit(2)
        done.append("%s %s -> %s in %s" % (name, old.group(1) if old else "(none)", spec.split("==")[1], v))
    if not done:
        print("%s is not installed in any virtualenv under /opt, /usr/local, /root or /srv (pass --venv DIR)"
              % name)
        sys.exit(3)
    print("; ".join(done))
elif "=" in spec:
    name = spec.split("=")[0]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    inst = subprocess.run(["apt-get", "install", "-y", "-q", "--allow-downgrades", "--no-install-recommends",
                           spec], capture_output=True, text=True, env=env)
    if inst.returncode != 0:
        print("apt-get install %s failed: %s" % (spec, (inst.stdout + inst.stderr).strip().splitlines()[-1]))
        sys.exit(2)
    print("%s now at %s (apt)" % (name, spec.split("=", 1)[1]))
else:
    print("drift needs PKG==VERSION (pip, in a virtualenv) or PKG=VERSION (apt)")
    sys.exit(3)
"""


def _drift(h: HostState, spec: str | None, venv: str | None) -> str:
    if not spec or "=" not in spec:
        raise LabError("fault HOST drift needs PKG==VERSION (pip, in the host's virtualenvs) or PKG=VERSION (apt)")
    command = f"python3 - {shlex.quote(spec)} {shlex.quote(venv or '')}"
    proc = ssh_run(h.address, command, timeout=600, stdin=DRIFT_SCRIPT)
    out = (proc.stdout.strip().splitlines() or [proc.stderr.strip() or "no output"])[-1]
    if proc.returncode != 0:
        raise LabError(f"{h.name}: drift {spec} failed: {out}", code=EXIT_FAIL if proc.returncode == 2 else 3)
    return f"{h.name}: {out}"
