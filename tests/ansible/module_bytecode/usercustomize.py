"""Python imports this at start-up (a `usercustomize` on sys.path) in the system Python that runs Ansible's modules
on this machine during the tests: tests/ansible/conftest.py puts this folder on PYTHONPATH and names the cache in
GPUCHECK_TESTS_MODULE_BYTECODE. A venv, as the tests' own, skips it (no user site there).

Each task's module arrives as a zip (AnsiballZ) with module_utils as sources only, so zipimport compiles them again
for every task: 0.06 of the 0.17 CPU-s a `stat` task costs here. This keeps the compiled code by the hash of its
source, as Python keeps bytecode beside a file on disk; the module runs exactly the code it was sent."""

import _imp
import hashlib
import importlib.util
import marshal
import os
import zipimport

CACHE = os.environ.get("GPUCHECK_TESTS_MODULE_BYTECODE")
compile_source = getattr(zipimport, "_compile_source", None)  # (pathname, source) -> code, CPython 3.8 to 3.12


def compile_or_reuse(pathname, source):
    path = os.path.join(CACHE, hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest())
    try:
        with open(path, "rb") as f:
            code = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        code = compile_source(pathname, source)
        written = f"{path}.{os.getpid()}"  # tasks run side by side: each writes its own, then renames it in
        with open(written, "wb") as f:
            marshal.dump(code, f)
        os.replace(written, path)
    else:
        _imp._fix_co_filename(code, pathname)  # tracebacks name this task's zip, as a fresh compile would
    return code


if CACHE and compile_source and os.path.isdir(CACHE):
    zipimport._compile_source = compile_or_reuse
