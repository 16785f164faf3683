"""One user's or one pair's predictive in one compiled call (numba; optional: ``pip install
'mogp-surprise[numba]'``): serving one pair (:mod:`.serving`: the GP's moments, the bilinear product, the
neighbourhood term's part), and for one user the neighbourhood term's pair inputs with many items (a top-N list,
fold-in's answers) and its part with the whole catalogue (``recommend``). Each has a torch or numpy path used
without numba, with the same results (the pair inputs bit for bit, the sums up to float rounding; tests compare
them).
"""
from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, fastmath=True)
def pair_gp_moments(x0, x1, var0, var1, zs, offset, z, inv_ls, inv_ls2, lin, quad, outputscale,
                    unseen):  # pragma: no cover
    """E[f] and Var[f] at one GP input, the rows ``x0`` and ``x1`` side by side (core/serving.py; ``var0``, ``var1``
    their input variances, or both empty): the augmented kernel row, ``lin . k``, ``s + k^T quad k`` (``quad``
    symmetric: its lower triangle), the delta method where the variances are given, ``- E[f]^2`` for a pattern
    with unseen factors. One compiled call instead of some fifteen numpy calls: 19 -> 3 us per pair (ML-1M's
    default model); the rows apart rather than joined first, 8.0 -> 5.0 us with the input variances."""
    m, d = zs.shape
    n0 = x0.shape[0]
    xs = np.empty(d)
    half = 0.0
    for c in range(d):
        xs[c] = (x0[c] if c < n0 else x1[c - n0]) * inv_ls[c]
        half += xs[c] * xs[c]
    half *= 0.5
    kk = np.empty(m)
    kw = np.empty(m)
    total = 0.0
    for i in range(m):
        acc = offset[i] - half
        for c in range(d):
            acc += zs[i, c] * xs[c]
        kk[i] = math.exp(acc) if d > 0 else outputscale
        kw[i] = kk[i] * lin[i]
        total += kw[i]
    mean = total
    var = outputscale
    for i in range(m):
        row = 0.0
        for j in range(i):
            row += quad[i, j] * kk[j]
        var += kk[i] * (2.0 * row + quad[i, i] * kk[i])
    if var0.shape[0] + var1.shape[0] == d and d > 0:  # the delta method: kw^T z by rows of z (in order: 4.5 ->
        grad = np.zeros(d)  # 3.4 us a pair against columns of z)
        for i in range(m):
            for c in range(d):
                grad[c] += kw[i] * z[i, c]
        for c in range(d):
            x, v = (x0[c], var0[c]) if c < n0 else (x1[c - n0], var1[c - n0])
            g = (grad[c] - x * total) * inv_ls2[c]
            var += g * g * v
    if unseen:
        var -= mean * mean
    return mean, var


@numba.njit(cache=True, fastmath=True)
def pair_product_moments(p, p_var, q, q_var, user, item):  # pragma: no cover
    """E[p_u . q_i] and Var[p_u . q_i] of independent Gaussian rows (core/terms/bilinear.py: sum of p_var (q^2 +
    q_var) + q_var p^2; ``p_var`` and ``q_var`` without rows: point values) in one compiled call, where the numpy
    form takes some ten calls: ML-1M ``predict`` 4.4 -> 2.4 us for this term."""
    mean = 0.0
    var = 0.0
    with_p, with_q = p_var.shape[0] > 0, q_var.shape[0] > 0
    for d in range(p.shape[1]):
        a, b = p[user, d], q[item, d]
        mean += a * b
        if with_p:
            var += p_var[user, d] * (b * b + (q_var[item, d] if with_q else 0.0))
        if with_q:
            var += q_var[item, d] * a * a
    return mean, var


@numba.njit(cache=True)
def pair_neighbourhood(keys, residuals, added_keys, added_residuals, neighbours, weight, offset, weight_var,
                       offset_var, user, item, n_items):  # pragma: no cover
    """One (user, item) pair's part of the neighbourhood term (core/terms/neighbourhood.py): for each of the item's
    neighbours j (``neighbours[item]``) the user rated (a binary search of user * n_items + j in the user's
    stretch of the sorted ``keys``, then of ``added_keys``), e_uj w_j + c_j, and e_uj^2 v_wj + v_cj where
    ``weight_var`` has rows; both sums normalised by the number rated (its square root for the mean). One
    compiled call in place of the pair inputs' and ``combine``'s some thirty numpy calls."""
    count = 0.0
    mean = 0.0
    var = 0.0
    with_var = weight_var.shape[0] > 0
    # the user's stretch of each graph first (two searches), then each neighbour within it: the stretch's few
    # cache lines instead of a search of the whole graph per neighbour (ML-1M: 10^6 keys)
    base = user * n_items
    start, stop = _lower(keys, base, 0, keys.shape[0]), _lower(keys, base + n_items, 0, keys.shape[0])
    added_start = _lower(added_keys, base, 0, added_keys.shape[0])
    added_stop = _lower(added_keys, base + n_items, added_start, added_keys.shape[0])
    for k in range(neighbours.shape[1]):
        j = neighbours[item, k]
        if j < 0:
            continue
        place, e = _lower(keys, base + j, start, stop), 0.0
        if place < stop and keys[place] == base + j:
            e = residuals[place]
        else:
            place = _lower(added_keys, base + j, added_start, added_stop)
            if not (place < added_stop and added_keys[place] == base + j):
                continue
            e = added_residuals[place]
        count += 1.0
        mean += e * weight[item, k] + offset[item, k]
        if with_var:
            var += e * e * weight_var[item, k] + offset_var[item, k]
    if count > 0.0:
        mean /= math.sqrt(count)
        var /= count
    return mean, var


@numba.njit(cache=True)
def _lower(keys, query, lo, hi):  # pragma: no cover
    """The first place in ``keys[lo:hi]`` (sorted) whose key is not below ``query`` (``hi`` if none)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if keys[mid] < query:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def user_neighbourhood(keys, residuals, added_keys, added_residuals, neighbours, inverse_start, inverse_slots,
                       weight, offset, weight_var, offset_var, user, mean, var):  # pragma: no cover
    """One user's part of the neighbourhood term with every item (core/terms/neighbourhood.py), into ``mean`` and,
    where it has entries, ``var`` (one per item): :func:`pair_neighbourhood` for every item at once. The user's
    ratings (their stretch of ``keys`` and of ``added_keys``; a repeated pair once, at its first place) are spread
    over the items; then either every item's K neighbours are read there, or, where that is less work, only the
    items that have a rated item as a neighbour are visited: the items i with j as their k-th neighbour are
    ``inverse_slots[inverse_start[j]:inverse_start[j + 1]]`` = i * K + k (ML-1M: about 10,000 additions for a user
    of 165 ratings instead of 111,000 neighbours: 29 against 150 us; 2,314 ratings, 88,630
    additions: 560 against 160 us)."""
    n_items, width = mean.shape[0], weight.shape[1]
    value, rated = _user_row(keys, residuals, added_keys, added_residuals, user, n_items)
    work = 0
    for j in range(n_items):
        if rated[j]:
            work += inverse_start[j + 1] - inverse_start[j]
    with_var = var.shape[0] > 0
    count = np.zeros(n_items)
    mean[:] = 0.0
    var[:] = 0.0
    # an addition of the inverse walk costs about five neighbours read in order (ML-1M, 2 cores: 6.5 ns against
    # 1.4 ns); a literal, as numba's cache keeps a global's value of the first compilation
    if work * 5 < n_items * width:  # visit only the items that have a rated neighbour
        for j in range(n_items):
            if not rated[j]:
                continue
            e = value[j]
            for p in range(inverse_start[j], inverse_start[j + 1]):
                i = inverse_slots[p] // width
                k = inverse_slots[p] - i * width
                count[i] += 1.0
                mean[i] += e * weight[i, k] + offset[i, k]
                if with_var:
                    var[i] += e * e * weight_var[i, k] + offset_var[i, k]
    else:  # read every item's neighbours, without a branch on whether the user rated them (unpredictable)
        for i in range(n_items):
            c, m, v = 0.0, 0.0, 0.0
            for k in range(width):
                j = neighbours[i, k]
                if j >= 0:
                    r, e = 1.0 if rated[j] else 0.0, value[j]
                    c += r
                    m += e * weight[i, k] + r * offset[i, k]
                    if with_var:
                        v += e * e * weight_var[i, k] + r * offset_var[i, k]
            count[i], mean[i] = c, m
            if with_var:
                var[i] = v
    for i in range(n_items):
        if count[i] > 0.0:
            mean[i] /= math.sqrt(count[i])
            if with_var:
                var[i] /= count[i]


@numba.njit(cache=True)
def user_near(keys, residuals, added_keys, added_residuals, neighbours, user, items, near, rated):  # pragma: no cover
    """The pair inputs of one user with ``items`` (core/terms/neighbourhood.py ``_near``): for each item's
    neighbours, the user's residual of it into ``near`` and 1 into ``rated`` where the user rated it (both zero
    beforehand; an item below 0 keeps its zeros). The user's row spread over the items once, then read at the
    neighbours: the same values as the torch path, without its dozen tensor calls (ML-1M, 64 pairs of a user, medians
    over 300 users: 0.13 -> 0.04 ms)."""
    value, seen = _user_row(keys, residuals, added_keys, added_residuals, user, neighbours.shape[0])
    for r in range(items.shape[0]):
        if items[r] < 0:
            continue
        if items[r] >= neighbours.shape[0]:  # the torch path's IndexError, not a read past the table
            raise IndexError("an item index is beyond the model's items")
        for k in range(neighbours.shape[1]):
            j = neighbours[items[r], k]
            if j >= 0 and seen[j]:
                near[r, k] = value[j]
                rated[r, k] = 1.0


@numba.njit(cache=True)
def _user_row(keys, residuals, added_keys, added_residuals, user, n_items):  # pragma: no cover
    """The user's residuals spread over the items, and which the user rated, from the user's stretch of both
    graphs (a repeated pair: its first place)."""
    value, rated = np.zeros(n_items), np.zeros(n_items, dtype=np.bool_)
    _spread(keys, residuals, user, n_items, value, rated)
    _spread(added_keys, added_residuals, user, n_items, value, rated)
    return value, rated


@numba.njit(cache=True)
def _spread(keys, residuals, user, n_items, value, rated):  # pragma: no cover
    """The user's stretch of one graph into ``value`` and ``rated`` (a repeated pair: its first place)."""
    base = user * n_items
    start = _lower(keys, base, 0, keys.shape[0])
    stop = _lower(keys, base + n_items, start, keys.shape[0])
    for place in range(start, stop):
        j = keys[place] - base
        if not rated[j]:
            rated[j] = True
            value[j] = residuals[place]
