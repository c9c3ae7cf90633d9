"""Ask one library file its version: load it in a throwaway interpreter and call its own version
function through ctypes.

A short-lived subprocess, so a library that hangs or crashes at load cannot take the agent down,
and the agent does not keep it loaded.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ...model import truncate
from ...process import run
from .known_libraries import LIBRARIES
from .version_codes import decode

MARK = "GPUCHECK_LIBVERSION "

# Run by the agent's own interpreter (-I -S: standard library only) for one library file.
VERSION_SNIPPET = r"""
import ctypes, json, sys
path, func, kind = sys.argv[1:4]
out = {}
try:
    lib = ctypes.CDLL(path)
except OSError as exc:
    out = {"error": "cannot load: %s" % exc}
else:
    try:
        fn = getattr(lib, func)
    except AttributeError:
        out = {"error": "has no symbol %s" % func}
    else:
        if kind == "size_t":
            fn.restype, fn.argtypes = ctypes.c_size_t, []
            out = {"raw": fn(), "rc": 0}
        elif kind == "int_out":
            value = ctypes.c_int(0)
            fn.restype, fn.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]
            out = {"rc": fn(ctypes.byref(value)), "raw": value.value}
        else:
            buf, size = ctypes.create_string_buffer(8192), ctypes.c_int(0)
            fn.restype = ctypes.c_int
            out = {"rc": fn(buf, ctypes.byref(size)), "raw": buf.value.decode("utf-8", "replace")}
sys.stdout.write("\n__MARK__" + json.dumps(out) + "\n")
sys.stdout.flush()
""".replace("__MARK__", MARK)


def probe_version(path: str, key: str, timeout: float) -> dict[str, Any]:
    """Load one library in a throwaway interpreter and ask its own version function.

    -> {version, raw[, implementation]} or {error[, raw, evidence]}; key is a LIBRARIES key."""
    lib = LIBRARIES[key]
    done = run([sys.executable, "-I", "-S", "-c", VERSION_SNIPPET, path, lib.function, lib.kind],
               timeout=timeout)
    if done.timed_out:
        return {"error": f"loading it did not finish within {timeout:g} s (killed)"}
    answer = None
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            try:
                answer = json.loads(line[len(MARK):])
            except ValueError:
                answer = None
    if answer is None:
        if done.returncode is not None and done.returncode < 0:
            return {"error": f"the process loading it was killed by signal {-done.returncode}"}
        return {"error": f"no answer from the version probe: {done.describe_failure()}",
                "evidence": truncate(done.output, 1000)}
    if "error" in answer:
        return {"error": answer["error"]}
    if answer.get("rc"):
        return {"error": f"{lib.function} returned error {answer['rc']}", "raw": answer.get("raw")}
    try:
        version, implementation = decode(key, answer["raw"])
    except (TypeError, ValueError):
        return {"error": f"{lib.function} answered {answer.get('raw')!r}", "raw": answer.get("raw")}
    result = {"version": version, "raw": answer["raw"]}
    if implementation:
        result["implementation"] = implementation
    return result
