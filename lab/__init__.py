"""The gpucheck lab: a real multi-host cluster on one machine, with simulated GPUs.

Run it from the repository root as root: ``python3 -m lab --help``. One module per job:

- ``cli``        argument parsing and output (``__main__`` calls it)
- ``cluster``    up / down / status / fault, recording every step in ``state``
- ``net``        the bridge, one network namespace + veth per host, the leftover sweep
- ``rootfs``     the Debian base built once with mmdebstrap (cached), per-host overlay dirs
- ``host``       one host: its files (spec), starting it, its sshd unit, ending it
- ``hostinit``   a host's supervisor (standalone): its overlay root and files, then systemd-nspawn --boot
- ``proxy``      the allow-list forward proxy on the bridge (standalone)
- ``standin_repo``  the stand-in NVIDIA repository (``nvidia_repo/``) built and served on the bridge at ``up``
- ``gpus``       the fake NVML library and each host's scenario directory
- ``images`` / ``golden``   golden image keys and ``build``
- ``inventory``  inventory/lab/hosts.yml
- ``demo``       the end-to-end story
- ``keys``, ``procs``, ``run``, ``progress``, ``state``, ``config``, ``errors``: small helpers
"""
