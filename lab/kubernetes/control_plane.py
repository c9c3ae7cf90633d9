"""etcd, kube-apiserver (RBAC on), kube-controller-manager and kube-scheduler, free ports: the apiserver on
127.0.0.1 or on the address given (the lab's bridge, where the lab's kubelets reach it), the rest on 127.0.0.1.

One admin token (group system:masters) in a static token file; the kubeconfig written to run_dir uses it. Each node
named gets a token of its own (user system:node:NAME, group system:nodes), which the Node authorizer judges.
The serving certificate is self-signed with `cryptography` when it is importable, else the apiserver makes its
own under --cert-dir (and the kubeconfig then skips verification).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import secrets
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lab.errors import LabError
from lab.procs import spawn
from lab.run import run

SERVICE_RANGE = "10.0.0.0/24"
READY_TIMEOUT_S = 90.0


@dataclass
class ControlPlane:
    bin_dir: Path
    run_dir: Path
    server: str
    token: str
    ca_file: Path | None
    kubeconfig: Path
    node_tokens: dict[str, str] = field(default_factory=dict)  # node name -> its kubelet's token
    ready_s: dict[str, float] = field(default_factory=dict)  # seconds from start to ready, per server
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        cmd = [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        return run(cmd, input=input, timeout=60).stdout

    def request(self, method: str, path: str, body: object = None, content_type: str = "application/json") -> dict:
        """One API call with the admin token; the decoded JSON answer, LabError on an HTTP error."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self._tls(), timeout=10) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            raise LabError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:200].decode(errors='replace')}") from exc

    def _tls(self) -> ssl.SSLContext:
        if self.ca_file:
            return ssl.create_default_context(cafile=str(self.ca_file))
        return _unverified()

    def stop(self) -> None:
        """End exactly the processes start() began, newest first (the apiserver before etcd)."""
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


def start(cache_dir: Path, run_dir: Path, address: str = "127.0.0.1", nodes: Sequence[str] = ()) -> ControlPlane:
    bin_dir, logs = cache_dir / "bin", run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    etcd_port, peer_port, cm_port, sched_port = _free_ports(4)
    api_port = _free_ports(1, address)[0]
    token = secrets.token_hex(16)
    node_tokens = {name: secrets.token_hex(16) for name in nodes}
    tokens = run_dir / "tokens.csv"
    tokens.write_text(f'{token},admin,admin,"system:masters"\n' + "".join(
        f'{secret},system:node:{name},node-{name},"system:nodes"\n' for name, secret in node_tokens.items()))
    tokens.chmod(0o600)
    sa_key = run_dir / "sa.key"
    tls = _self_signed(run_dir, sa_key, address)
    server = f"https://{address}:{api_port}"
    plane = ControlPlane(bin_dir, run_dir, server, token, run_dir / "apiserver.crt" if tls else None,
                         run_dir / "kubeconfig", node_tokens)
    _write_kubeconfig(plane)
    kubeconfig = f"--kubeconfig={plane.kubeconfig}"
    delegated = [f"--authentication-kubeconfig={plane.kubeconfig}", f"--authorization-kubeconfig={plane.kubeconfig}"]
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    servers = [
        ("etcd", [f"--data-dir={run_dir / 'etcd'}", "--name=default", f"--listen-client-urls={etcd_url}",
                  f"--advertise-client-urls={etcd_url}", f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                  f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                  f"--initial-cluster=default=http://127.0.0.1:{peer_port}"], f"{etcd_url}/health"),
        ("kube-apiserver", [f"--etcd-servers={etcd_url}", f"--bind-address={address}",
                            f"--advertise-address={address}", f"--secure-port={api_port}",
                            "--insecure-port=0", f"--token-auth-file={tokens}", "--authorization-mode=Node,RBAC",
                            "--allow-privileged=true",  # as kubeadm sets it: GPU node agents run privileged
                            # as kubeadm: a kubelet writes its own Node and its own pods' status, no other's
                            "--enable-admission-plugins=NodeRestriction",
                            "--endpoint-reconciler-type=none",
                            # logs and exec dial a kubelet at its Node's address (a lab host's name does not
                            # resolve here)
                            "--kubelet-preferred-address-types=InternalIP,Hostname",
                            f"--service-cluster-ip-range={SERVICE_RANGE}",
                            "--service-account-issuer=https://kubernetes.default.svc",
                            f"--service-account-key-file={sa_key}", f"--service-account-signing-key-file={sa_key}",
                            *([f"--tls-cert-file={run_dir / 'apiserver.crt'}",
                               f"--tls-private-key-file={run_dir / 'apiserver.key'}"] if tls
                              else [f"--cert-dir={run_dir / 'certs'}"])], f"{server}/readyz"),
        ("kube-controller-manager", [kubeconfig, *delegated, "--controllers=*,-nodeipam", "--leader-elect=false",
                                     f"--service-account-private-key-file={sa_key}",
                                     "--use-service-account-credentials",
                                     *([f"--root-ca-file={plane.ca_file}"] if plane.ca_file else []),
                                     "--bind-address=127.0.0.1", f"--secure-port={cm_port}", "--port=0"],
         f"https://127.0.0.1:{cm_port}/healthz"),
        ("kube-scheduler", [kubeconfig, *delegated, "--leader-elect=false", "--bind-address=127.0.0.1",
                            f"--secure-port={sched_port}", "--port=0"], f"https://127.0.0.1:{sched_port}/healthz"),
    ]
    begin = time.monotonic()
    try:
        for name, args, health in servers:
            log = logs / f"{name}.log"
            proc = spawn([str(bin_dir / name), *args], log)
            plane.procs.append((name, proc))
            _wait_healthy(plane, name, proc, health, log)
            plane.ready_s[name] = round(time.monotonic() - begin, 1)
    except BaseException:
        plane.stop()
        raise
    return plane


def _wait_healthy(plane: ControlPlane, name: str, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Poll url until it answers 200 (apiserver: with the admin token and its CA); never a fixed sleep."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    headers = {"Authorization": f"Bearer {plane.token}"} if url.startswith(plane.server) else {}
    context = plane._tls() if url.startswith(plane.server) else _unverified()
    while True:
        if proc.poll() is not None:
            raise LabError(f"{name} exited (code {proc.returncode}) before it was healthy: {_tail(log)}; see {log}")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                        context=context if url.startswith("https") else None, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() > deadline:
            raise LabError(f"{name} not healthy at {url} within {READY_TIMEOUT_S:.0f} s; see {log}")
        time.sleep(0.2)


def _free_ports(count: int, address: str = "127.0.0.1") -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((address, 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _self_signed(run_dir: Path, sa_key: Path, address: str) -> bool:
    """Write the service-account key, and a self-signed serving cert when `cryptography` is there (True)."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID
    except ImportError:
        run(["openssl", "genrsa", "-out", str(sa_key), "2048"])
        return False

    def pem_key(key: rsa.RSAPrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())

    sa_key.write_bytes(pem_key(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpucheck-lab-apiserver")])
    now = datetime.datetime.now(datetime.timezone.utc)
    ips = sorted({"127.0.0.1", "10.0.0.1", address})
    sans = [*(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips),
            *(x509.DNSName(n) for n in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"))]
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(key, hashes.SHA256()))
    (run_dir / "apiserver.key").write_bytes(pem_key(key))
    (run_dir / "apiserver.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return True


def _write_kubeconfig(plane: ControlPlane) -> None:
    # JSON is YAML: kubectl and the servers read it as a kubeconfig.
    cluster = {"server": plane.server}
    if plane.ca_file:
        cluster["certificate-authority"] = str(plane.ca_file)
    else:
        cluster["insecure-skip-tls-verify"] = True  # type: ignore[assignment]
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "lab",
              "clusters": [{"name": "lab", "cluster": cluster}],
              "users": [{"name": "admin", "user": {"token": plane.token}}],
              "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "admin"}}]}
    plane.kubeconfig.write_text(json.dumps(config, indent=2) + "\n")
    plane.kubeconfig.chmod(0o600)


def _tail(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"
