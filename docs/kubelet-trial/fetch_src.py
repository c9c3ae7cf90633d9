import sys, subprocess
from pathlib import Path
sys.path.insert(0, '/work/main')
from lab.kubernetes import build
apt = Path('/tmp/kubelet-try/apt')
opts = build._apt_source_options(apt)
subprocess.run(["apt-get", *opts, "update"], check=True, stdin=subprocess.DEVNULL)
subprocess.run(["apt-get", *opts, "source", "--download-only", f"{build.SOURCE_PACKAGE}={build.SOURCE_VERSION}"], cwd=apt, check=True, stdin=subprocess.DEVNULL)
