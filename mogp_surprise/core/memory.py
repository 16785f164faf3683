"""Large per-level tables in huge pages (Linux, CPU), and freed memory handed back to the system.

Row-sparse training reaches a few thousand random rows of tables of hundreds of megabytes at every step (a
million users: the packed tables, their Adam state, the kept implicit sums and their gradient). In 4 KiB pages
nearly every such row costs a miss of the processor's address translation as well as of its caches. Linux backs
memory with 2 MiB pages where a program asks for them (``madvise(MADV_HUGEPAGE)``; the kernel's default
``transparent_hugepage=madvise``), which cuts those misses 512-fold. :func:`empty` and :func:`zeros` allocate
such tables and ask before the memory is first touched, so the pages are huge from the start. Measured on the
project's 2-core machine, a step's gathers, scatters and lazy Adam over 1M users x 100K items: 5.9-6.4 ->
5.3-5.4 ms (packed tables; the same with PyTorch's process-wide ``THP_MEM_ALLOC_ENABLE=1``, which a library
cannot set for its users). Elsewhere (another system, a GPU, a small table) they are ``torch.empty`` and
``torch.zeros``.
"""
from __future__ import annotations

import ctypes
import functools
import sys

import torch
from torch import Tensor

#: Linux's MADV_HUGEPAGE, the huge page size, and the smallest table worth asking for (a few huge pages)
MADV_HUGEPAGE, HUGE_PAGE, MIN_BYTES = 14, 2 << 20, 8 << 20
#: the temporaries (bytes) from which a loop of them hands freed memory back (:func:`release_freed`)
RELEASE_BYTES = 4 << 20


@functools.cache
def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return fn


def empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str | None = None) -> Tensor:
    """``torch.empty(shape)``, in huge pages where the system has them (module docstring)."""
    out = torch.empty(shape, dtype=dtype, device=device)
    advise = _madvise()
    if advise is not None and out.device.type == "cpu" and out.numel() * out.element_size() >= MIN_BYTES:
        start = -(-out.data_ptr() // HUGE_PAGE) * HUGE_PAGE  # the whole huge pages inside the table
        end = (out.data_ptr() + out.numel() * out.element_size()) // HUGE_PAGE * HUGE_PAGE
        if end > start:
            advise(start, end - start, MADV_HUGEPAGE)  # advice only: a refusal changes nothing
    return out


def zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str | None = None) -> Tensor:
    """``torch.zeros(shape)``, in huge pages where the system has them."""
    return empty(shape, dtype, device).zero_()


def rehome(table: Tensor) -> None:
    """Move a table's values into huge pages in place (its ``.data``), where the system has them and the table is
    large enough."""
    if _madvise() is not None and table.device.type == "cpu" and table.numel() * table.element_size() >= MIN_BYTES:
        fresh = empty(tuple(table.shape), table.dtype, table.device)
        fresh.copy_(table.detach())
        table.data = fresh


@functools.cache
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).malloc_trim  # glibc's; absent elsewhere (musl)
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def release_freed(temporary_bytes: int) -> None:
    """Hand the C allocator's free pages back to the system (glibc's ``malloc_trim``) after a step of a loop whose
    temporaries took ``temporary_bytes`` (nothing below :data:`RELEASE_BYTES`, or off glibc). Tensors of tens of
    megabytes freed between small allocations that live on fragment glibc's heap, which then grows by about a
    step's temporaries per step: ``recommend_many`` of 200 users of a 30,000-item catalogue peaked 565-2,546 MB
    above its start (1,000 users: 10 GB), 73-78 MB with this after every user (1,000 users: 85 MB), at about 3 % of
    its time (60 users, alternating in one process: 4.22 / 4.91 / 4.58 against 4.00 / 4.69 / 4.50 s). Not after a
    stored fold-in: into 269,000 users it doubled the fold-in's time (63 -> 124 ms) and left its memory's growth as
    it was."""
    trim = _malloc_trim()
    if trim is not None and temporary_bytes >= RELEASE_BYTES:
        trim(0)
