#!/bin/bash
# Try the kubelet inside a systemd-nspawn container made like the lab's hosts (lab/hostinit.py): overlay root on the
# lab's base image, --register=no --keep-unit, CAP_SYSLOG; in a private mount namespace so nothing stays mounted.
#   nspawn_try.sh lab     # the lab's flags (+ --private-network, CAP_NET_ADMIN dropped as --network-namespace-path does)
#   nspawn_try.sh fixed   # + CAP_NET_ADMIN, --bind=/dev/kmsg, SYSTEMD_NSPAWN_API_VFS_WRITABLE=1, cgroups remounted rw
set -e
MODE=${1:-lab}
BASE=$(ls -d /var/cache/gpucheck-lab/base-*/root | head -1)
N=/tmp/kubelet-try/nspawn-$MODE
rm -rf $N; mkdir -p $N/upper $N/work $N/root /tmp/kubelet-try/logs-nspawn-$MODE
CACHE=$(cd /work/main && .venv/bin/python -c 'from lab.kubernetes import build; print(build.find())')
FLAGS=(--register=no --keep-unit --resolv-conf=off --timezone=off --link-journal=no --console=pipe
       --capability=CAP_SYSLOG --private-network --machine=kt-$MODE --setenv=KT_K8S_CACHE=$CACHE --setenv=KT_APISERVER_EXTRA=--advertise-address=127.0.0.1
       --bind=/tmp/kubelet-try/logs-nspawn-$MODE
       $(for f in root bin images manifests kubelet_lab.py plane.py mkimage.py nspawn_inside.sh; do echo --bind-ro=/tmp/kubelet-try/$f; done)
       --bind-ro=/work/main --bind-ro=/root/.pyenv --bind-ro=$CACHE)
ENV=(KT_K8S_CACHE=$CACHE)
if [ "$MODE" = lab ]; then FLAGS+=(--drop-capability=CAP_NET_ADMIN); fi
if [ "$MODE" = fixed ] || [ "$MODE" = boot ]; then FLAGS+=(--bind=/dev/kmsg --setenv=KT_SNAPSHOTTER=native --setenv=KT_NO_NEW_KEYRING=1); ENV+=(SYSTEMD_NSPAWN_API_VFS_WRITABLE=1); fi
INIT=(-- /bin/bash /tmp/kubelet-try/nspawn_inside.sh $MODE)
if [ "$MODE" = boot ]; then  # systemd as PID 1, as the lab's hosts; the steps run as a unit, then power off
  FLAGS=("${FLAGS[@]/--console=pipe/--console=passive}" --boot); INIT=()
  mkdir -p $N/upper/etc/systemd/system/multi-user.target.wants
  cat > $N/upper/etc/systemd/system/kt.service <<UNIT
[Unit]
After=multi-user.target
[Service]
Type=oneshot
Environment=KT_K8S_CACHE=$CACHE KT_APISERVER_EXTRA=--advertise-address=127.0.0.1 KT_SNAPSHOTTER=native KT_NO_NEW_KEYRING=1
ExecStart=/bin/bash /tmp/kubelet-try/nspawn_inside.sh boot
ExecStopPost=/bin/systemctl poweroff --no-block
TimeoutStartSec=600
UNIT
  ln -sf ../kt.service $N/upper/etc/systemd/system/multi-user.target.wants/kt.service
fi
unshare -m --propagation private bash -c "
  mount -t tmpfs -o mode=0755 kt-nspawn /run/systemd/nspawn   # as lab/hostinit.py: nspawn's lock/propagate dirs
  mount -t overlay overlay -o lowerdir=$BASE,upperdir=$N/upper,workdir=$N/work $N/root
  env ${ENV[*]} systemd-nspawn -D $N/root ${FLAGS[*]} ${INIT[*]}
  echo nspawn exit \$?"
