#!/usr/bin/env python3
"""Build kubelet v1.20.2 exactly as lab/kubernetes/build.py builds the control plane (same source package, same Go,
same reflect2 swap, same tags and ldflags), reusing its functions. Output: /tmp/kubelet-try/bin/kubelet.

Run as root from anywhere:  /work/main/.venv/bin/python /tmp/kubelet-try/build_kubelet.py
"""
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, "/work/main")
from lab.kubernetes import build  # noqa: E402

TOP = Path("/tmp/kubelet-try")
SCRATCH = TOP / "kbuild"
OUT = TOP / "bin"


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def step(what, fn, times):
    w, c = time.monotonic(), cpu()
    print(f"== {what} ...", flush=True)
    result = fn()
    times[what] = {"wall_s": round(time.monotonic() - w, 1), "cpu_s": round(cpu() - c, 1)}
    print(f"== {what}: {times[what]}", flush=True)
    return result


def main() -> None:
    times: dict = {}
    wall0, cpu0 = time.monotonic(), cpu()
    root, gopath = SCRATCH / "root", SCRATCH / "gopath"
    tree = gopath / "src/k8s.io/kubernetes"
    if not (tree / "cmd/kubelet").is_dir():
        shutil.rmtree(SCRATCH, ignore_errors=True)
        SCRATCH.mkdir(parents=True)
        versions = build.resolve()
        print(json.dumps(versions, indent=1))
        step("debs", lambda: build._fetch_debs(versions, SCRATCH / "debs", root), times)
        # the source package: reuse the copy downloaded with apt-get source --download-only (fetch_src.py), else fetch
        dsc = next((TOP / "apt").glob("kubernetes_*.dsc"), None)
        if dsc:
            tree.parent.mkdir(parents=True)
            step("source", lambda: subprocess.run(["dpkg-source", "--no-check", "-x", str(dsc), str(tree)],
                                                  check=True, capture_output=True), times)
        else:
            step("source", lambda: build._fetch_source(SCRATCH / "apt", tree), times)
        build._swap_reflect2(root, tree)
    env = build._go_env(root, gopath)
    deps = subprocess.run(["go", "list", "-tags", "providerless", "-deps", "./cmd/kubelet"], cwd=tree, env=env,
                          capture_output=True, text=True)
    print(f"go list -deps: rc {deps.returncode}, {len(deps.stdout.split())} packages; "
          f"needs pkg/generated/openapi: {'k8s.io/kubernetes/pkg/generated/openapi' in deps.stdout}; "
          f"{deps.stderr.strip()[-300:]}")
    if "k8s.io/kubernetes/pkg/generated/openapi" in deps.stdout and \
            not (tree / "pkg/generated/openapi/zz_generated.openapi.go").exists():
        step("gen_openapi", lambda: subprocess.run(["nice", "-n", "19", "make", "gen_openapi"], cwd=tree, env=env,
                                                   check=True, capture_output=True), times)
    ldflags = "-s -w " + " ".join(f"-X k8s.io/kubernetes/vendor/k8s.io/{pkg}.{var}"
                                  for pkg in ("component-base/version", "client-go/pkg/version")
                                  for var in (f"gitVersion={build.GIT_VERSION}", "gitMajor=1", "gitMinor=20"))
    OUT.mkdir(exist_ok=True)
    log = TOP / "go-build-kubelet.log"
    with open(log, "w") as fh:
        step("go build kubelet", lambda: subprocess.run(
            ["nice", "-n", "19", "go", "build", "-v", "-tags", "providerless", "-ldflags", ldflags,
             "-o", f"{OUT}/", "./cmd/kubelet"], cwd=tree, env=env, check=True, stdout=fh, stderr=subprocess.STDOUT),
            times)
    times["total"] = {"wall_s": round(time.monotonic() - wall0, 1), "cpu_s": round(cpu() - cpu0, 1)}
    times["kubelet_bytes"] = (OUT / "kubelet").stat().st_size
    (TOP / "build-times.json").write_text(json.dumps(times, indent=2) + "\n")
    print(json.dumps(times, indent=2))


if __name__ == "__main__":
    main()
