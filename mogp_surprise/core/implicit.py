"""SVD++-style implicit feedback: the normalised who-rated-what graph and the sums it forms.

A table that *feeds* another (:attr:`~.terms.Table.feeds`) adds, to the row of every user, the normalised
sum of its rows over the items the user rated, S_u = |N(u)|^{-1/2} sum_{j in N(u)} y_j (and likewise for
items over their raters).

**Dense** (:meth:`ImplicitFeedback.sums`): every step forms these sums for every level with one sparse
product per side, the feeding tables side by side (one pass over the graph instead of one per table: 4.0
vs 5.6 ms per training step on ML-1M, forward and backward), and the exact gradient with the transposed
graph. Its cost grows with the whole graph, so with the square of the data over an epoch.

**Row-sparse** (large data, :meth:`ImplicitFeedback.batch_sums`): the feeding tables are updated every
few steps instead of every step, with the gradient of all the steps in between. Between two updates the
tables do not change, so the sums are formed once after each update (:meth:`refresh`, forward only; those of
the levels that the steps up to the next update read, which the epoch's order tells) and a step reads its
minibatch's rows of them, exactly; their gradient is added up per
level (:meth:`batch_sums`' backward, one scatter of the minibatch's rows), and at the next update
(:meth:`flush`) pushed through the transposed graph once: the exact gradient of the steps since the last
update, whose mean Adam applies. So the implicit factors see the exact gradient of a minibatch
``refresh_every`` times larger, ``refresh_every`` times less often; the rest of the model is unchanged.
The per-step cost is that of the minibatch's rows; the updates cost two passes over the graph each, a
fixed number of times per epoch, less where a large catalogue has levels that the steps between two updates do
not reach: their sums are not formed, and their accumulated gradient (zero) not read.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import Tensor

from . import memory
from .rows import levels_present, sorted_distinct


class ImplicitFeedback:
    """The graph of the training ratings (:meth:`set_graph`) and the implicit sums of the feeding tables."""

    def __init__(self) -> None:
        self.graph: tuple[Tensor, ...] | None = None
        # the row-sparse path: per feeding table, every level's sums and their gradient since the last update
        self.accumulating = False
        self.cached: list[Tensor] | None = None
        self.gradients: list[Tensor] | None = None
        self.flushed: list[Tensor | None] = []  # the feeding tables' gradients at the last update
        self.steps = 0

    def set_graph(self, index: Tensor, n_levels: tuple[int, int], dtype: torch.dtype) -> None:
        self.graph = implicit_graph(index[:, :2], n_levels, dtype)

    def sums(self, feeders: list[tuple[int, Tensor]]) -> list[Tensor]:
        """For every ``(side, table)`` (``side``: the factor fed; the table's rows are the other factor's
        levels), the normalised sums of its rows over every level of ``side``, (n_side, width) each."""
        if self.graph is None:
            raise RuntimeError("implicit feedback needs the training graph: call set_implicit_graph(training index) "
                               "first")
        out: list[Tensor | None] = [None] * len(feeders)
        for side, mine in _by_side(feeders):
            graph, graph_t = self.graph[2 * side], self.graph[2 * side + 1]
            _split(_SparseProduct.apply(_joined(feeders, mine), graph, graph_t), mine, feeders, out)
        return out  # type: ignore[return-value]

    # -- the row-sparse path ------------------------------------------------------------------------------
    def start_accumulating(self) -> None:
        self.accumulating, self.steps = True, 0

    def stop_accumulating(self) -> None:
        self.accumulating, self.cached, self.gradients, self.steps, self.flushed = False, None, None, 0, []

    @torch.no_grad()
    def refresh(self, feeders: list[tuple[int, Tensor]], upcoming: Tensor | None = None) -> None:
        """The sums of every level from the feeding tables as they are now (forward only; one product per
        table into the buffers of the last refresh). ``upcoming``: the index tuples that the steps before the
        next update read; the sums of the levels not in them may be left out (they are formed at a later
        refresh, before a step reads them)."""
        old = self.cached
        levels = {} if upcoming is None else {side: levels_present(upcoming[:, side], self.graph[2 * side].shape[0])
                                              for side in {side for side, _ in feeders}}
        self.cached = [graph_product(self.graph[2 * side], self.graph[2 * side + 1], table.detach(),
                                     None if old is None else old[k], rows=levels.get(side))
                       for k, (side, table) in enumerate(feeders)]
        if self.gradients is None:
            self.gradients = [memory.zeros(c.shape, c.dtype, c.device) for c in self.cached]

    def batch_sums(self, feeders: list[tuple[int, Tensor]], levels: dict[int, Tensor]) -> list[Tensor]:
        """For every ``(side, table)``, the sums of the levels ``levels[side]`` (distinct): their rows of the
        refreshed sums, whose gradient is added to the levels' accumulated gradient (module docstring)."""
        return [_AccumulatedRows.apply(levels[side], self.cached[k], self.gradients[k], table)
                for k, (side, table) in enumerate(feeders)]

    def step_done(self) -> None:
        self.steps += 1

    @torch.no_grad()
    def flush(self, feeders: list[tuple[int, Tensor]], reduce=None) -> bool:
        """Set every feeding table's ``.grad`` to the mean gradient of the steps since the last update (the
        accumulated gradient of the sums through the transposed graph; ``reduce`` sums it over data-parallel
        processes first) and start accumulating anew; False when no step was taken since."""
        if not self.steps:
            return False
        self.flushed = self.flushed or [None] * len(feeders)
        for k, (side, table) in enumerate(feeders):
            gradient = self.gradients[k]
            if reduce is not None:
                gradient = reduce(gradient)
            # into the buffer of the last update (the optimiser drops .grad after its step; a fresh one was paged in
            # at every update: a million users' product took 73 ms into it, 46 into a kept buffer)
            self.flushed[k] = graph_product(self.graph[2 * side + 1], self.graph[2 * side], gradient,
                                            self.flushed[k], scale=1.0 / self.steps)
            table.grad = self.flushed[k]
            self.gradients[k].zero_()
        self.steps = 0
        return True


def _by_side(feeders: list[tuple[int, Tensor]]):
    """(side, the positions of its tables in ``feeders``) of each side fed."""
    for side in (0, 1):
        mine = [k for k, (s, _) in enumerate(feeders) if s == side]
        if mine:
            yield side, mine


def _joined(feeders: list[tuple[int, Tensor]], mine: list[int]) -> Tensor:
    """The tables at positions ``mine`` side by side (a copy of every row: only for the whole-graph products)."""
    tables = [feeders[k][1] for k in mine]
    return tables[0] if len(tables) == 1 else torch.cat(tables, dim=1)


def _split(total: Tensor, mine: list[int], feeders: list[tuple[int, Tensor]], out: list) -> None:
    """Columns of ``total`` back to the feeding tables they belong to."""
    start = 0
    for k in mine:
        width = feeders[k][1].shape[1]
        out[k] = total[:, start:start + width]
        start += width


def implicit_graph(index: Tensor, n_levels: tuple[int, int], dtype: torch.dtype) -> tuple[Tensor, ...]:
    """CSR matrices N_u (users x items) and N_i (items x users), and their transposes.

    Every row is scaled by ``1 / sqrt(number of its entries)``, so ``N_u @ Y`` is, for every user,
    the normalised sum of the implicit item factors of the items the user rated (as in SVD++).
    Repeated (user, item) pairs count once.

    Built with numpy from the sorted distinct pairs: N_u and N_i^T have the same pattern (users x items) and
    share its index arrays, as do N_i and N_u^T; the indices are 32-bit where they fit (MKL's product takes
    them as they are: 10M entries times 24 columns, 26 instead of 42 ms on 2 cores, and half the memory).
    10M ratings over a million users: 0.25 GB for the four matrices, against 1.0 GB resident and 2.6 GB at
    the peak when they were built by torch's COO-to-CSR conversions.
    """
    n_u, n_i = n_levels
    idx = index[:, :2].detach().cpu().numpy().astype(np.int64, copy=False)
    keys = sorted_distinct(idx[:, 0] * n_i + idx[:, 1])  # user-major, items ascending within a user
    users = keys // n_i
    items = keys - users * n_i
    del keys
    small = len(users) < 2 ** 31 - 1 and max(n_u, n_i) < 2 ** 31 - 1
    itype = np.int32 if small else np.int64
    deg_u = np.bincount(users, minlength=n_u)
    deg_i = np.bincount(items, minlength=n_i)
    # 1 / sqrt(count) in the graph's dtype, as torch computes it
    scale_u = torch.from_numpy(np.maximum(deg_u, 1)).to(dtype).rsqrt().numpy()
    scale_i = torch.from_numpy(np.maximum(deg_i, 1)).to(dtype).rsqrt().numpy()
    order = np.argsort(items, kind="stable")  # item-major, users ascending within an item

    def crow(degrees: np.ndarray) -> Tensor:
        return torch.from_numpy(np.concatenate([[0], np.cumsum(degrees)]).astype(itype))

    crow_u, col_u = crow(deg_u), torch.from_numpy(items.astype(itype))
    crow_i, col_i = crow(deg_i), torch.from_numpy(users[order].astype(itype))
    device = index.device

    def csr(crow_: Tensor, col: Tensor, values: np.ndarray, shape: tuple[int, int]) -> Tensor:
        with warnings.catch_warnings():  # torch calls its sparse CSR support "beta"; it is used only as documented
            warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support is in beta.*")
            matrix = torch.sparse_csr_tensor(crow_, col, torch.from_numpy(values), shape, check_invariants=False)
        return matrix if device.type == "cpu" else matrix.to(device)

    nu = csr(crow_u, col_u, scale_u[users], (n_u, n_i))
    ni_t = csr(crow_u, col_u, scale_i[items], (n_u, n_i))
    nu_t = csr(crow_i, col_i, scale_u[users[order]], (n_i, n_u))
    ni = csr(crow_i, col_i, scale_i[items[order]], (n_i, n_u))
    return nu, nu_t, ni, ni_t


def graph_product(matrix: Tensor, transposed: Tensor, dense: Tensor, out: Tensor | None = None,
                  scale: float = 1.0, rows: Tensor | None = None) -> Tensor:
    """``scale * matrix @ dense`` (a CSR graph and its transpose, no gradient), into ``out`` when it has the shape and
    dtype. On CPU where numba is available by :mod:`.row_kernel`'s kernels: one output row at a time (23 vs 77
    ms by torch for a million output rows), or, when ``dense`` has more rows than the output, ``dense``'s rows
    read in order and added into the output (36 vs 93 ms reading a million users' rows for 100K items);
    torch's product otherwise. ``rows``: the output rows needed (the others may be left as they were, or zero
    in a new output): the first kernel forms only those (at a million users and 10M ratings a quarter of them
    are read between two updates)."""
    from .optim import csr_product_kernels

    shape = (matrix.shape[0], dense.shape[1])
    if out is None or out.shape != shape or out.dtype != dense.dtype or out.device != dense.device:
        out = None
    kernels = csr_product_kernels() if dense.device.type == "cpu" else None
    if kernels is None or matrix.col_indices().dtype != torch.int32 or transposed.col_indices().dtype != torch.int32:
        out = torch.mm(matrix, dense, out=out) if out is not None else matrix @ dense
        return out.mul_(scale) if scale != 1.0 else out
    by_rows = dense.shape[0] <= shape[0]
    if out is None:
        out = (memory.empty if rows is None or not by_rows else memory.zeros)(shape, dense.dtype)
    source = matrix if by_rows else transposed
    arrays = (source.crow_indices().numpy(), source.col_indices().numpy(), source.values().numpy(),
              dense.contiguous().numpy(), out.numpy(), torch.get_num_threads(), scale)
    if by_rows:
        kernels[0](*arrays, rows=None if rows is None else rows.numpy())
    else:
        kernels[1](*arrays)
    return out


class _SparseProduct(torch.autograd.Function):
    """``sparse @ dense`` with the transpose kept as its own CSR matrix for the backward pass
    (torch's generic sparse backward transposes the matrix on every step)."""

    @staticmethod
    def forward(ctx, dense: Tensor, sparse: Tensor, sparse_t: Tensor) -> Tensor:
        ctx.sparse_t = sparse_t
        return sparse @ dense

    @staticmethod
    def backward(ctx, grad: Tensor):
        return ctx.sparse_t @ grad, None, None


class _AccumulatedRows(torch.autograd.Function):
    """Rows ``levels`` of the refreshed sums; the backward pass adds their gradient to the accumulated one
    (``gradients``, in place) and gives the tables none (they are updated from the accumulated gradient)."""

    @staticmethod
    def forward(ctx, levels: Tensor, cached: Tensor, gradients: Tensor, *tables: Tensor) -> Tensor:
        ctx.levels, ctx.gradients, ctx.n_tables = levels, gradients, len(tables)
        return cached.index_select(0, levels)

    @staticmethod
    def backward(ctx, grad: Tensor):
        from .optim import add_rows_kernel

        kernel = add_rows_kernel() if grad.device.type == "cpu" and grad.dtype == ctx.gradients.dtype else None
        if kernel is None or ctx.gradients.dim() != 2:
            ctx.gradients.index_add_(0, ctx.levels, grad)
        else:  # the levels are distinct: numba's kernel, all rows reached first (a million users: 0.13 vs 0.38 ms)
            kernel(ctx.gradients.numpy(), ctx.levels.numpy(), grad.contiguous().numpy(), torch.get_num_threads())
        return (None, None, None, *[None] * ctx.n_tables)

