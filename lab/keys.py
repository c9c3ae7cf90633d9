"""SSH keys of the lab: one client key for root everywhere, one host key per host, known_hosts."""

from __future__ import annotations

from pathlib import Path

from lab.run import run


def generate(path: Path, comment: str) -> str:
    """A new ed25519 key pair at path (+ .pub); returns the public key line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in (path, path.with_name(path.name + ".pub")):
        old.unlink(missing_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    path.chmod(0o600)
    return path.with_name(path.name + ".pub").read_text().strip()


def known_hosts_line(names: list[str], public_key: str) -> str:
    """`name,address keytype key` (the comment of the public key is dropped)."""
    keytype, key = public_key.split()[:2]
    return f"{','.join(names)} {keytype} {key}"
