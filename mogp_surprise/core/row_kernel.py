"""The row-sparse lazy Adam update of :class:`~.optim.RowAdam` compiled with numba (optional: ``pip install
'mogp-surprise[numba]'``; without numba ``RowAdam`` does the same update with torch operations).

At a million users the update is bound by reaching the rows of tables that no longer fit in the
caches: the torch version gathers every touched row of a table and of its Adam state, works on the
gathered rows with ~10 element-wise operations and scatters both back; this kernel first reaches
every touched row (independent loads: many cache misses in flight at once), then passes over each
row once. Measured on the project's 2-core machine (2 threads, A/B in one process), a training step
of 8,192 ratings over 1M users x 100K items: 10.34 -> 8.21 ms and 10.86 -> 8.72 ms with the single
pass, and 7.64 -> 7.51 ms on a quieter day from the first loop (docs/history.md).
"""
from __future__ import annotations

import contextlib
import math
import threading

import numba
import numpy as np
import torch


def _start_pool() -> None:
    """Start numba's thread pool now, keeping torch's thread count.

    Starting it sets OpenMP's thread count of the process to numba's (every core): with numba's "omp" layer the
    runtime is torch's own libgomp, and torch reads its thread count from it. So a user's
    ``torch.set_num_threads(1)`` was undone by the first kernel call of the process: that fit and every later one
    ran on 2 threads (the first differed from the same seeded fit run after it by up to 7e-4; beside another job,
    epochs took 4-15 times as long). Started here, once, with torch's count restored after it.
    """
    threads = torch.get_num_threads()
    numba.set_num_threads(numba.get_num_threads())  # (the first call starts the pool; later ones leave OpenMP alone)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


_start_pool()


@contextlib.contextmanager
def _threads(threads: int):
    """numba's thread count for one kernel call (at most ``threads``), the calling thread's own restored after it:
    code of the user's that runs numba keeps the count it set."""
    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(before)


def row_adam(param: np.ndarray, state: np.ndarray, rows: np.ndarray, grad: np.ndarray, t: int,
             decay: float | np.ndarray, beta1: float, beta2: float, eps: float, step_size: float, threads: int) -> None:
    """:func:`_row_adam` on at most ``threads`` threads (the caller's torch thread count); ``decay``: one value, or
    one per column (a table that packs several, :meth:`~.model.MWGPModule.pack_tables`)."""
    decay = np.broadcast_to(np.asarray(decay, dtype=np.float64), (param.shape[1],))
    with _threads(threads):
        _row_adam(param, state, rows, grad, float(t), np.ascontiguousarray(decay), beta1, beta2, eps, step_size)


@numba.njit(cache=True, parallel=True)
def _row_adam(param, state, rows, grad, t, decay, beta1, beta2, eps, step_size):  # pragma: no cover
    """Update ``param[rows]`` (2-d, in place) from the gradient rows ``grad`` with lazy Adam and lazy decay.

    ``state`` (n_rows, 2 w + 1) holds per row Adam's m (width w), v (w) and the last step that moved
    the row; ``t`` is this step, ``decay`` the prior's precision / N of every column, ``step_size``
    lr * sqrt(1 - beta2^t) / (1 - beta1^t) (``torch.optim.SparseAdam``'s placement of epsilon). A row last
    moved k steps ago gets k * decay * theta added to its gradient: the prior's gradients of the steps it
    missed.
    """
    width = param.shape[1]
    # first reach every touched row of both arrays with independent loads (the first, middle and last
    # element: every cache line of a row of up to three lines), so that many cache misses are in
    # flight at once, then update the rows from the caches; measured in training steps over 1M users x
    # 100K items (2 threads): the kernel took 0.74 -> 0.54 ms per step, the step 7.64 -> 7.51 ms
    last, mid = state.shape[1] - 1, state.shape[1] // 2
    reached = 0.0
    for j in numba.prange(rows.shape[0]):
        row = rows[j]
        reached += param[row, 0] + param[row, width - 1] + state[row, 0] + state[row, mid] + state[row, last]
    for j in numba.prange(rows.shape[0]):
        row = rows[j]
        missed = t - state[row, 2 * width]
        for c in range(width):
            g = grad[j, c] + decay[c] * missed * param[row, c]
            m = beta1 * state[row, c] + (1.0 - beta1) * g
            v = beta2 * state[row, width + c] + (1.0 - beta2) * g * g
            state[row, c] = m
            state[row, width + c] = v
            param[row, c] -= step_size * m / (math.sqrt(v) + eps)
        state[row, 2 * width] = t
    return reached  # used, so that the loads are kept


def row_adam_offset_kl(param: np.ndarray, state: np.ndarray, rows: np.ndarray, grad: np.ndarray, t: int,
                       cumulative: np.ndarray, inv_n: float, beta1: float, beta2: float, eps: float, step_size: float,
                       threads: int) -> tuple[float, float]:
    """:func:`_row_adam_offset_kl` on at most ``threads`` threads; returns the change of sum(mu^2 + v) and of
    sum(log v) over the rows it updated."""
    with _threads(threads):
        return _row_adam_offset_kl(param, state, rows, grad, float(t), cumulative, inv_n, beta1, beta2, eps,
                                   step_size)


@numba.njit(cache=True, parallel=True)
def _row_adam_offset_kl(param, state, rows, grad, t, cumulative, inv_n, beta1, beta2, eps,
                        step_size):  # pragma: no cover
    """Lazy Adam on rows [mu, log v] of a noise-offset table whose KL to N(0, tau_s) is added lazily: a row last
    moved at step t0 gets, for every step s in (t0, t], d/d mu = mu / (tau_s N) and d/d log v =
    (v / tau_s - 1) / (2 N) at the value it kept, i.e. mu * (C[t] - C[t0]) and (v (C[t] - C[t0]) - (t - t0) / N) / 2
    with C the cumulative sum of 1 / (tau_s N) (``cumulative``). ``state`` as in :func:`_row_adam` (width 2)."""
    changed_square, changed_log = 0.0, 0.0
    for j in numba.prange(rows.shape[0]):
        row = rows[j]
        last = state[row, 4]
        drift = cumulative[int(t)] - cumulative[int(last)]
        mu, logvar = np.float64(param[row, 0]), np.float64(param[row, 1])
        g0 = grad[j, 0] + mu * drift
        g1 = grad[j, 1] + 0.5 * (math.exp(logvar) * drift - (t - last) * inv_n)
        m0 = beta1 * state[row, 0] + (1.0 - beta1) * g0
        m1 = beta1 * state[row, 1] + (1.0 - beta1) * g1
        v0 = beta2 * state[row, 2] + (1.0 - beta2) * g0 * g0
        v1 = beta2 * state[row, 3] + (1.0 - beta2) * g1 * g1
        state[row, 0], state[row, 1], state[row, 2], state[row, 3], state[row, 4] = m0, m1, v0, v1, t
        new_mu = mu - step_size * m0 / (math.sqrt(v0) + eps)
        new_logvar = logvar - step_size * m1 / (math.sqrt(v1) + eps)
        param[row, 0], param[row, 1] = new_mu, new_logvar
        stored_mu, stored_logvar = np.float64(param[row, 0]), np.float64(param[row, 1])  # as the table holds them
        changed_square += stored_mu * stored_mu + math.exp(stored_logvar) - mu * mu - math.exp(logvar)
        changed_log += stored_logvar - logvar
    return changed_square, changed_log


def csr_product(crow: np.ndarray, col: np.ndarray, values: np.ndarray, dense: np.ndarray, out: np.ndarray,
                threads: int, scale: float = 1.0, rows: np.ndarray | None = None) -> None:
    """``out = scale * A @ dense`` for a CSR matrix A (``crow``, ``col``, ``values``) on at most ``threads``
    threads; only the output rows ``rows`` (distinct) where given, the others left as they are."""
    rows = np.arange(out.shape[0]) if rows is None else rows
    with _threads(threads):
        _csr_product(crow, col, values, dense, out, values.dtype.type(scale), rows)


@numba.njit(cache=True, parallel=True)
def _csr_product(crow, col, values, dense, out, scale, rows):  # pragma: no cover
    """One output row per iteration, its entries accumulated in order. The implicit-feedback graph's products
    (core/implicit.py) at a million users: 23 vs 77 ms with a million output rows (MKL through torch zeroes,
    fills and copies them), 41 vs 46 ms with 100K (3M entries, 24 columns, 2 threads). Reading rows of a
    table much larger than the output, :func:`csr_transposed_product` is faster."""
    width = out.shape[1]
    for i in numba.prange(rows.shape[0]):
        r = rows[i]
        for c in range(width):
            out[r, c] = 0.0
        for k in range(crow[r], crow[r + 1]):
            j, v = col[k], values[k] * scale
            for c in range(width):
                out[r, c] += v * dense[j, c]


def csr_transposed_product(crow: np.ndarray, col: np.ndarray, values: np.ndarray, dense: np.ndarray,
                           out: np.ndarray, threads: int, scale: float = 1.0) -> None:
    """``out = scale * B^T @ dense`` for a CSR matrix B (``crow``, ``col``, ``values``; B's rows are
    ``dense``'s)."""
    threads = max(1, min(threads, numba.config.NUMBA_NUM_THREADS))
    with _threads(threads):
        _csr_transposed_product(crow, col, values, dense, out, _parts((threads, *out.shape), out.dtype),
                                values.dtype.type(scale))


_KEPT = threading.local()  # per calling thread: two fits in threads of one process never share a buffer


def _parts(shape: tuple, dtype) -> np.ndarray:
    """The per-thread copies of an output, kept for the next product of that shape (a fresh array is paged in at
    every product: 12.8 MB for 100K x 16 on 2 threads, 32 times an epoch)."""
    kept = _KEPT.__dict__.setdefault("parts", {})
    key = (shape, np.dtype(dtype))
    if key not in kept:
        if len(kept) >= 8:
            kept.clear()
        kept[key] = np.empty(shape, dtype)
    return kept[key]


@numba.njit(cache=True, parallel=True)
def _csr_transposed_product(crow, col, values, dense, out, parts, scale):  # pragma: no cover
    """Every thread reads a contiguous share of ``dense``'s rows once and adds them into its own copy of the
    output (``parts``), which are then summed. Where ``dense`` has many more rows than ``out`` (a million
    users' table, 100K items) this reads the large table in order and writes into a small one instead of
    reading the large one at random: 10M entries, 100K x 16 output, 2 threads: 36 vs 93 ms by
    :func:`csr_product` with the transposed matrix. A row of ``dense`` that is all zeros is skipped: the flush's
    accumulated gradient (core/implicit.py) is zero for the levels no step reached since the last update,
    three quarters of a million users at 10M ratings."""
    n_parts, n_rows, width = parts.shape[0], crow.shape[0] - 1, out.shape[1]
    for p in numba.prange(n_parts):
        part = parts[p]
        part[:] = 0.0
        for r in range(n_rows * p // n_parts, n_rows * (p + 1) // n_parts):
            touched = False  # a row of zeros adds nothing: skip its entries
            for c in range(width):
                if dense[r, c] != 0.0:
                    touched = True
                    break
            if not touched:
                continue
            for k in range(crow[r], crow[r + 1]):
                j, v = col[k], values[k] * scale
                for c in range(width):
                    part[j, c] += v * dense[r, c]
    for j in numba.prange(out.shape[0]):
        for c in range(width):
            total = parts[0, j, c]
            for p in range(1, n_parts):
                total += parts[p, j, c]
            out[j, c] = total


def add_into_rows(table: np.ndarray, rows: np.ndarray, values: np.ndarray, threads: int) -> None:
    """``table[rows] += values`` for distinct ``rows`` (2-d), on at most ``threads`` threads."""
    with _threads(threads):
        _add_into_rows(table, rows, values)


@numba.njit(cache=True, parallel=True)
def _add_into_rows(table, rows, values):  # pragma: no cover
    """Every destination row reached first (independent loads, as in :func:`_row_adam`), then added to: the
    implicit-feedback gradient of a minibatch's 8K users added into a million users' (2 threads): 0.13 vs 0.38
    ms by ``index_add_`` at width 16, 0.14 vs 0.71 ms at width 8, alone; within training steps ``index_add_``
    took 1.5 ms."""
    width = table.shape[1]
    reached = 0.0
    for j in numba.prange(rows.shape[0]):
        reached += table[rows[j], 0] + table[rows[j], width - 1]
    for j in numba.prange(rows.shape[0]):
        row = rows[j]
        for c in range(width):
            table[row, c] += values[j, c]
    return reached


def sparse_neighbours(item_crow, item_users, item_values, user_crow, user_items, user_values, norms, shrink: float,
                      out, threads: int) -> None:
    """Each item's most similar items into ``out`` (items, width; filled with -1 beforehand) from the ratings by
    item (``item_crow``, ``item_users``, ``item_values``: CSR) and by user (likewise; values the residuals, one per
    distinct (user, item)), the similarity as ``core/similarity.py`` forms it (``norms``: each item's residual
    norm). An item's row is summed over its raters' rows in a dense scratch: sum_u n_u^2 multiply-adds, where the
    sparse products take ratings x items."""
    threads = max(1, min(threads, numba.config.NUMBA_NUM_THREADS))
    with _threads(threads):
        _sparse_neighbours(item_crow, item_users, item_values, user_crow, user_items, user_values, norms, shrink,
                           out, 4 * threads)


@numba.njit(cache=True, parallel=True)
def _sparse_neighbours(item_crow, item_users, item_values, user_crow, user_items, user_values, norms, shrink, out,
                       n_parts):  # pragma: no cover
    """The top-k as the dense products' would pick it: the positive similarities, largest first, then items of
    similarity 0 (the lowest numbers), then the negative ones, largest first."""
    n_items, width = out.shape[0], out.shape[1]
    for p in numba.prange(n_parts):
        acc = np.zeros(n_items)
        count = np.zeros(n_items)
        nonzero = np.zeros(n_items, dtype=np.bool_)
        touched = np.empty(n_items, dtype=np.int64)
        for i in range(n_items * p // n_parts, n_items * (p + 1) // n_parts):
            n_touched = 0
            for a in range(item_crow[i], item_crow[i + 1]):
                u, e = item_users[a], item_values[a]
                for b in range(user_crow[u], user_crow[u + 1]):
                    j = user_items[b]
                    if j == i:
                        continue
                    if count[j] == 0.0:
                        touched[n_touched] = j
                        n_touched += 1
                    acc[j] += e * user_values[b]
                    count[j] += 1.0
            sims = np.empty(n_touched)
            for t in range(n_touched):
                j = touched[t]
                sims[t] = acc[j] / (norms[i] * norms[j] + 1e-9) * count[j] / (count[j] + shrink)
                nonzero[j] = sims[t] != 0.0
            order = np.argsort(-sims)
            filled = 0
            for t in range(n_touched):
                if filled == width or sims[order[t]] <= 0.0:
                    break
                out[i, filled] = touched[order[t]]
                filled += 1
            j = 0
            while filled < width and j < n_items:
                if j != i and not nonzero[j]:
                    out[i, filled] = j
                    filled += 1
                j += 1
            for t in range(n_touched):
                if filled == width:
                    break
                if sims[order[t]] < 0.0:
                    out[i, filled] = touched[order[t]]
                    filled += 1
            for t in range(n_touched):
                j = touched[t]
                acc[j] = 0.0
                count[j] = 0.0
                nonzero[j] = False

