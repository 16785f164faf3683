"""The trainable MW-GP module: embeddings, mean function, paired inducing points, q(v), noise.

Notation (whitened SVGP, Hensman et al. 2015): u = L v with L L^T = K_mm, q(v) = N(m, S),
S = L_S L_S^T, p(v) = N(0, I). For a minibatch with cross-covariance K_nm (B x m)

    E[f_n]   = K_nm w,                       w = L^{-T} m
    Var[f_n] = k_nn + K_nm M K_nm^T (diag),  M = L^{-T} (S - I) L^{-1}

so every rating costs one row of two matrix products with m x m / m-vectors that are formed
once per batch (no triangular solve per rating). The ELBO built from these blocks, every term of it,
is in :mod:`.objective`.

The mean function on standardised ratings is mu_n = c + sum_f bias_f[index_f] + p_u . q_i.

Bilinear term (``mf_rank`` = k > 0): users and items also carry k-dimensional factors p_u, q_i,
separate from the GP's embeddings, with the embeddings' Gaussian prior; their inner product enters
the mean function, so that matrix factorisation is a special case of the model and the GP models
what a low-rank product misses (measured on ML-1M: see docs/history.md). With ``implicit`` the
factors get implicit feedback as the GP inputs do (below): p~_u = p_u + |N(u)|^{-1/2} sum_j y'_j
and q~_j = q_j + |N(j)|^{-1/2} sum_u x'_u, and the mean uses p~_u . q~_j.

Noise. ``noise="homoscedastic"`` (the paper): sigma_n^2 = sigma^2 for every rating.
``noise="heteroscedastic"``: every level of every factor (each user, each item, each context
level) has a log-noise offset s, log sigma_n^2 = log sigma^2 + sum_f s_f[index_f], with prior
s ~ N(0, tau_f) (tau_f learned) and variational posterior q(s) = N(mu_s, v_s) (:mod:`.objective`).

Implicit feedback (``implicit=True``, SVD++-style, Koren 2008): the GP input of user u is
a_u + |N(u)|^{-1/2} sum_{j in N(u)} y_j over the items N(u) the user rated in training, and that
of item j is b_j + |N(j)|^{-1/2} sum_{u in N(j)} x_u; the implicit factors y, x have the same
Gaussian prior as the embeddings. Users and items with the same rating pattern thus share
information even when their own embedding is poorly determined.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernels import Workspace, paired_kernel
from .linalg import inducing_terms

MIN_NOISE = 1e-4
#: initial variational variance of every log-noise offset, and initial prior variance tau
INIT_NOISE_OFFSET_VAR, INIT_NOISE_PRIOR_VAR = 0.01, 0.1


def softplus_inverse(x: Tensor) -> Tensor:
    return x + torch.log(-torch.expm1(-x))


@dataclass
class WhitenedTerms:
    """Quantities that depend only on the inducing points and q(v), formed once per batch."""

    w: Tensor  # (m,)
    M: Tensor  # (m, m)
    kl: Tensor  # KL(q(v) || p(v)), a scalar


class MWGPModule(nn.Module):
    """MW-GP parameters for F categorical factors (F = 2: users and items).

    Parameters
    ----------
    n_levels : tuple of int
        Number of distinct levels of each factor, e.g. ``(n_users, n_items)``.
    latent_dim : int
        Embedding dimension r of every factor.
    n_inducing : int
        Number m of paired inducing points.
    use_biases : bool
        Learn one bias per level of each factor.
    heteroscedastic : bool
        Learn a log-noise offset (with a variational posterior) per level of each factor.
    implicit : bool
        Add SVD++-style implicit-feedback factors to the user and item embeddings (needs
        :meth:`set_implicit_graph` before the first forward pass).
    mf_rank : int
        Rank k of the bilinear term p_u . q_i in the mean function (0: none).
    """

    def __init__(self, n_levels: tuple[int, ...], latent_dim: int, n_inducing: int,
                 use_biases: bool = True, heteroscedastic: bool = False, implicit: bool = False,
                 mf_rank: int = 0) -> None:
        super().__init__()
        self.n_levels = tuple(int(n) for n in n_levels)
        self.latent_dim = int(latent_dim)
        self.n_inducing = int(n_inducing)
        self.use_biases = bool(use_biases)
        self.heteroscedastic = bool(heteroscedastic)
        self.implicit = bool(implicit) and len(self.n_levels) >= 2
        self.mf_rank = int(mf_rank) if len(self.n_levels) >= 2 else 0
        n_factors = len(self.n_levels)
        dim = n_factors * latent_dim
        self.embeddings = nn.ParameterList(
            [nn.Parameter(torch.zeros(n, latent_dim)) for n in self.n_levels])
        # implicit_factors[0] (one row per item) feeds the users, implicit_factors[1] (per user) the items
        self.implicit_factors = nn.ParameterList(
            [nn.Parameter(torch.zeros(n, latent_dim)) for n in self.n_levels[1::-1]] if self.implicit else [])
        self.implicit_graph: tuple[Tensor, ...] | None = None
        # mf_factors[0] = P (one row per user), mf_factors[1] = Q (per item): the bilinear term p_u . q_i;
        # with implicit feedback mf_implicit[0] (one row per item) feeds the users, mf_implicit[1] the items
        self.mf_factors = nn.ParameterList(
            [nn.Parameter(torch.zeros(n, self.mf_rank)) for n in self.n_levels[:2]] if self.mf_rank else [])
        self.mf_implicit = nn.ParameterList(
            [nn.Parameter(torch.zeros(n, self.mf_rank)) for n in self.n_levels[1::-1]]
            if self.mf_rank and self.implicit else [])
        self.biases = nn.ParameterList(
            [nn.Parameter(torch.zeros(n)) for n in self.n_levels] if use_biases else [])
        # q(s_f) = N(noise_offset_mean, exp(noise_offset_logvar)); prior N(0, exp(noise_prior_logvar[f]))
        self.noise_offset_mean = nn.ParameterList(
            [nn.Parameter(torch.zeros(n)) for n in self.n_levels] if self.heteroscedastic else [])
        self.noise_offset_logvar = nn.ParameterList(
            [nn.Parameter(torch.full((n,), math.log(INIT_NOISE_OFFSET_VAR))) for n in self.n_levels]
            if self.heteroscedastic else [])
        self.noise_prior_logvar = nn.Parameter(torch.full((n_factors if self.heteroscedastic else 0,),
                                                          math.log(INIT_NOISE_PRIOR_VAR)))
        self.global_mean = nn.Parameter(torch.zeros(()))
        self.inducing = nn.Parameter(torch.zeros(n_inducing, dim))
        self.raw_lengthscale = nn.Parameter(softplus_inverse(torch.ones(dim)))
        self.raw_outputscale = nn.Parameter(softplus_inverse(torch.tensor(0.5)))
        self.raw_noise = nn.Parameter(softplus_inverse(torch.tensor(0.5)))
        self.q_mean = nn.Parameter(torch.zeros(n_inducing))
        self.q_sqrt = nn.Parameter(torch.eye(n_inducing))
        self.workspace: Workspace | None = None  # set by the trainer: reuse the B x m blocks across steps
        # set by the trainer (optim.uses_sparse_rows): gather table rows with sparse gradients
        self.sparse_rows = False
        self._rows_plan: tuple[Tensor, list[tuple[Tensor, Tensor]]] | None = None

    # -- constrained parameters ------------------------------------------------------------
    @property
    def n_factors(self) -> int:
        return len(self.n_levels)

    def lengthscale(self) -> Tensor:
        return F.softplus(self.raw_lengthscale)

    def outputscale(self) -> Tensor:
        return F.softplus(self.raw_outputscale)

    def noise(self) -> Tensor:
        return F.softplus(self.raw_noise) + MIN_NOISE

    # -- building blocks ---------------------------------------------------------------------
    def set_implicit_graph(self, index: Tensor) -> None:
        """Build the normalised who-rated-what matrices of the training tuples (for ``implicit``)."""
        if self.implicit:
            self.implicit_graph = implicit_graph(index[:, :2], self.n_levels[:2], self.inducing.dtype)

    def input_tables(self) -> tuple[list[Tensor], list[Tensor]]:
        """The GP input of every level of every factor, (n_f, r) each, and the bilinear factors the mean
        uses, [P~ (n_users, k), Q~ (n_items, k)] (empty without the term).

        With implicit feedback these are the embeddings plus N_u Y (users) and N_i X (items), and
        P + N_u Y', Q + N_i X'; both sums of a side come from one sparse product with the implicit
        tables side by side (one pass over the who-rated-what matrix instead of two: 4.0 vs 5.6 ms per
        training step on ML-1M, forward and backward).
        """
        inputs, mf = list(self.embeddings), list(self.mf_factors)
        if self.implicit:
            if self.implicit_graph is None:
                raise RuntimeError("implicit=True needs set_implicit_graph(training index) first")
            users, users_t, items, items_t = self.implicit_graph
            r = self.latent_dim
            for side, (graph, graph_t) in enumerate(((users, users_t), (items, items_t))):
                implicit = self.implicit_factors[side]
                if self.mf_implicit:
                    implicit = torch.cat([implicit, self.mf_implicit[side]], dim=1)
                sums = _SparseProduct.apply(implicit, graph, graph_t)
                inputs[side] = inputs[side] + sums[:, :r]
                if self.mf_implicit:
                    mf[side] = mf[side] + sums[:, r:]
        return inputs, mf

    def features(self, index: Tensor, tables: list[Tensor] | None = None) -> Tensor:
        """Concatenated GP inputs of index tuples, (B, F) -> (B, F * r)."""
        tables = self.input_tables()[0] if tables is None else tables
        return torch.cat([self._gather(t, index, f) for f, t in enumerate(tables)], dim=-1)

    def _gather(self, table: Tensor, index: Tensor, f: int) -> Tensor:
        """Rows ``index[:, f]`` of a level table; with ``sparse_rows`` with a row-sparse gradient, the
        distinct rows of the minibatch found once per ``index`` for every table of the factor."""
        if not self.sparse_rows:
            return gather_rows(table, index[:, f])
        if self._rows_plan is None or self._rows_plan[0] is not index:
            self._rows_plan = (index, [distinct_rows(index[:, k]) for k in range(index.shape[1])])
        rows, inverse = self._rows_plan[1][f]
        return sparse_gather(table, rows, inverse)

    def prior_mean(self, index: Tensor, mf: list[Tensor] | None = None) -> Tensor:
        """Mean function c + sum_f bias_f[index_f] + p~_u . q~_i, shape (B,) (``mf``: the bilinear
        factors of :meth:`input_tables`, if already formed)."""
        out = self.global_mean.expand(index.shape[0])
        for f, bias in enumerate(self.biases):
            out = out + self._gather(bias, index, f)
        if self.mf_rank:
            mf = self.input_tables()[1] if mf is None else mf
            p, q = (self._gather(t, index, f) for f, t in enumerate(mf))
            out = out + (p * q).sum(-1)
        return out

    def whitened_terms(self, jitter: float) -> WhitenedTerms:
        w, M, kl = inducing_terms(self.inducing, self.lengthscale(), self.outputscale(), self.q_mean, self.q_sqrt,
                                  jitter, what="K_mm (inducing-point covariance)")
        return WhitenedTerms(w=w, M=M, kl=kl)

    def latent_moments(self, index: Tensor, terms: WhitenedTerms,
                       tables: tuple[list[Tensor], list[Tensor]] | None = None) -> tuple[Tensor, Tensor]:
        """Mean (mean function included) and variance of f at index tuples under q (``tables``: those of
        :meth:`input_tables`, if already formed)."""
        inputs, mf = self.input_tables() if tables is None else tables
        knm = paired_kernel(self.features(index, inputs), self.inducing, self.lengthscale(), self.outputscale())
        mean = self.prior_mean(index, mf) + knm @ terms.w
        var = self.outputscale() + ((knm @ terms.M) * knm).sum(-1)
        return mean, var

    # -- which tables carry which Gaussian prior (objective.log_prior, optim.TrainingOptimizer) ----
    def prior_tables(self) -> list[nn.Parameter]:
        """The tables with the embedding prior N(0, 1 / embedding_reg): embeddings and implicit factors."""
        return [*self.embeddings, *self.implicit_factors]

    def mf_prior_tables(self) -> list[nn.Parameter]:
        """The tables with the bilinear-factor prior N(0, 1 / mf_reg): the factors and their implicit factors."""
        return [*self.mf_factors, *self.mf_implicit]


def implicit_graph(index: Tensor, n_levels: tuple[int, int], dtype: torch.dtype) -> tuple[Tensor, ...]:
    """CSR matrices N_u (users x items) and N_i (items x users), and their transposes.

    Every row is scaled by ``1 / sqrt(number of its entries)``, so ``N_u @ Y`` is, for every user,
    the normalised sum of the implicit item factors of the items the user rated (as in SVD++).
    Repeated (user, item) pairs count once.
    """
    n_u, n_i = n_levels
    pairs = torch.unique(index[:, 0].long() * n_i + index[:, 1].long())
    users, items = pairs // n_i, pairs % n_i

    def csr(rows: Tensor, cols: Tensor, n_rows: int, n_cols: int) -> tuple[Tensor, Tensor]:
        count = torch.bincount(rows, minlength=n_rows).to(dtype)
        vals = count.clamp_min(1.0).rsqrt()[rows]
        mat = torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (n_rows, n_cols), check_invariants=False)
        mat_t = torch.sparse_coo_tensor(torch.stack([cols, rows]), vals, (n_cols, n_rows), check_invariants=False)
        return mat.coalesce().to_sparse_csr(), mat_t.coalesce().to_sparse_csr()

    with warnings.catch_warnings():  # torch calls its sparse CSR support "beta"; it is used only as documented
        warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support is in beta.*")
        nu, nu_t = csr(users, items, n_u, n_i)
        ni, ni_t = csr(items, users, n_i, n_u)
    return nu, nu_t, ni, ni_t


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
