"""A lab host's Ansible modules compile their module_utils once for every host and lab (usercustomize.py says why):
the file each host gets where bookworm's python3 imports it at start-up, and the machine's cache bound in."""

from __future__ import annotations

import re
from pathlib import Path

from lab import config

SOURCE = Path(__file__).resolve().parent / "usercustomize.py"
HOST_FILE = "/usr/local/lib/python3.11/dist-packages/usercustomize.py"  # on Debian 12's python3 sys.path
HOST_CACHE = re.search(r'^LAB_HOST_CACHE = "([^"]+)"', SOURCE.read_text(), re.M)[1]  # where usercustomize looks
MACHINE_CACHE = config.CACHE_DIR / "module-bytecode"
