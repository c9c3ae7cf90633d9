#!/bin/bash
# Runs INSIDE systemd-nspawn (nspawn_try.sh): what the container sees, then the same kubelet_lab.py steps as on the
# host, with containerd's and kubelet's state on the container's own (overlay) root.
MODE=$1
OUT=/tmp/kubelet-try/logs-nspawn-$MODE
mkdir -p $OUT
exec > $OUT/inside.out 2>&1
echo "== environment ($MODE)"
grep cgroup /proc/self/mountinfo | cut -d' ' -f4,5,6
ls -la /dev/kmsg; grep -E 'CapEff' /proc/self/status; findmnt -n -o SOURCE,FSTYPE /
touch /proc/sys/vm/overcommit_memory 2>&1 && echo "/proc/sys writable"; mkdir /sys/fs/cgroup/cpu/kt-probe 2>&1 && rmdir /sys/fs/cgroup/cpu/kt-probe && echo "cgroup cpu writable"
if [ "$MODE" != lab ]; then
  # the fixes: cgroup v1 controllers writable, /dev/kmsg present (bound by nspawn_try.sh)
  for c in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$c" 2>&1; done
  mount -o remount,rw /sys/fs/cgroup 2>&1
  mkdir /sys/fs/cgroup/cpu/kt-probe 2>&1 && rmdir /sys/fs/cgroup/cpu/kt-probe && echo "cgroup cpu writable now"
fi
export KT_STATE=/var/lib/kt/state KT_CONF=/var/lib/kt/conf KT_LOGS=$OUT
cd /tmp/kubelet-try && mkdir -p /var/lib/kt
timeout 400 /work/main/.venv/bin/python kubelet_lab.py configs up test
echo "== up/test exit $?"
timeout 120 /work/main/.venv/bin/python kubelet_lab.py down
echo "== down exit $?"
