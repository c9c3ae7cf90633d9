"""Python imports this at start-up (a `usercustomize` on sys.path) in the system Python that runs Ansible's modules
in the tests: on this machine (tests/ansible/conftest.py puts this folder on PYTHONPATH and names the cache in
GPUCHECK_TESTS_MODULE_BYTECODE) and on every lab host (lab/host.py writes it where Debian's python3 finds it and
binds the machine's cache, one for all hosts and labs, at LAB_HOST_CACHE). A venv (the tests', the agent's) skips
it: no user site there.

Each task's module arrives as a zip (AnsiballZ) with module_utils as sources only, so zipimport compiles them again
for every task: 0.06 of the 0.17 CPU-s a `stat` task costs on this machine, about 0.2 of the 0.4 CPU-s on a lab host
(measured 2026-11-30: module_utils.basic alone took 0.25 s to import). This keeps the compiled code by the hash of
its source, as Python keeps bytecode beside a file on disk; the module runs exactly the code it was sent. No cache
directory: nothing changes."""

import _imp
import hashlib
import importlib.util
import marshal
import os
import zipimport

LAB_HOST_CACHE = "/var/cache/gpucheck-lab-module-bytecode"
CACHE = os.environ.get("GPUCHECK_TESTS_MODULE_BYTECODE", LAB_HOST_CACHE)
compile_source = getattr(zipimport, "_compile_source", None)  # (pathname, source) -> code, CPython 3.8 to 3.12


def compile_or_reuse(pathname, source):
    path = os.path.join(CACHE, hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest())
    try:
        with open(path, "rb") as f:
            code = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        code = compile_source(pathname, source)
        # tasks run side by side, on hosts whose pids can be the same: each writes its own, then renames it in
        written = f"{path}.{os.getpid()}.{os.urandom(6).hex()}"
        try:
            with open(written, "wb") as f:
                marshal.dump(code, f)
            os.replace(written, path)
        except OSError:  # a full or read-only cache: the task runs all the same
            pass
    else:
        _imp._fix_co_filename(code, pathname)  # tracebacks name this task's zip, as a fresh compile would
    return code


if CACHE and compile_source and os.path.isdir(CACHE):
    zipimport._compile_source = compile_or_reuse
