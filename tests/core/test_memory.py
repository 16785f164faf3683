"""Large tables in huge pages (core/memory.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from mogp_surprise.core import memory

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _huge_kb(address: int) -> int:
    """AnonHugePages of the mapping of this process that holds ``address`` (kB)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


@pytest.mark.skipif(not sys.platform.startswith("linux") or not THP.exists() or "[never]" in THP.read_text(),
                    reason="needs Linux with transparent huge pages (not 'never')")
def test_a_large_table_is_backed_by_huge_pages_and_keeps_its_values():
    table = memory.zeros((2_000_000, 16), torch.float32)  # 128 MB
    assert table.shape == (2_000_000, 16) and table.dtype == torch.float32 and not table.any()
    assert _huge_kb(table.data_ptr() + 64 * 2**20) >= 2048  # the middle of the table sits in huge pages
    values = torch.randn(2_000_000, 16)
    param = torch.nn.Parameter(values.clone())
    before = param.data_ptr()
    memory.rehome(param)
    assert param.data_ptr() != before and torch.equal(param.detach(), values) and param.requires_grad
    assert _huge_kb(param.data_ptr() + 64 * 2**20) >= 2048


def test_small_tables_and_other_systems_get_plain_tensors(monkeypatch):
    small = torch.arange(10.0)
    before = small.data_ptr()
    memory.rehome(small)  # below MIN_BYTES: left where it is
    assert small.data_ptr() == before
    monkeypatch.setattr(memory, "_madvise", lambda: None)  # no madvise (not Linux)
    assert torch.equal(memory.zeros((3, 2), torch.float64), torch.zeros(3, 2, dtype=torch.float64))
    large = torch.ones(3_000_000)
    before = large.data_ptr()
    memory.rehome(large)
    assert large.data_ptr() == before


def test_freed_memory_is_handed_back_only_after_large_temporaries(monkeypatch):
    """recommend_many of 1,000 users of a 30,000-item catalogue peaked 10 GB above its start: glibc's heap grew by
    each user's freed temporaries. release_freed trims it after a loop's step, but only where the step's
    temporaries are large (a trim costs a walk of the heap)."""
    from mogp_surprise.core import memory

    calls = []
    monkeypatch.setattr(memory, "_malloc_trim", lambda: calls.append)
    memory.release_freed(memory.RELEASE_BYTES - 1)
    assert calls == []
    memory.release_freed(memory.RELEASE_BYTES)
    assert calls == [0]
    import sys
    if sys.platform.startswith("linux"):
        monkeypatch.undo()
        memory.release_freed(memory.RELEASE_BYTES)  # glibc's own call runs (musl: none, and nothing happens)
