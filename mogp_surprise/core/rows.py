"""The rows of per-level tables that a minibatch reads, and their gradients (dense or row-sparse).

:class:`Batch` is one minibatch's index tuples; every term table is read through :meth:`Batch.gather`,
which gives the rows of the minibatch's levels with a dense gradient (:func:`gather_rows`) or, on the
row-sparse path of large catalogues, a gradient that holds only those rows (:func:`sparse_gather`, for
:class:`~.optim.RowAdam`). The distinct levels of each factor are found once per minibatch
(:func:`distinct_rows`).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


class Batch:
    """Index tuples (n, F) of one minibatch, and how the tables' rows are read for it (``sparse``: with
    row-sparse gradients). ``rows``: where the tuples are training ratings, their positions in the training data
    the module was initialised on (a term may read inputs it formed for them then)."""

    def __init__(self, index: Tensor, sparse: bool = False, rows: Tensor | None = None) -> None:
        self.index = index
        self.sparse = sparse
        self.rows = rows
        self._levels: dict[int, tuple[Tensor, Tensor]] = {}

    @property
    def n(self) -> int:
        return int(self.index.shape[0])

    def levels(self, factor: int) -> tuple[Tensor, Tensor]:
        """The distinct levels of ``factor`` in this minibatch (sorted) and each rating's place among them."""
        if factor not in self._levels:
            self._levels[factor] = distinct_rows(self.index[:, factor])
        return self._levels[factor]

    def gather(self, table: Tensor, factor: int) -> Tensor:
        """``table[index[:, factor]]``, differentiable in ``table`` (row-sparse gradient when ``sparse``)."""
        if self.sparse:
            return sparse_gather(table, *self.levels(factor))
        return gather_rows(table, self.index[:, factor])

    def gather_many(self, tables: list[Tensor], factor: int, extra: list[Tensor | None]) -> list[Tensor]:
        """Row-sparse path: ``tables[k][index[:, factor]] + extra[k][levels]`` for every table at once (``extra``:
        rows per distinct level of ``factor``, or None), with a row-sparse gradient for each table: the distinct
        levels' rows of every table side by side, expanded to the ratings by one gather, and the gradient of the
        ratings' rows summed per level by one scatter (instead of one of each per table)."""
        rows, inverse = self.levels(factor)
        widths = [t[0].numel() if t.dim() > 1 else 1 for t in tables]
        extra_in = [e for e in extra if e is not None]
        joined = _FactorRows.apply(rows, inverse, widths, [e is not None for e in extra], len(tables), *tables,
                                   *extra_in)
        out, start = [], 0
        for table, width in zip(tables, widths):
            out.append(joined[:, start:start + width] if table.dim() > 1 else joined[:, start])
            start += width
        return out


def add_rows(n_rows: int, index: Tensor, values: Tensor) -> Tensor:
    """``zeros(n_rows, ...).index_add_(0, index, values)``: the sum of ``values`` per destination row.

    A 2-d sum is formed transposed (``index_add_`` along dim 1 of a (width, n_rows) buffer) and
    returned transposed back (contiguous): the same sums, bit for bit, 3-9x faster on CPU (8,192 rows of
    width 8 into 6,040: 43 vs 381 us on 2 cores, where row-wise ``index_add_``'s threads contend
    for the same destination rows).
    """
    if values.dim() == 1:
        return values.new_zeros(n_rows).index_add_(0, index, values)
    return values.new_zeros((values.shape[1], n_rows)).index_add_(1, index, values.t()).t().contiguous()


class _GatherRows(torch.autograd.Function):
    """``table.index_select(0, index)`` whose backward is :func:`add_rows` (autograd's own backward
    of ``index_select`` is row-wise ``index_add_``)."""

    @staticmethod
    def forward(ctx, table: Tensor, index: Tensor) -> Tensor:
        ctx.save_for_backward(index)
        ctx.n_rows = table.shape[0]
        return table.index_select(0, index)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (index,) = ctx.saved_tensors
        return add_rows(ctx.n_rows, index, grad), None


def gather_rows(table: Tensor, index: Tensor) -> Tensor:
    """``table[index]`` for a 1-d or 2-d table, differentiable in ``table`` (dense gradient)."""
    if not torch.is_grad_enabled() or not table.requires_grad:
        return table.index_select(0, index)
    return _GatherRows.apply(table, index)


def distinct_rows(index: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.unique(index, return_inverse=True)`` for non-negative indices.

    On CPU by one numpy sort of ``index << b | position`` (b bits hold a position): the sorted keys
    give the distinct rows in order and, through the positions, every entry's place among them. For a
    minibatch's indices (8,192 of 1M rows) 82 us against 130 us for ``np.unique`` and 344 us for
    ``torch.unique`` (2 threads).
    """
    n = index.shape[0]
    bits = max(1, (n - 1).bit_length())
    if index.device.type != "cpu" or n == 0 or int(index.max()) >= 1 << (62 - bits):
        return torch.unique(index, return_inverse=True)
    keys = np.sort((index.numpy().astype(np.int64, copy=False) << bits) | np.arange(n))
    values = keys >> bits
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(values[1:], values[:-1], out=first[1:])
    inverse = np.empty(n, dtype=np.int64)
    inverse[keys & ((1 << bits) - 1)] = torch.cumsum(torch.from_numpy(first), 0).numpy() - 1  # numpy's: 2x slower
    return torch.from_numpy(values[first]).to(index.dtype), torch.from_numpy(inverse).to(index.dtype)


def sorted_distinct(keys: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-d array (sorted distinct values) by one sort and a mask of changes: numpy 2.4's
    ``np.unique`` goes through a hash table first and took 0.69 s for 800,000 int64 keys, against 0.009 s."""
    keys = np.sort(keys)
    return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if keys.size else keys


def distinct_index_rows(index: np.ndarray, n_levels: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of an (n, F) numpy index (entries -1 allowed: an unseen level) and each row's
    place among them, by one integer key per row where the levels allow one."""
    try:  # one integer key per row: a 1-d unique is much faster than np.unique(axis=0)
        keys = np.ravel_multi_index(tuple((index + 1).T), tuple(n + 1 for n in n_levels))
    except ValueError:  # too many combinations for one integer
        rows, inverse = np.unique(index, axis=0, return_inverse=True)
        return rows, inverse.reshape(-1)
    distinct, inverse = distinct_rows(torch.from_numpy(np.asarray(keys, dtype=np.int64)))
    rows = np.stack(np.unravel_index(distinct.numpy(), tuple(n + 1 for n in n_levels)), 1) - 1
    return rows, inverse.numpy()


def levels_present(index: Tensor, n_levels: int) -> Tensor:
    """The distinct values of the 1-d ``index`` (levels below ``n_levels``), sorted, by a mask over the levels:
    one pass over ``index`` and one over the mask, for an index far longer than a minibatch's (the ratings of
    a thirty-second of an epoch), where :func:`distinct_rows`' sort would cost more and its inverse is not
    needed."""
    mask = torch.zeros(n_levels, dtype=torch.bool, device=index.device)
    mask[index] = True
    return mask.nonzero().squeeze(1)


class _Gather(torch.autograd.Function):
    """``table[rows][inverse]`` (``rows`` distinct) whose gradient is a coalesced sparse COO tensor holding
    only ``rows``."""

    @staticmethod
    def forward(ctx, table: Tensor, rows: Tensor, inverse: Tensor) -> Tensor:
        ctx.save_for_backward(rows, inverse)
        ctx.shape = table.shape
        return table.index_select(0, rows).index_select(0, inverse)

    @staticmethod
    def backward(ctx, grad: Tensor):
        rows, inverse = ctx.saved_tensors
        compact = add_rows(rows.shape[0], inverse, grad)
        return torch.sparse_coo_tensor(rows.unsqueeze(0), compact, ctx.shape, is_coalesced=True,
                                       check_invariants=False), None, None


def sparse_gather(table: Tensor, rows: Tensor, inverse: Tensor | None = None) -> Tensor:
    """``table[rows][inverse]`` (rows of a 1-d or 2-d table) with a row-sparse gradient for :class:`~.optim.RowAdam`;
    without ``inverse``, ``table[rows]`` for any ``rows``."""
    if inverse is None:
        rows, inverse = distinct_rows(rows)
    return _Gather.apply(table, rows, inverse)


class _FactorRows(torch.autograd.Function):
    """Every table's rows of one factor's distinct levels side by side (plus per-level ``extra`` rows), expanded
    to the ratings (:meth:`Batch.gather_many`); each table's gradient is a coalesced sparse COO tensor of its
    distinct levels' rows, each extra's a dense one."""

    @staticmethod
    def forward(ctx, rows, inverse, widths, has_extra, n_tables, *tensors):
        tables, extras = tensors[:n_tables], list(tensors[n_tables:])
        compact = []
        for table, width, plus in zip(tables, widths, has_extra):
            part = table.index_select(0, rows).reshape(-1, width)
            compact.append(part + extras.pop(0) if plus else part)
        ctx.save_for_backward(rows, inverse)
        ctx.widths, ctx.has_extra, ctx.shapes = widths, has_extra, [t.shape for t in tables]
        return torch.cat(compact, dim=1).index_select(0, inverse)

    @staticmethod
    def backward(ctx, grad):
        rows, inverse = ctx.saved_tensors
        compact = add_rows(rows.shape[0], inverse, grad)
        table_grads, extra_grads, start = [], [], 0
        for width, plus, shape in zip(ctx.widths, ctx.has_extra, ctx.shapes):
            part = compact[:, start:start + width]
            start += width
            table_grads.append(torch.sparse_coo_tensor(rows.unsqueeze(0), part.reshape(-1, *shape[1:]).contiguous(),
                                                       shape, is_coalesced=True, check_invariants=False))
            if plus:
                extra_grads.append(part)
        return (None, None, None, None, None, *table_grads, *extra_grads)
