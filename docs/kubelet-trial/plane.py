#!/usr/bin/env python3
"""Hold the project's control plane (lab/kubernetes/control_plane.start) up until SIGTERM, then stop it.
Writes RUN_DIR/plane.json (server, kubeconfig, ready times). Usage: plane.py RUN_DIR"""
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, "/work/main")
from lab.kubernetes import build, control_plane  # noqa: E402

run_dir = Path(sys.argv[1])
run_dir.mkdir(parents=True, exist_ok=True)
cache = Path(os.environ["KT_K8S_CACHE"]) if os.environ.get("KT_K8S_CACHE") else build.find()
if cache is None:
    sys.exit("no cached control plane build (python3 -m lab.kubernetes build)")
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)
# The one change the project's control plane needs for a kubelet: dial it by InternalIP (the default order tries
# the Node's Hostname first, which does not resolve), for kubectl logs/exec.
_spawn = control_plane.spawn


def spawn(argv, log):
    if argv[0].endswith("/kube-apiserver"):
        argv = [*argv, "--kubelet-preferred-address-types=InternalIP,Hostname",
                *os.environ.get("KT_APISERVER_EXTRA", "").split()]  # in a netns with no default route:
        # --advertise-address=127.0.0.1 (else "Unable to find suitable network address ... no default routes")
    return _spawn(argv, log)


control_plane.spawn = spawn
plane = control_plane.start(cache, run_dir)
try:
    (run_dir / "plane.json").write_text(json.dumps({
        "server": plane.server, "kubeconfig": str(plane.kubeconfig), "bin_dir": str(plane.bin_dir),
        "ready_s": plane.ready_s, "pids": {n: p.pid for n, p in plane.procs}}, indent=2) + "\n")
    print(json.dumps(plane.ready_s), flush=True)
    while not stop:
        time.sleep(0.5)
finally:
    plane.stop()
    (run_dir / "plane.json").unlink(missing_ok=True)
    print("control plane stopped", flush=True)
