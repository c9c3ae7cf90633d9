"""GPU memory test: one buffer of 64-bit words over a fraction of the free memory, written with patterns and
read back in chunks.

Verifying in chunks matters: a whole-buffer `buf != pattern` allocates a second buffer of the same number
of elements and runs out of memory on a real GPU (measured on an H100). The chunk is sized so that its
temporaries (the mismatch mask, the expected words of the address pattern, the positions of mismatches)
fit in the memory left beside the buffer.

Patterns: alternating 0x55../0xAA.., all zeros / all ones, walking ones and walking zeros (each of the 8 bit
positions replicated in every byte), address-in-address (each word holds its own index), and a moving
inversion (fill p; chunks ascending: verify p, write ~p; chunks descending: verify ~p, write p).

`bad_words` counts distinct bad words: exact while no chunk pass shows more than TRACKED_PER_PASS mismatches,
otherwise a lower bound (the largest count of one pass). `bad_by_pattern` counts mismatching reads per pattern
(a word that fails every pass of walking ones counts 8 there)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .device import memory_bytes
from .protocol import Interrupted, TestCannotRun

WORD_BYTES = 8
ALL_ONES = 0xFFFF_FFFF_FFFF_FFFF
ADDRESS = "address"  # the pattern whose expected word is the word's own index
BYTE_LANES = 0x0101_0101_0101_0101
SIMPLE_PATTERNS: dict[str, list[int]] = {
    "alternating": [0x5555_5555_5555_5555, 0xAAAA_AAAA_AAAA_AAAA],
    "zeros_ones": [0, ALL_ONES],
    "walking_ones": [BYTE_LANES << bit for bit in range(8)],
    "walking_zeros": [ALL_ONES ^ (BYTE_LANES << bit) for bit in range(8)],
}
MOVING_INVERSION = 0x0123_4567_89AB_CDEF
PATTERN_NAMES = [*SIMPLE_PATTERNS, "address", "moving_inversion"]

DEFAULT_FRACTION = 0.9
MAX_CHUNK_BYTES = 2**30
MIN_CHUNK_BYTES = 2**16
SCAN_WORDS = 2**20  # mismatch positions are looked for this many words at a time (bounded temporaries)
TRACKED_PER_PASS = 4096
TRACKED_MAX = 2**16
REPORTED_OFFSETS = 16
# Temporaries per chunk, in chunk bytes: the bool mask (1/8), the address pattern's expected words (1), and
# the positions of mismatches (at most one int64 per scanned word: 1); x2 for the pool's rounding and slack.
TEMPORARY_CHUNKS = 2 * (1 / 8 + 1 + 1)


@dataclass
class PassResult:
    """One verify pass: how many words differ, and the word indices of the first of them."""

    mismatches: int
    positions: list[int]


@dataclass
class Findings:
    bad_by_pattern: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PATTERN_NAMES, 0))
    bad_positions: set[int] = field(default_factory=set)
    largest_pass: int = 0
    exact: bool = True

    def add(self, pattern: str, found: PassResult) -> None:
        self.bad_by_pattern[pattern] += found.mismatches
        self.largest_pass = max(self.largest_pass, found.mismatches)
        if found.mismatches > len(found.positions):
            self.exact = False
        room = TRACKED_MAX - len(self.bad_positions)
        new = [p for p in found.positions if p not in self.bad_positions]
        if len(new) > room:
            self.exact = False
        self.bad_positions.update(new[:room])

    def bad_words(self) -> int:
        tracked = len(self.bad_positions)
        return tracked if self.exact else max(tracked, self.largest_pass)


def expected(cp: Any, pattern: int | str, start: int, stop: int) -> Any:
    """What words start..stop-1 should hold: a uint64 scalar, or their own indices for the address pattern."""
    if pattern == ADDRESS:
        return cp.arange(start, stop, dtype=cp.uint64)
    return np.uint64(pattern)


def write_chunk(cp: Any, buf: Any, start: int, stop: int, pattern: int | str) -> None:
    if pattern == ADDRESS:
        buf[start:stop] = expected(cp, pattern, start, stop)
    else:
        buf[start:stop].fill(np.uint64(pattern))


def mismatch_positions(cp: Any, mask: Any, limit: int) -> list[int]:
    """Indices of the first `limit` true entries of a bool array, scanning SCAN_WORDS at a time."""
    found: list[int] = []
    for offset in range(0, mask.size, SCAN_WORDS):
        part = mask[offset:offset + SCAN_WORDS]
        if int(cp.count_nonzero(part)):
            found.extend(int(i) + offset for i in cp.flatnonzero(part).get()[:limit - len(found)])
            if len(found) >= limit:
                break
    return found


def check_chunk(cp: Any, buf: Any, start: int, stop: int, pattern: int | str) -> PassResult:
    mask = buf[start:stop] != expected(cp, pattern, start, stop)
    count = int(cp.count_nonzero(mask))
    positions = mismatch_positions(cp, mask, min(count, TRACKED_PER_PASS)) if count else []
    return PassResult(count, [start + p for p in positions])


def chunks(words: int, chunk_words: int, descending: bool = False) -> list[tuple[int, int]]:
    spans = [(start, min(start + chunk_words, words)) for start in range(0, words, chunk_words)]
    return spans[::-1] if descending else spans


def fill(cp: Any, buf: Any, pattern: int | str, chunk_words: int) -> None:
    """Write `pattern` (a 64-bit word, or ADDRESS) into every word of `buf`, chunk by chunk."""
    for start, stop in chunks(buf.size, chunk_words):
        write_chunk(cp, buf, start, stop, pattern)


def verify(cp: Any, buf: Any, pattern: int | str, chunk_words: int) -> PassResult:
    """Read every word of `buf` back: the mismatches and the first word indices (at most TRACKED_PER_PASS
    per chunk)."""
    total, positions = 0, []
    for start, stop in chunks(buf.size, chunk_words):
        found = check_chunk(cp, buf, start, stop, pattern)
        total += found.mismatches
        positions.extend(found.positions)
    return PassResult(total, positions)


def moving_inversion(cp: Any, buf: Any, chunk_words: int, findings: Findings) -> None:
    inverse = ALL_ONES ^ MOVING_INVERSION
    fill(cp, buf, MOVING_INVERSION, chunk_words)
    for now, then, descending in ((MOVING_INVERSION, inverse, False), (inverse, MOVING_INVERSION, True)):
        for start, stop in chunks(buf.size, chunk_words, descending):
            findings.add("moving_inversion", check_chunk(cp, buf, start, stop, now))
            write_chunk(cp, buf, start, stop, then)


def chunk_size(left_over_bytes: int, max_chunk_bytes: int) -> int:
    """The largest power of two (bytes) whose temporaries fit in the memory beside the buffer."""
    fits = int(left_over_bytes / TEMPORARY_CHUNKS)
    if fits < MIN_CHUNK_BYTES:
        raise TestCannotRun(f"too little memory beside the test buffer for the verify chunks "
                            f"({left_over_bytes} bytes): lower --memtest-fraction")
    size = MIN_CHUNK_BYTES
    while size * 2 <= min(fits, max_chunk_bytes):
        size *= 2
    return size


def warm_up(cp: Any) -> None:
    """Run each kernel once on a tiny buffer, so their code is loaded before free memory is measured."""
    tiny = cp.zeros(64, dtype=cp.uint64)
    fill(cp, tiny, ALL_ONES, 32)
    fill(cp, tiny, ADDRESS, 32)
    verify(cp, tiny, 1, 32)


def run(cp: Any, fraction: float = DEFAULT_FRACTION, max_chunk_bytes: int = MAX_CHUNK_BYTES) -> dict[str, Any]:
    warm_up(cp)
    free, total = memory_bytes(cp)
    words = int(free * fraction) // WORD_BYTES
    chunk_bytes = chunk_size(free - words * WORD_BYTES, max_chunk_bytes)
    chunk_words = chunk_bytes // WORD_BYTES
    buf = cp.empty(words, dtype=cp.uint64)
    findings = Findings()
    try:
        for name, values in SIMPLE_PATTERNS.items():
            for value in values:
                fill(cp, buf, value, chunk_words)
                findings.add(name, verify(cp, buf, value, chunk_words))
        fill(cp, buf, ADDRESS, chunk_words)
        findings.add("address", verify(cp, buf, ADDRESS, chunk_words))
        moving_inversion(cp, buf, chunk_words, findings)
    except Exception as exc:  # an uncorrectable ECC error mid-test: the bad words found so far are evidence
        raise Interrupted(exc, figures(free, total, words * WORD_BYTES, chunk_bytes, findings)) from exc
    return figures(free, total, words * WORD_BYTES, chunk_bytes, findings)


def figures(free: int, total: int, tested: int, chunk_bytes: int, findings: Findings) -> dict[str, Any]:
    """coverage: the share of the GPU's whole memory tested, so that memory another program holds shows."""
    offsets = [p * WORD_BYTES for p in sorted(findings.bad_positions)[:REPORTED_OFFSETS]]
    return {"free_bytes": free, "total_bytes": total, "bytes_tested": tested,
            "coverage": round(tested / total, 4) if total else 0.0,
            "patterns": PATTERN_NAMES, "bad_words": findings.bad_words(), "bad_offsets": offsets,
            "bad_by_pattern": findings.bad_by_pattern, "chunk_bytes": chunk_bytes}
