#!/bin/bash
# From nothing to pods running under a kubelet on this machine, and back (as root, Debian 12, cgroup v1, no systemd).
# Needs: /work/main (the project; its cached control plane build: python3 -m lab.kubernetes build), gcc + libc6-dev.
set -euo pipefail
cd /tmp/kubelet-try
PY=/work/main/.venv/bin/python
[ -e apt/kubernetes_1.20.5+really1.20.2-1.1+deb12u1.dsc ] || $PY fetch_src.py   # apt-get source --download-only
$PY kubelet_lab.py prepare        # debs -> root/, kubelet -> bin/ (build_kubelet.py, ~400 CPU-s cold), images/*.tar
trap '$PY kubelet_lab.py down' EXIT
$PY kubelet_lab.py up test        # containerd, control plane, kubelet; pod, Job, Guaranteed pod, exec, preemption
# inside a systemd-nspawn container like the lab's hosts (the fixes applied; `lab` mode shows the blockers):
#   ./nspawn_try.sh fixed ; ./nspawn_try.sh boot ; ./nspawn_try.sh lab
