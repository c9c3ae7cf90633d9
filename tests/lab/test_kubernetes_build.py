"""lab/kubernetes/build.py without building: the cache key follows every input, and two builds at once do not undo
each other (the second waits for the first and takes its result)."""

from __future__ import annotations

import threading

from lab import config
from lab.kubernetes import build

VERSIONS = {"golang-1.19-go": "1.19.8-2", "etcd-server": "3.4.23-4+b4"}


def test_the_key_follows_the_versions_and_the_recipe(monkeypatch):
    key = build.cache_key(VERSIONS)
    assert build.cache_key({**VERSIONS, "etcd-server": "3.4.23-4+b5"}) != key
    monkeypatch.setattr(build, "RECIPE_VERSION", build.RECIPE_VERSION + 1)
    assert build.cache_key(VERSIONS) != key


def test_a_second_build_waits_for_the_first_and_takes_its_result(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(build, "resolve", lambda: VERSIONS)
    building, release, built = threading.Event(), threading.Event(), []

    def slow_build(versions, out, progress):
        built.append(out)
        building.set()
        release.wait(10)
        out.mkdir()
        (out / "meta.json").write_text("{}\n")
        return out

    monkeypatch.setattr(build, "_build", slow_build)
    said: list[str] = []
    told_to_wait = threading.Event()

    def progress(line: str) -> None:
        said.append(line)
        if "another build is under way" in line:
            told_to_wait.set()

    first = threading.Thread(target=build.build, args=(progress,))
    first.start()
    assert building.wait(10)
    second: list = []
    waiting = threading.Thread(target=lambda: second.append(build.build(progress)))
    waiting.start()
    assert told_to_wait.wait(10) and waiting.is_alive() and len(built) == 1  # it waits, building nothing
    release.set()
    first.join(10)
    waiting.join(10)
    assert len(built) == 1 and second == built and said[-1].startswith("kubernetes binaries: cached in")
