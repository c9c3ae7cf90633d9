"""The repository's signing key: made with gpg in a GnuPG home of its own (never the user's), no passphrase.

NVIDIA signs its Release file with an armored detached signature (Release.gpg, SHA512) and publishes InRelease
beside it (cuda-repo-management repo-debian.sh); apt reads either, and the key is given to apt by `signed-by`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from .model import NvidiaRepoError

GPG_TIMEOUT_S = 60
KEY_USER_ID = "gpucheck lab stand-in for NVIDIA's CUDA repository <lab@gpucheck.invalid>"
# gpg-agent's socket lives in the home: Linux limits a socket path to 107 bytes.
MAX_HOME_LENGTH = 80
FINGERPRINT = re.compile(r"^fpr:(?:[^:]*:){8}([0-9A-F]{40}):", re.MULTILINE)


class Signer:
    """A GnuPG home holding one signing key; `close` stops the gpg-agent that gpg started in it."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        if len(str(self.home)) > MAX_HOME_LENGTH:
            raise NvidiaRepoError(f"GnuPG home {self.home} is longer than {MAX_HOME_LENGTH} characters "
                                  f"(gpg-agent's socket would not fit); choose a shorter one")
        if not shutil.which("gpg"):
            raise NvidiaRepoError("gpg is not installed (Debian package gpg)")
        self.home.mkdir(parents=True, exist_ok=True)
        self.home.chmod(0o700)

    def gpg(self, *args: str, stdin: str | None = None) -> str:
        cmd = ["gpg", "--homedir", str(self.home), "--batch", "--no-tty", "--yes", *args]
        try:
            done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=GPG_TIMEOUT_S,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NvidiaRepoError(f"gpg {args[0]} failed: {exc}") from exc
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise NvidiaRepoError(f"gpg {args[0]} failed (exit {done.returncode}): {last}")
        return done.stdout

    def fingerprint(self) -> str | None:
        """The fingerprint of the home's secret key, or None where it has none yet."""
        listing = self.gpg("--with-colons", "--list-secret-keys") if any(self.home.iterdir()) else ""
        found = FINGERPRINT.findall(listing)
        return found[0] if found else None

    def ensure_key(self) -> str:
        """The home's key, made first where it has none (ed25519, signing only, never expires)."""
        existing = self.fingerprint()
        if existing:
            return existing
        self.gpg("--passphrase", "", "--quick-generate-key", KEY_USER_ID, "ed25519", "sign", "never")
        made = self.fingerprint()
        if not made:
            raise NvidiaRepoError(f"gpg made no key in {self.home}")
        return made

    def export(self, fingerprint: str, dest: Path) -> Path:
        """The public key, armored, as apt's signed-by reads it."""
        dest.write_text(self.gpg("--armor", "--export", fingerprint))
        return dest

    def sign_release(self, fingerprint: str, release: Path) -> None:
        """Release.gpg and InRelease beside RELEASE, as NVIDIA's repositories have them."""
        common = ["--local-user", fingerprint, "--digest-algo", "SHA512", "--armor"]
        self.gpg(*common, "--detach-sign", "--output", str(release.with_name("Release.gpg")), str(release))
        self.gpg(*common, "--clearsign", "--output", str(release.with_name("InRelease")), str(release))

    def close(self) -> None:
        if shutil.which("gpgconf"):
            subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"],
                           capture_output=True, timeout=GPG_TIMEOUT_S, check=False,
                           env=dict(os.environ, GNUPGHOME=str(self.home)))
