"""The trainable MW-GP: its terms, the sparse GP, the global mean and the noise variance.

For a rating n of user u and item i (standardised units)

    y_n = mu_n + f(x_n) + eps_n,     eps_n ~ N(0, sigma_n^2),     f ~ GP(0, k)

where every per-level term (:mod:`.terms`) contributes: the GP input x_n (the concatenated inputs of the
rating's levels, :mod:`.terms.gp_input`), the mean function mu_n = c + biases + p_u . q_i
(:mod:`.terms.bias`, :mod:`.terms.bilinear`) and the log-noise offsets (:mod:`.terms.noise_offset`). The
GP (:mod:`.gp`) is a whitened SVGP with paired inducing points. :meth:`MWGPModule.rating_parts` gathers
every term's rows for a minibatch (:class:`~.rows.Batch`) and lets each term add its part; the ELBO built
from them is in :mod:`.objective`.
"""
from __future__ import annotations

from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import memory
from .gp import SparseGP, softplus_inverse
from .implicit import ImplicitFeedback
from .rows import Batch
from .terms import RatingParts, Rows, Table, Term, build_terms, noise_moments

MIN_NOISE = 1e-4


class MWGPModule(nn.Module):
    """MW-GP parameters for F categorical factors (F = 2: users and items).

    Parameters
    ----------
    n_levels : tuple of int
        Number of distinct levels of each factor, e.g. ``(n_users, n_items)``.
    terms : list of Term
        The per-level terms (:func:`~.terms.build_terms`); one of them must be the GP input (``gp_input``).
    n_inducing : int
        Number m of paired inducing points.
    """

    def __init__(self, n_levels: tuple[int, ...], terms: list[Term], n_inducing: int) -> None:
        super().__init__()
        self.n_levels = tuple(int(n) for n in n_levels)
        self.terms = nn.ModuleList(sorted(terms, key=lambda t: (t.order, t.name)))
        inputs = [t for t in self.terms if t.name == "gp_input"]
        if not inputs:
            raise ValueError("an MW-GP model needs the GP-input term ('gp_input')")
        self.gp = SparseGP(len(self.n_levels), inputs[0].options["latent_dim"], n_inducing)
        self.global_mean = nn.Parameter(torch.zeros(()))
        self.raw_noise = nn.Parameter(softplus_inverse(torch.tensor(0.5)))
        self.implicit = ImplicitFeedback()
        # set by the trainer: reuse the B x m blocks across steps (kernels.Workspace); row-sparse gradients
        self.workspace = None
        self.sparse_rows = False
        # row-sparse training: the packed tables and, for each, (feeding tables?, factor, its columns' tables)
        self.packs = nn.ParameterList()
        self.pack_layout: list[tuple[bool, int, list[tuple[str, str, int, int]]]] = []

    @classmethod
    def from_config(cls, config: Any, n_levels: tuple[int, ...]) -> "MWGPModule":
        """The model that ``config`` (an ``MWGPConfig``) describes, for these levels (float32, zeros: see
        :func:`~.initialization.initialise`)."""
        return cls(n_levels, build_terms(config, tuple(n_levels)), config.n_inducing)

    # -- properties --------------------------------------------------------------------------------------
    @property
    def n_factors(self) -> int:
        return len(self.n_levels)

    @property
    def latent_dim(self) -> int:
        return self.gp.input_width

    @property
    def dtype(self) -> torch.dtype:
        return self.gp.inducing.dtype

    @property
    def device(self) -> torch.device:
        return self.gp.inducing.device

    def term(self, name: str) -> Term | None:
        return next((t for t in self.terms if t.name == name), None)

    def noise_variance(self) -> Tensor:
        """sigma^2: the noise variance (times exp of the offsets, with per-level noise)."""
        return F.softplus(self.raw_noise) + MIN_NOISE

    def tables(self) -> Iterator[tuple[Term, Table, nn.Parameter]]:
        """Every per-level table of every term, with its spec and parameter."""
        for term in self.terms:
            for spec in term.specs.values():
                yield term, spec, term.table(spec.name)

    # -- implicit feedback ---------------------------------------------------------------------------------
    @property
    def supports_sparse_rows(self) -> bool:
        """Whether every term can be trained row-sparsely: none has a penalty over every row that it cannot add
        lazily (:meth:`~.terms.Term.row_update`)."""
        return all(type(term).penalty is Term.penalty or type(term).row_update is not Term.row_update
                   for term in self.terms)

    @property
    def implicit_feedback(self) -> bool:
        return any(spec.feeds is not None for _, spec, _ in self.tables())

    def set_implicit_graph(self, index: Tensor) -> None:
        """Build the normalised who-rated-what matrices of the training tuples (for implicit feedback)."""
        if self.implicit_feedback:
            self.implicit.set_graph(index, self.n_levels[:2], self.dtype)

    def _feeders(self) -> list[tuple[Term, Table, nn.Parameter]]:
        return [(term, spec, table) for term, spec, table in self.tables() if spec.feeds is not None]

    def _sides(self) -> list[tuple[int, Tensor, list[tuple[str, str, int, int]]]]:
        """The feeding tables as implicit feedback reads them: (the factor fed, the table, (term, fed table, first
        column, width) of each table in its columns); a packed parameter stands for the tables it packs."""
        packed = {(a, b) for _, _, layout in self.packed_feeders() for a, b, _, _ in layout}
        out = [(side, pack, [(a, self.term(a).specs[b].feeds, start, width) for a, b, start, width in layout])
               for side, pack, layout in self.packed_feeders()]
        return out + [(term.specs[spec.feeds].factor, table, [(term.name, spec.feeds, 0, spec.width)])
                      for term, spec, table in self._feeders() if (term.name, spec.name) not in packed]

    def _implicit_sums(self, batch: Batch | None = None) -> dict[tuple[str, str], Tensor]:
        """For every fed table (term name, table name), the implicit sums of its feeding tables: of every level
        (dense), or with a ``batch`` on the row-sparse path of that batch's levels only (:mod:`.implicit`)."""
        sides = self._sides()
        if not sides:
            return {}
        pairs = [(side, table) for side, table, _ in sides]
        if batch is None:
            sums = self.implicit.sums(pairs)
        else:
            sums = self.implicit.batch_sums(pairs, {side: batch.levels(side)[0] for side in (0, 1)})
        return {(a, b): total[:, start:start + width] if len(layout) > 1 else total
                for (_, _, layout), total in zip(sides, sums) for a, b, start, width in layout}

    def refresh_implicit(self, upcoming: Tensor | None = None) -> None:
        """Row-sparse path: the implicit sums of every level (or at least of the levels in ``upcoming``, the index
        tuples that the steps up to the next update read) from the feeding tables as they are (:mod:`.implicit`)."""
        self.implicit.refresh([(side, table) for side, table, _ in self._sides()], upcoming)

    def flush_implicit(self, reduce=None) -> bool:
        """Row-sparse path: the feeding tables' ``.grad`` from the steps since their last update (:mod:`.implicit`)."""
        return self.implicit.flush([(side, table) for side, table, _ in self._sides()], reduce)

    def effective_tables(self) -> dict[tuple[str, str], Tensor]:
        """Every table that :meth:`~.terms.Term.combine` reads, with its implicit sums added (full size)."""
        sums = self._implicit_sums()
        return {(term.name, spec.name): table + sums[(term.name, spec.name)] if (term.name, spec.name) in sums
                else table for term, spec, table in self.tables() if spec.feeds is None}

    # -- packed tables (row-sparse training) -------------------------------------------------------------
    @torch.no_grad()
    def pack_tables(self) -> None:
        """Row-sparse training: put side by side, in one parameter with a row per level, every factor's tables that
        train by lazy Adam with a Gaussian prior (no term rule, :meth:`~.terms.Term.row_update`; not variances),
        and the feeding tables of each factor fed by implicit feedback. A step then reaches one row per level
        of one table, of its Adam state, of the kept implicit sums and of their gradient, instead of one of each
        per table, and an update of the implicit feedback passes over the graph once per side (measured at 1M
        users x 100K items, docs/history.md). The tables become views of the packed parameter's columns (their
        values stay current for everything that reads them), without a gradient of their own, until
        :meth:`unpack_tables`. The packed tables and every other large table of the run sit in huge pages where
        the system has them (:mod:`.memory`)."""
        self.unpack_tables()
        groups = [(False, f, [(term, spec, table) for term, spec, table in self.tables()
                              if spec.factor == f and spec.feeds is None and spec.variance_of is None
                              and type(term).row_update is Term.row_update]) for f in range(self.n_factors)]
        groups += [(True, side, [(term, spec, table) for term, spec, table in self._feeders()
                                 if term.specs[spec.feeds].factor == side]) for side in (0, 1)]
        grouped = {id(t) for _, _, mine in groups for _, _, t in mine}
        groups += [(False, spec.factor, [(term, spec, table)]) for term, spec, table in self.tables()
                   if id(table) not in grouped and spec.variance_of is None]  # e.g. the noise offsets
        for feeds, factor, mine in groups:
            if len(mine) < 2:
                for _, _, table in mine:  # a table alone: into huge pages only
                    memory.rehome(table)
                continue
            parts = [t.detach().reshape(t.shape[0], -1) for _, _, t in mine]
            pack = nn.Parameter(memory.empty((parts[0].shape[0], sum(t.shape[1] for t in parts)), parts[0].dtype,
                                             parts[0].device))  # in huge pages (memory.py)
            torch.cat(parts, dim=1, out=pack.data)
            layout, start = [], 0
            for term, spec, table in mine:
                width = max(spec.width, 1)
                table.data = pack.data[:, start:start + width] if spec.width else pack.data[:, start]
                table.requires_grad_(False)
                layout.append((term.name, spec.name, start, spec.width))
                start += width
            self.packs.append(pack)
            self.pack_layout.append((feeds, factor, layout))

    @torch.no_grad()
    def unpack_tables(self) -> None:
        """Give every packed table its own storage again (after row-sparse training)."""
        for _, _, layout in self.pack_layout:
            for term_name, spec_name, _, _ in layout:
                table = self.term(term_name).table(spec_name)
                table.data = table.data.clone()
                table.requires_grad_(True)
        self.packs, self.pack_layout = nn.ParameterList(), []

    def packed_tables(self) -> dict[int, tuple[nn.Parameter, list[tuple[str, str, int, int]]]]:
        """For each factor whose directly read tables are packed, its packed parameter and (term, table, first
        column, width: 0 for a 1-d table) of its tables."""
        return {f: (pack, layout) for pack, (feeds, f, layout) in zip(self.packs, self.pack_layout) if not feeds}

    def packed_feeders(self) -> list[tuple[int, nn.Parameter, list[tuple[str, str, int, int]]]]:
        """(the factor fed, the packed parameter, its tables as in :meth:`packed_tables`) of each factor whose
        feeding tables are packed."""
        return [(side, pack, layout) for pack, (feeds, side, layout) in zip(self.packs, self.pack_layout) if feeds]

    # -- a minibatch's parts -----------------------------------------------------------------------------
    def rating_parts(self, batch: Batch, tables: dict[tuple[str, str], Tensor] | None = None,
                     noise_only: bool = False) -> RatingParts:
        """Every term's part of the predictive of ``batch``'s ratings, from the trained parameters (``tables``:
        those of :meth:`effective_tables`, if already formed); ``noise_only``: the terms that may add to the noise
        only (not :attr:`~.terms.Term.mean_only`)."""
        direct = [(term, spec, table) for term, spec, table in self.tables() if spec.feeds is None]
        values: dict[tuple[str, str], Tensor] = {}
        if batch.sparse:  # every table of a factor read at once; with implicit feedback, the minibatch's sums only
            sums = self._implicit_sums(batch) if self.implicit.accumulating else {}
            packed = self.packed_tables()
            for f in range(self.n_factors):
                pack, layout = packed.get(f, (None, []))
                inside = {(a, b) for a, b, _, _ in layout}
                mine = [(term.name, spec.name, table) for term, spec, table in direct
                        if spec.factor == f and (term.name, spec.name) not in inside]
                extra = [sums.get((a, b)) for a, b, _ in mine]
                if pack is not None:  # the packed table first, its tables' sums in their columns
                    mine.insert(0, (None, None, pack))
                    extra.insert(0, _packed_sums(layout, sums, batch.levels(f)[0].shape[0], pack))
                rows = batch.gather_many([t for _, _, t in mine], f, extra)
                if pack is not None:
                    joined = rows.pop(0)
                    mine.pop(0)
                    values.update({(a, b): joined[:, start:start + width] if width else joined[:, start]
                                   for a, b, start, width in layout})
                values.update({(a, b): r for (a, b, _), r in zip(mine, rows)})
        else:
            tables = self.effective_tables() if tables is None else tables
            values = {(term.name, spec.name): batch.gather(tables[(term.name, spec.name)], spec.factor)
                      for term, spec, _ in direct}
        parts = self.empty_parts(batch.n)
        for term in self.terms:
            if noise_only and term.mean_only:
                continue
            rows = {spec.name: Rows(values[(term.name, spec.name)]) for spec in term.trained_tables}
            if term.reads_pairs:
                rows.update(term.pair_rows(batch.index, term.fitted_extras(), batch.rows))
            term.combine(rows, parts)
        return parts

    @torch.no_grad()
    def scale_noise(self, factor: float, shrink: float = 1.0) -> None:
        """Multiply sigma^2 by ``factor`` and the log-noise offsets by ``shrink``
        (:meth:`~.terms.Term.shrink_log_noise`). The variance tables stay as trained: early stopping chose both beside
        the latent variances that training left (:func:`~.validation.noise_calibration`), and setting them again
        under the scaled noise shrank them as well (generated 20-100 ratings: c = 0.33 shrank the test ratings'
        latent variance 0.011 -> 0.004, and 90 % coverage fell to 0.84)."""
        target = (self.noise_variance() * factor - MIN_NOISE).clamp_min(1e-3 * MIN_NOISE)
        self.raw_noise.copy_(softplus_inverse(target))
        if shrink != 1.0:
            for term in self.terms:
                term.shrink_log_noise(shrink)

    @property
    def variational(self) -> bool:
        """Whether a term holds a variational posterior: variance tables (:attr:`~.terms.Table.variance_of`)."""
        return any(spec.variance_of is not None for _, spec, _ in self.tables())

    @torch.no_grad()
    def update_variances(self, index: Tensor, chunk_size: int = 65536) -> None:
        """Set every variance table (:attr:`~.terms.Table.variance_of`) to its closed-form optimum given the
        rest, from the training tuples ``index`` (chunked); nothing to do without such tables."""
        if not self.variational:
            return
        tables = self.effective_tables()
        statistics: dict[str, dict[str, Tensor]] = {term.name: {} for term in self.terms}
        for start in range(0, index.shape[0], chunk_size):
            idx = index[start:start + chunk_size]
            weights = noise_moments(self.rating_parts(Batch(idx), tables, noise_only=True))[1]
            for term in self.terms:
                mine = {spec.name: tables[(term.name, spec.name)] for spec in term.trained_tables}
                for name, value in term.variance_statistics(mine, idx, weights).items():
                    total = statistics[term.name]
                    total[name] = value if name not in total else total[name] + value
        for term in self.terms:
            term.update_variances(statistics[term.name])

    def empty_parts(self, n: int) -> RatingParts:
        return RatingParts(mean=self.global_mean.expand(n), log_noise_base=torch.log(self.noise_variance()),
                           inputs=[None] * self.n_factors)

    def gp_inputs(self, index: Tensor) -> Tensor:
        """The GP inputs of index tuples, (n, F r) (no gradient path needed: initialisation)."""
        parts = self.rating_parts(Batch(index))
        return torch.cat([rows.value for rows in parts.inputs], dim=-1)

    def penalty(self) -> Tensor | None:
        """The terms' log-density terms beyond the tables' Gaussian priors (e.g. the noise offsets' -KL); None
        when no term has one."""
        out = None
        for term in self.terms:
            value = term.penalty()
            if value is not None:
                out = value if out is None else out + value
        return out


def _packed_sums(layout: list[tuple[str, str, int, int]], sums: dict[tuple[str, str], Tensor], n_rows: int,
                 pack: Tensor) -> Tensor | None:
    """The implicit sums of a packed table's columns (zeros for the tables without), or None if none has any."""
    if not any((a, b) in sums for a, b, _, _ in layout):
        return None
    return torch.cat([sums[(a, b)].reshape(n_rows, max(width, 1)) if (a, b) in sums
                      else pack.new_zeros((n_rows, max(width, 1))) for a, b, _, width in layout], dim=1)
