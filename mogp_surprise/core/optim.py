"""The optimiser of :func:`~.trainer.fit_mwgp`: Adam, with the Gaussian priors of the per-level tables
applied as weight decay, dense or row-sparse.

**Dense** (small data and catalogues): one fused Adam over every parameter. The prior N(0, 1 / p) of a
term table (embeddings, implicit and bilinear factors, biases) adds ``p / N * theta`` to the gradient of
-ELBO / N: exactly Adam's coupled ``weight_decay = p / N``, applied inside the optimiser's one pass over
the tables.

**Row-sparse** (:func:`uses_sparse_rows`: tables with many more rows than a minibatch touches, or, with
implicit feedback, many more ratings than a minibatch holds): every term table a minibatch reads by its
own levels gets a sparse gradient (only the minibatch's rows, :func:`~.rows.sparse_gather`) and a lazy
Adam, :class:`RowAdam` (``torch.optim.SparseAdam``'s update, measured faster), which updates only those
rows; the dense parameters keep fused Adam. A step then costs nothing for the rows it does not touch.
Their prior is kept exact by lazy decay: a row that was not touched for k steps has not moved, so the
prior gradients it missed add up to exactly k * p / N * theta, which it receives with its next gradient
(:class:`RowAdam` keeps, per row, the last step that moved it). A term whose penalty touches every row
(the noise offsets' KL) adds it lazily the same way (:meth:`~.terms.Term.row_update`). A factor's tables
with a Gaussian prior train as one packed table (:meth:`~.model.MWGPModule.pack_tables`: one row and one
Adam state per level; the decay is then one precision per column). The implicit-feedback tables are
updated a fixed number of times per epoch with the gradient accumulated since (:mod:`.implicit`), by an
Adam of their own (:meth:`TrainingOptimizer.step_implicit`). Where numba
is installed, the row updates run compiled on CPU (:mod:`.row_kernel`: the touched rows reached first,
then one pass over each, instead of a gather, ~10 element-wise operations and a scatter); otherwise, and
on a GPU, by torch operations. Both are tested against a written-out reference.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import math

import torch

from . import memory
from .config import MWGPConfig

logger = logging.getLogger(__name__)

#: row-sparse updates when the per-level tables have more than this many rows per minibatch rating
#: (with numba's kernel on CPU: the second number); measured (paper's model, 1M ratings, batch 8192,
#: 2 threads), ms per step dense / row-sparse by torch operations / row-sparse by the kernel: 11K rows
#: 6.46 / 7.77 / 7.16, 110K 8.57 / 9.05 / 7.76, 330K 13.11 / 9.65 / 8.25 (equal near 137K and 57K rows)
SPARSE_ROWS_PER_BATCH, SPARSE_ROWS_PER_BATCH_KERNEL = 16.0, 6.0
#: with implicit feedback, row-sparse also above this many ratings per minibatch rating: the dense path
#: multiplies the whole who-rated-what graph every step, a cost that grows with the data
SPARSE_RATINGS_PER_BATCH = 125.0
#: row-sparse path with implicit feedback (:mod:`.implicit`): updates of the implicit factors per epoch (each with
#: the gradient of the steps since the last); measured on ML-1M forced onto this path (80/20, seed 0): RMSE
#: 0.8303 dense, 0.8306 updated every step, 0.8313 at 32 updates per epoch (3.4 steps apart), 0.8338 at 8
IMPLICIT_UPDATES = 32


def implicit_update_interval(steps_per_epoch: int) -> int:
    """Steps between two updates of the implicit-feedback tables on the row-sparse path (IMPLICIT_UPDATES per
    epoch, the last at the epoch's end)."""
    return max(1, math.ceil(steps_per_epoch / IMPLICIT_UPDATES))


def uses_sparse_rows(config: MWGPConfig, n_levels: tuple[int, ...], batch: int, n_ratings: int = 0) -> bool:
    """Whether training updates the per-level tables row-sparsely (module docstring), for ``n_ratings`` training
    ratings in minibatches of ``batch``."""
    rows = sum(n_levels)
    if config.implicit and n_ratings > SPARSE_RATINGS_PER_BATCH * batch:
        return True
    if rows > SPARSE_ROWS_PER_BATCH * batch:
        return True
    # numba is imported only for a catalogue this large
    return (rows > SPARSE_ROWS_PER_BATCH_KERNEL * batch and config.torch_device().type == "cpu"
            and row_kernel() is not None)


def schedule(kind: str, total_steps: int):
    """Learning-rate factor per step: constant, or cosine from 1 down to 0.05 over ``total_steps``."""
    if kind == "constant":
        return lambda step: 1.0
    floor = 0.05

    def cosine(step: int) -> float:
        progress = min(step / max(total_steps, 1), 1.0)
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return cosine


def compiled(*names: str, module: str = ".row_kernel"):
    """The numba kernels ``names`` of ``module`` (:mod:`.row_kernel`, or :mod:`.serving_kernel`; one, or a tuple of
    several), or ``None`` where the row kernel is not available (:func:`row_kernel`)."""
    if row_kernel() is None:
        return None
    module = importlib.import_module(module, __package__)
    found = tuple(getattr(module, name) for name in names)
    return found[0] if len(names) == 1 else found


def offset_kl_kernel():
    """:func:`~.row_kernel.row_adam_offset_kl`, or ``None`` (:func:`compiled`)."""
    return compiled("row_adam_offset_kl")


def csr_product_kernels():
    """:func:`~.row_kernel.csr_product` and :func:`~.row_kernel.csr_transposed_product`, or ``None``."""
    return compiled("csr_product", "csr_transposed_product")


def add_rows_kernel():
    """:func:`~.row_kernel.add_into_rows`, or ``None`` (:func:`compiled`)."""
    return compiled("add_into_rows")


def sparse_neighbours_kernel():
    """:func:`~.row_kernel.sparse_neighbours`, or ``None`` (:func:`compiled`)."""
    return compiled("sparse_neighbours")


_SERVE_COMPILED = True


@contextlib.contextmanager
def compiled_serving(enabled: bool):
    """Within the block, whether serving uses numba's kernels (:mod:`.serving_kernel`) where numba is installed
    (outside: yes).

    They save a process that serves many requests milliseconds each, but the first request pays numba's start-up
    (its import and its CPU target: about a second). A process that serves one request and exits (the command
    line) is quicker without them; the answers are the same. A posterior reads this when its serving path is
    built: models used after the block should be loaded after it."""
    global _SERVE_COMPILED
    before, _SERVE_COMPILED = _SERVE_COMPILED, bool(enabled)
    try:
        yield
    finally:
        _SERVE_COMPILED = before


def serving_kernel(name: str):
    """The numba kernel ``name`` of :mod:`.serving_kernel` (one pair's or one user's predictive), or ``None``
    (:func:`compiled`, or not wanted: :func:`compiled_serving`)."""
    return _serving_kernel(name) if _SERVE_COMPILED else None


@functools.cache
def _serving_kernel(name: str):
    # looked up once per name: serving one pair counts a lookup's microseconds
    return compiled(name, module=".serving_kernel")


@functools.cache
def row_kernel():
    """:func:`~.row_kernel.row_adam` (numba), or ``None`` where numba is not installed or cannot compile it."""
    try:
        from .row_kernel import row_adam
    except ImportError:
        return None
    except RuntimeError as exc:  # e.g. numba finds no writable place for its compiled-code cache
        logger.warning("row-sparse updates use torch operations: numba's kernel is not available (%s)", exc)
        return None
    return row_adam


class RowAdam(torch.optim.Optimizer):
    """Lazy Adam on row-sparse gradients, with lazy prior decay: only the rows in the gradient move.

    The update is ``torch.optim.SparseAdam``'s (its placement of epsilon). Each parameter may carry
    a prior precision / N (``decay``; a tuple, one per column, for a table that packs several): a row
    that last moved k steps ago gets k * decay * theta added to its gradient. Written here because
    SparseAdam's dense-plus-sparse additions cost 8.7 ms per step of 8192 ratings on this project's
    2-core machine, against about 2 ms for the index operations below (with the rows gathered once
    per step).
    """

    def __init__(self, params, lr: float, decay: list[float], betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, rules: list | None = None) -> None:
        params = list(params)
        super().__init__([{"params": [p], "decay": d} for p, d in zip(params, decay)],
                         {"lr": lr, "betas": betas, "eps": eps})
        # a term's own lazy update of a table, by parameter (kept out of the param groups: not state to save)
        self.rules = {id(p): r for p, r in zip(params, rules or []) if r is not None}

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float64)
                    # per row [Adam's m (width w), Adam's v (w), the last step that moved the row]: one
                    # gather and one scatter per step instead of five of each (random access dominates
                    # with a large table)
                    state["rows"] = memory.zeros((p.shape[0], 2 * p[0].numel() + 1), p.dtype, p.device)
                state["step"] += 1
                t = int(state["step"])
                # the gradient of one gather per step: distinct rows, coalesced but not flagged as such
                # after autograd's accumulation (re-flagged here instead of sorting again)
                rows, g = p.grad._indices()[0], p.grad._values().reshape(-1, p[0].numel())
                step_size = group["lr"] * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
                rule = self.rules.get(id(p))
                if rule is not None:  # a term's own lazy update (e.g. the noise offsets' KL)
                    rule.update(p, state["rows"], rows, g, t, (beta1, beta2), group["eps"], step_size,
                                offset_kl_kernel() if p.device.type == "cpu" else None)
                    continue
                kernel = row_kernel() if p.device.type == "cpu" else None
                if kernel is not None:  # compiled (module docstring of row_kernel)
                    kernel(p.detach().view(p.shape[0], -1).numpy(), state["rows"].numpy(), rows.numpy(),
                           g.contiguous().numpy(), t, group["decay"], beta1, beta2, group["eps"], step_size,
                           torch.get_num_threads())
                    continue
                values = p.index_select(0, rows).reshape(g.shape)
                packed = state["rows"].index_select(0, rows)
                w = g.shape[1]
                m, v, last = packed[:, :w], packed[:, w:2 * w], packed[:, 2 * w]
                decay = group["decay"]
                if any(decay) if isinstance(decay, tuple) else decay:  # the prior's gradient of this step and
                    # of the steps the row missed (a packed table: one precision per column)
                    decay = torch.tensor(decay, dtype=values.dtype, device=values.device) \
                        if isinstance(decay, tuple) else decay
                    g = g + decay * (t - last).unsqueeze(1) * values
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                last.fill_(t)
                state["rows"].index_copy_(0, rows, packed)
                values.sub_(m / (v.sqrt().add_(group["eps"])), alpha=step_size)
                p.index_copy_(0, rows, values.reshape(-1, *p.shape[1:]))
        return None


class TrainingOptimizer:
    """Adam (dense) or Adam + :class:`RowAdam` with lazy prior decay (row-sparse), with the learning-rate
    schedule of ``config`` over ``total_steps`` steps.

    Every term table with a Gaussian prior N(0, 1 / p) gets Adam's weight decay p / N; with ``sparse``
    the tables that a minibatch reads by its own levels (all but the implicit-feedback tables) are
    updated by :class:`RowAdam`, the rest by fused Adam.
    """

    def __init__(self, module, config: MWGPConfig, n_data: int, total_steps: int, sparse: bool,
                 implicit_steps: int = 0) -> None:
        decay = {id(table): (spec.prior_precision or 0.0) / n_data for _, spec, table in module.tables()}
        # row-sparse: every term table read by the minibatch's levels (a packed table for the tables packed,
        # MWGPModule.pack_tables: one precision per column); the implicit-feedback tables have an optimizer of
        # their own, stepped when their accumulated gradient is applied (core/implicit.py)
        packs = list(module.packed_tables().values()) if sparse else []
        for pack, layout in packs + [(pack, layout) for _, pack, layout in module.packed_feeders()]:
            decay[id(pack)] = tuple(decay[id(module.term(a).table(b))] for a, b, _, w in layout
                                    for _ in range(max(w, 1)))
        sparse_tables = [(term, spec, table) for term, spec, table in module.tables()
                         if spec.feeds is None and spec.variance_of is None and table.requires_grad] if sparse else []
        feeders = [pack for _, pack, _ in module.packed_feeders()] + [
            table for _, spec, table in module.tables() if spec.feeds is not None and table.requires_grad] \
            if sparse else []
        self.sparse_params = [pack for pack, _ in packs] + [table for _, _, table in sparse_tables]
        own = {id(p) for p in self.sparse_params} | {id(p) for p in feeders}
        groups: dict[float, list] = {}
        for p in module.parameters():
            if id(p) not in own and p.requires_grad:
                groups.setdefault(decay.get(id(p), 0.0), []).append(p)
        param_groups = [{"params": ps, "weight_decay": d} for d, ps in groups.items()]
        self.optimizers = [_adam(param_groups, config.lr)]
        self.rules = [None] * len(packs) + [term.row_update(spec, n_data, total_steps)
                                            for term, spec, _ in sparse_tables]
        if self.sparse_params:  # first: a term's lazy prior reads the dense parameters as the forward pass saw them
            self.optimizers.insert(0, RowAdam(self.sparse_params, config.lr, [decay[id(p)] for p in self.sparse_params],
                                              rules=self.rules))
        lam = schedule(config.lr_schedule, total_steps)
        self.schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lam) for o in self.optimizers]
        self.implicit, self.implicit_decay = None, []
        if feeders:
            # their priors as Adam's coupled weight decay, which takes one precision per parameter; a packed
            # table has one per column: added to its accumulated gradient in step_implicit
            self.implicit_decay = [(p, torch.tensor(decay[id(p)], dtype=p.dtype, device=p.device))
                                   for p in feeders if isinstance(decay[id(p)], tuple)]
            implicit_groups: dict[float, list] = {}
            for p in feeders:
                implicit_groups.setdefault(0.0 if isinstance(decay[id(p)], tuple) else decay[id(p)], []).append(p)
            self.implicit = _adam([{"params": ps, "weight_decay": d} for d, ps in implicit_groups.items()],
                                  config.lr)
            self.implicit_scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.implicit, schedule(config.lr_schedule, implicit_steps))

    def step_implicit(self) -> None:
        """Apply the implicit-feedback tables' accumulated gradient (row-sparse path), with their priors'."""
        with torch.no_grad():
            for p, d in self.implicit_decay:
                if p.grad is not None:
                    p.grad.addcmul_(p, d)  # in place: p * d would page in a table-sized temporary (35 vs 5 ms)
        self.implicit.step()
        self.implicit_scheduler.step()
        self.implicit.zero_grad(set_to_none=True)

    def zero_grad(self) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=True)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()
        for s in self.schedulers:
            s.step()

    def state_dict(self) -> dict:
        out = {"optimizers": [o.state_dict() for o in self.optimizers],
               "schedulers": [s.state_dict() for s in self.schedulers],
               "rules": [None if r is None else r.state_dict() for r in self.rules]}
        if self.implicit is not None:
            out["implicit"] = [self.implicit.state_dict(), self.implicit_scheduler.state_dict()]
        return out

    def load_state_dict(self, state: dict) -> None:
        for o, s in zip(self.optimizers, state["optimizers"]):
            o.load_state_dict(s)
        for sch, s in zip(self.schedulers, state["schedulers"]):
            sch.load_state_dict(s)
        for rule, s in zip(self.rules, state.get("rules", [])):
            if rule is not None:
                rule.load_state_dict(s)
        if self.implicit is not None:
            self.implicit.load_state_dict(state["implicit"][0])
            self.implicit_scheduler.load_state_dict(state["implicit"][1])


def _adam(groups: list[dict], lr: float) -> torch.optim.Adam:
    """Fused Adam where this device and torch have it."""
    try:
        return torch.optim.Adam(groups, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):  # fused Adam not available for this device/torch
        return torch.optim.Adam(groups, lr=lr)
