"""Which items are near each other, for the neighbourhood term (:mod:`.terms.neighbourhood`): each item's most
similar items by the shrunk cosine of the residual vectors (0 where a user did not rate the item), and where each
training rating's neighbours sit in the sorted rating graph. Formed once before training; torch only."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .optim import sparse_neighbours_kernel

#: entries of a dense block of the similarity's product, and of a (users x items) map of the graph
BLOCK_ENTRIES, MAP_ENTRIES = 2 ** 25, 2 ** 24
#: the similarity by dense products up to this many (users x items) entries, and where the ratings fill at least
#: 1 / DENSE_FILL of them (dense float32 products ran about 50 times as many multiply-adds a second as the sparse
#: float64 ones on an ML-1M split, which the ratings fill to 1 / 28)
DENSE_ENTRIES, DENSE_FILL = 2 ** 25, 32
#: where a dense product (items x items) fits in one block it is formed by blocks of this many columns over the rows up
#: to the block's end, the rest mirrored (it is symmetric): about half the multiply-adds (an ML-1M split: the two
#: products 1.6 s against 2.2 s whole, the neighbours 1.07 against 1.45 s, the same sets)
SYMMETRIC_BLOCK = 1024


def neighbour_residuals(index: Tensor, neighbours: Tensor, keys: Tensor, order: Tensor, residuals: Tensor,
                        n_items: int) -> Tensor:
    """For each rating of ``index`` and each neighbour of its item, the residual of the user's rating of the
    neighbour (the first, for a pair rated more than once) when the user rated it, else NaN: (ratings, K) of
    ``residuals``' dtype. ``keys, order``: the graph, ``index``'s keys user * n_items + item sorted, and the sort's
    order, so that the ratings of a run of users are ``order`` over the run's stretch of ``keys``; ``residuals``:
    the graph's residuals, in the order of ``keys``. Users in chunks: a dense (users x items) map of their places
    in the graph, read at the neighbours (ML-100K: 0.07 s against 0.54 s for a binary search of every neighbour in
    ``keys``; an ML-1M split 0.75 against 1.6 s). A training step then reads one row per rating (8,192 ratings at
    ML-1M's sizes: 0.5 ms, against 2.0 ms for reading places and then residuals)."""
    kind = torch.int32 if keys.numel() < 2 ** 31 else torch.int64
    device = index.device
    out = torch.full((index.shape[0], neighbours.shape[1]), math.nan, dtype=residuals.dtype, device=device)
    if index.shape[0] == 0:
        return out
    n_users = int(index[:, 0].max()) + 1
    start = _starts(index[:, 0], n_users)  # each user's stretch of keys
    missing = torch.iinfo(kind).max
    unrated = torch.full((), math.nan, dtype=residuals.dtype, device=device)
    chunk = max(1, MAP_ENTRIES // n_items)
    for first in range(0, n_users, chunk):
        a, b = int(start[first]), int(start[min(first + chunk, n_users)])
        where = torch.full((min(chunk, n_users - first) * n_items,), missing, dtype=kind, device=device)
        where.scatter_reduce_(0, keys[a:b] - first * n_items, torch.arange(a, b, dtype=kind, device=device),
                              reduce="amin")
        rows = order[a:b]
        near = neighbours[index[rows, 1]]
        place = where[(index[rows, 0] - first)[:, None] * n_items + near.clamp_min(0)]
        rated = (place != missing) & (near >= 0)
        out[rows] = torch.where(rated, residuals[place.masked_fill(~rated, 0).long()], unrated)
    return out


def _starts(levels: Tensor, n: int) -> Tensor:
    """Where each of ``n`` levels starts in ``levels`` sorted: (n + 1,) cumulative counts."""
    out = torch.zeros(n + 1, dtype=torch.long, device=levels.device)
    out[1:] = torch.cumsum(torch.bincount(levels, minlength=n), 0)
    return out


def item_neighbours(index: Tensor, residual: Tensor, n_levels: tuple[int, ...], k: int, shrink: float) -> Tensor:
    """Each item's k most similar items (module docstring), (items, k) int64; -1 where an item has fewer than
    k others."""
    n_items = n_levels[1]
    device = index.device
    out = torch.full((n_items, k), -1, dtype=torch.long, device=device)
    width = min(k, n_items - 1)
    if width <= 0:
        return out
    norms = torch.zeros(n_items, dtype=residual.dtype, device=device).index_add_(0, index[:, 1], residual * residual)
    norms = norms.sqrt()
    kernel = sparse_neighbours_kernel() if device.type == "cpu" and not _dense(index, n_levels) else None
    if kernel is not None:  # compiled, from each item's raters' rows
        return _by_kernel(kernel, index, residual, n_levels, norms, shrink, out, width)
    for start, stop, num, common in products(index, residual, n_levels):
        scale = norms.to(num.dtype)
        sim = num / (scale[:, None] * scale[None, start:stop] + 1e-9) * common / (common + shrink)
        cols = torch.arange(start, stop, device=device)
        sim[cols, cols - start] = -math.inf  # not its own neighbour
        out[start:stop, :width] = torch.topk(sim.T, width, dim=1).indices
    return out


def _dense(index: Tensor, n_levels: tuple[int, ...]) -> bool:
    """Whether the similarity is formed by dense products (:func:`products`)."""
    return n_levels[0] * n_levels[1] <= min(DENSE_ENTRIES, DENSE_FILL * index.shape[0])


def _by_kernel(kernel, index: Tensor, residual: Tensor, n_levels: tuple[int, ...], norms: Tensor, shrink: float,
               out: Tensor, width: int) -> Tensor:
    """:func:`item_neighbours` by numba's :func:`~.row_kernel.sparse_neighbours` where the ratings are too sparse for
    the dense products: sum_u n_u^2 multiply-adds, against ratings x items for the sparse products. 167,000
    generated ratings over 38,000 users and 17,000 items (median user 2 ratings, 22M pairs of one user's items
    against 2.8G): 8.8 s -> 0.61 s (a first call also compiles, 4 s once), the same similarities chosen; the fit
    44.5 -> 23.8 s, RMSE 0.9063 either way."""
    n_users, n_items = n_levels
    keys, inverse = torch.unique(index[:, 0] * n_items + index[:, 1], return_inverse=True)  # by user, then item
    e = torch.zeros(keys.shape[0], dtype=torch.float64).index_add_(0, inverse, residual.double())
    users, items = keys // n_items, keys % n_items
    by_item = torch.argsort(items, stable=True)
    crow = [torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(torch.bincount(levels, minlength=n), 0)])
            for levels, n in ((items, n_items), (users, n_users))]
    kernel(crow[0].numpy(), users[by_item].numpy(), e[by_item].numpy(), crow[1].numpy(), items.numpy(), e.numpy(),
           norms.double().numpy(), float(shrink), out[:, :width].numpy(), torch.get_num_threads())  # in place
    return out


def products(index: Tensor, residual: Tensor, n_levels: tuple[int, ...]):
    """Blocks of consecutive items: (start, stop, sum_u e_ui e_uj, common raters of i and j), each (items,
    stop - start), over every item i and the block's items j.

    Dense (users x items) float32 matrices and dense products where the ratings fill at least 1 / ``DENSE_FILL``
    of the matrix and it has at most ``DENSE_ENTRIES`` entries: an ML-1M split 2.3-2.7 s against 5.4-6.0 s for
    the sparse products (the neighbours' sets 99.99 % the same, their order 99.3 %: float32 sums), 1.6 s from the
    products' symmetric halves (:func:`_symmetric_product`, where the products fit in one block). Else
    (items x users) sparse float64 matrices times dense blocks of columns: about ratings x items multiply-adds,
    where the dense products would take users x items^2."""
    n_users, n_items = n_levels
    users, items = index[:, 0], index[:, 1]
    device = index.device
    if _dense(index, n_levels):
        e = torch.zeros(n_users, n_items, dtype=torch.float32, device=device)
        e.index_put_((users, items), residual.to(torch.float32), accumulate=True)
        r = torch.zeros_like(e)
        r[users, items] = 1.0  # a repeated pair counts once
        if n_items * n_items <= BLOCK_ENTRIES:
            yield 0, n_items, _symmetric_product(e), _symmetric_product(r)
            return
        block = max(1, BLOCK_ENTRIES // n_items)
        for start in range(0, n_items, block):
            stop = min(start + block, n_items)
            yield start, stop, e.T @ e[:, start:stop], r.T @ r[:, start:stop]
        return
    # (items x users) sparse matrices of the residuals and of who rated what (float64: sums of many products)
    e = torch.sparse_coo_tensor(torch.stack([items, users]), residual, (n_items, n_users),
                                check_invariants=False).coalesce()
    # who rated what: a 1 at each distinct (item, user) of the coalesced residuals (a repeated pair counts once)
    r = torch.sparse_coo_tensor(e.indices(), torch.ones_like(e.values()), e.shape, check_invariants=False,
                                is_coalesced=True)
    block = max(1, min(n_items, BLOCK_ENTRIES // max(n_users, 1)))
    for start in range(0, n_items, block):
        stop = min(start + block, n_items)
        cols = torch.arange(start, stop, device=device)
        e_block = _dense_columns(index, residual, cols, n_users)  # (users, block)
        r_block = _dense_columns(index, torch.ones_like(residual), cols, n_users).clamp_max(1.0)
        yield start, stop, torch.sparse.mm(e, e_block), torch.sparse.mm(r, r_block)


def _symmetric_product(x: Tensor) -> Tensor:
    """x^T x from its blocks on and above the diagonal (``SYMMETRIC_BLOCK`` columns at a time), mirrored below."""
    n = x.shape[1]
    out = x.new_empty(n, n)
    for start in range(0, n, SYMMETRIC_BLOCK):
        stop = min(start + SYMMETRIC_BLOCK, n)
        out[:stop, start:stop] = x[:, :stop].T @ x[:, start:stop]
        out[start:stop, :start] = out[:start, start:stop].T
    return out


def _dense_columns(index: Tensor, values: Tensor, cols: Tensor, n_users: int) -> Tensor:
    """The (users, len(cols)) dense block of the (users x items) matrix with ``values`` at ``index``, for the
    items ``cols`` (consecutive)."""
    start = int(cols[0])
    inside = (index[:, 1] >= start) & (index[:, 1] < start + cols.numel())
    out = torch.zeros(n_users, cols.numel(), dtype=values.dtype, device=values.device)
    out.index_put_((index[inside, 0], index[inside, 1] - start), values[inside], accumulate=True)
    return out
