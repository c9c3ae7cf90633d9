"""ldd: the published Horovod fragment, then outputs captured from Debian 12's ldd (glibc 2.36), then
the older and rarer forms, and text that is not ldd output."""

from __future__ import annotations

import pytest

from gpucheck.parsers import ParseError, parse
from gpucheck.parsers.ldd import empty_result
from support import REAL

SPACK = "horovod-nccl/ldd-horovod-torch-mpi_lib_v2-spack-FRAGMENT-horovod3831.txt"

# `ldd /bin/ls` on Debian 12.
LS = ("\tlinux-vdso.so.1 (0x00007f81c2643000)\n"
      "\tlibselinux.so.1 => /lib/x86_64-linux-gnu/libselinux.so.1 (0x00007f81c25dd000)\n"
      "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f81c23fb000)\n"
      "\tlibpcre2-8.so.0 => /lib/x86_64-linux-gnu/libpcre2-8.so.0 (0x00007f81c2361000)\n"
      "\t/lib64/ld-linux-x86-64.so.2 (0x00007f81c2645000)\n")
# `ldd ext.so /sbin/ldconfig /etc/passwd 2>&1` on Debian 12: ext.so needs a library that was deleted.
SEVERAL = ("/tmp/h/ext.so:\n"
           "\tlinux-vdso.so.1 (0x00007fc659780000)\n"
           "\tlibgone.so => not found\n"
           "/sbin/ldconfig:\n"
           "\tstatically linked\n"
           "/etc/passwd:\n"
           "\tnot a dynamic executable\n")


def test_real_spack_fragment_with_the_prompt_line() -> None:
    parsed = parse("ldd", (REAL / SPACK).read_text(encoding="utf-8"))
    names = [lib["name"] for lib in parsed["libraries"]]
    assert names == ["linux-vdso.so.1", "libmpi.so.40", "libdl.so.2", "libc10.so", "libtorch_cpu.so",
                     "libtorch_python.so", "libcudart.so.11.0"]
    assert parsed["libraries"][0]["path"] is None  # vdso: no file
    mpi = parsed["libraries"][1]
    assert mpi["path"].endswith("openmpi-4.1.2-yc24rf6lhsmvpfvfb57euroc2dzjbvlh/lib/libmpi.so.40")
    assert parsed["not_found"] == [] and not parsed["static"] and not parsed["not_dynamic"]
    assert parsed["ignored"] and parsed["ignored"][0].startswith("root@chifflot-7:~# ldd")


def test_one_program_every_library_resolved() -> None:
    parsed = parse("ldd", LS)
    assert parsed["file"] is None and len(parsed["sections"]) == 1
    assert parsed["libraries"] == [
        {"name": "linux-vdso.so.1", "path": None, "found": True},
        {"name": "libselinux.so.1", "path": "/lib/x86_64-linux-gnu/libselinux.so.1", "found": True},
        {"name": "libc.so.6", "path": "/lib/x86_64-linux-gnu/libc.so.6", "found": True},
        {"name": "libpcre2-8.so.0", "path": "/lib/x86_64-linux-gnu/libpcre2-8.so.0", "found": True},
        {"name": "ld-linux-x86-64.so.2", "path": "/lib64/ld-linux-x86-64.so.2", "found": True},
    ]
    assert parsed["not_found"] == [] and parsed["errors"] == [] and parsed["ignored"] == []


def test_several_files_not_found_static_and_not_dynamic() -> None:
    parsed = parse("ldd", SEVERAL)
    assert [s["file"] for s in parsed["sections"]] == ["/tmp/h/ext.so", "/sbin/ldconfig", "/etc/passwd"]
    assert parsed["file"] == "/tmp/h/ext.so"
    assert parsed["not_found"] == ["libgone.so"]
    assert parsed["libraries"][1] == {"name": "libgone.so", "path": None, "found": False}
    first, static, data = parsed["sections"]
    assert first["not_found"] == ["libgone.so"] and not first["static"] and not first["not_dynamic"]
    assert static["static"] and not static["libraries"] and not static["not_dynamic"]
    assert data["not_dynamic"] and not data["static"]
    assert parsed["static"] and parsed["not_dynamic"]


def test_old_vdso_form_loader_symbol_versions_and_ldd_errors() -> None:
    text = (
        "/x/mpi_lib.so:\n"
        "\tlinux-vdso.so.1 =>  (0x00007ffd5a1f0000)\n"
        "\tlibmpi.so.12 => not found\n"
        "\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f0e0d000000)\n"
        "\t/lib64/ld-linux-x86-64.so.2 (0x00007f0e0d800000)\n"
        "/x/static_tool:\n"
        "\tstatically linked\n"
        "/x/data.txt:\n"
        "\tnot a dynamic executable\n"
        "/x/mpi_lib.so: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' not found "
        "(required by /x/mpi_lib.so)\n"
        "ldd: warning: you do not have execution permission for `/x/mpi_lib.so'\n"
    )
    parsed = parse("ldd", text)
    assert [s["file"] for s in parsed["sections"]] == ["/x/mpi_lib.so", "/x/static_tool", "/x/data.txt"]
    assert parsed["not_found"] == ["libmpi.so.12"]
    assert parsed["libraries"][0] == {"name": "linux-vdso.so.1", "path": None, "found": True}
    assert parsed["libraries"][3] == {"name": "ld-linux-x86-64.so.2", "path": "/lib64/ld-linux-x86-64.so.2",
                                      "found": True}
    assert parsed["sections"][1]["static"] and parsed["sections"][2]["not_dynamic"]
    assert parsed["version_errors"][0]["version"] == "GLIBCXX_3.4.32"
    assert parsed["version_errors"][0]["required_by"] == "/x/mpi_lib.so"
    assert parsed["errors"] == ["ldd: warning: you do not have execution permission for `/x/mpi_lib.so'"]


@pytest.mark.parametrize("text, key", [
    ("\tstatically linked\n", "static"),
    ("\tnot a dynamic executable\n", "not_dynamic"),
])
def test_a_lone_static_or_not_dynamic_answer(text: str, key: str) -> None:
    parsed = parse("ldd", text)
    assert parsed[key] is True and parsed["libraries"] == [] and parsed["sections"][0]["file"] is None


def test_only_an_ldd_error_is_still_ldd_output() -> None:
    # `ldd /nonexistent`: exit 1 and this one line, which libs.ldd quotes as the reason
    parsed = parse("ldd", "ldd: /nonexistent: No such file or directory\n")
    assert parsed["errors"] == ["ldd: /nonexistent: No such file or directory"] and parsed["libraries"] == []


@pytest.mark.parametrize("text", [
    "",
    "/x/mpi_lib.so:\n",  # a header alone says nothing about the libraries
    "$ ldd /x/mpi_lib.so\nPermission denied\n",  # a prompt and a shell's complaint
    "617 libs found in cache `/etc/ld.so.cache'\n"
    "\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n",  # ldconfig -p
    "\x00\x01ELF\x02\x01\x01",
])
def test_text_that_is_not_ldd_output_is_refused(text: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse("ldd", text)
    assert str(caught.value).startswith("not ldd output") and "\n" not in str(caught.value)


def test_empty_result_has_the_shape_of_a_parse() -> None:
    nothing = empty_result()
    assert set(nothing) == set(parse("ldd", LS))
    assert nothing["libraries"] == [] and nothing["not_found"] == [] and not nothing["not_dynamic"]
    assert nothing["sections"] == [{"file": None, "libraries": [], "not_found": [], "version_errors": [],
                                    "static": False, "not_dynamic": False}]
