"""A Kubernetes control plane for the lab, built from Debian's source package (docs/kubernetes.md).

- ``build``: fetch Debian's Go, etcd, kubectl and the kubernetes source package, build kube-apiserver,
  kube-scheduler and kube-controller-manager, and cache the binaries by the exact versions used.
- ``control_plane``: run etcd and the three servers on loopback with RBAC and an admin token.
"""
