"""Uncertainty of the learned per-level values: a diagonal Laplace (Gauss-Newton) posterior per level.

After training, every table row of a term that asks for it (:attr:`~.terms.Table.laplace`: the GP inputs,
biases and bilinear factors; their effective rows, implicit feedback included) gets per entry the
precision

    prec_d = p + sum_{n in level} lambda_n (d E[y_n] / d theta_d)^2

(Gauss-Newton: the curvature of the expected log likelihood through the rating's predictive mean, with
lambda_n = E[1 / sigma_n^2], every other value held at its fit; p the table's prior precision). The
derivative of each rating's mean by its own level's row is taken by autograd on the rows gathered per
rating (a rating's mean depends on its own rows only), so every term is treated alike; through the GP it
uses the closed-form gradient of k(x)^T w (:meth:`~.kernels.RBFKernel.mean_gradient`), not autograd's
(one product instead of a backward pass through the kernel: 0.9 -> 0.6 s on 800K ratings). The variance
1 / prec enters a known level's predictive variance (``embedding_uncertainty``) and widens the population
an unseen level is integrated over (:meth:`~.terms.Term.population`): MAP estimates are shrunk towards the
prior mean, so their own spread understates how different a new user can be. Without a prior (p = 0) a
level with no curvature would get an infinite variance: it gets 0 (no correction) instead. A table
trained with a variational posterior of its own (:attr:`~.terms.Table.variance_of`, e.g. the bilinear
factors with ``mf_posterior="variational"``) gets that posterior's variance instead, and no Gauss-Newton pass.

(Using the input variances in the *mean* too, the kernel's expectation under them, was measured and not
kept: ML-1M RMSE 0.8572 vs 0.8574, ML-100K 0.9039 vs 0.9029.)
"""
from __future__ import annotations

import torch
from torch import Tensor

from .model import MWGPModule
from .objective import noise_moments
from .rows import Batch
from .terms import Rows

#: (term name, table name) -> variance of every row, shaped like the table
LaplaceVariances = dict[tuple[str, str], Tensor]


def variational_tables(module: MWGPModule) -> set[tuple[str, str]]:
    """(term name, table name) of every table with a variational posterior of its own (its variance is that
    posterior's, no Gauss-Newton pass's)."""
    return {(term.name, spec.variance_of) for term in module.terms for spec in term.specs.values()
            if spec.variance_of is not None}


def _gauss_newton_tables(module: MWGPModule) -> list:
    """(term, spec) of every table whose variance a Gauss-Newton pass forms (``laplace=True``, no variational
    posterior of its own)."""
    variational = variational_tables(module)
    return [(term, spec) for term in module.terms for spec in term.direct_tables
            if spec.laplace and (term.name, spec.name) not in variational]


def noise_scaled(module: MWGPModule, laplace: LaplaceVariances, factor: float) -> LaplaceVariances:
    """The Laplace variances of ``laplace`` once every rating's noise variance is multiplied by ``factor``: each
    entry's data precision (1 / v - the prior's) divided by it, exactly; variational variances unchanged."""
    out = dict(laplace)
    for term, spec in _gauss_newton_tables(module):
        key, prior = (term.name, spec.name), spec.prior_precision
        if prior:
            out[key] = 1.0 / ((1.0 / out[key] - prior).clamp_min(0.0) / factor + prior)
    return out


def laplace_variances(module: MWGPModule, index: Tensor, jitter: float, chunk_size: int = 65536,
                      training: bool = False, extra: Tensor | None = None) -> LaplaceVariances:
    """The diagonal Laplace variance of every row of every table with ``laplace=True`` (module docstring),
    from the training tuples ``index`` (``training``: in the order the module was initialised on them) and the
    tuples ``extra`` (their curvature added as that of training tuples; their pair inputs formed as new pairs')."""
    with torch.no_grad():
        terms = module.gp.whitened_terms(jitter)
        tables = {key: t.detach() for key, t in module.effective_tables().items()}
        kernel, z, w = module.gp.kernel(), module.gp.inducing.detach(), terms.w
    wanted = _gauss_newton_tables(module)
    prec = {(term.name, spec.name): torch.zeros_like(tables[(term.name, spec.name)]) for term, spec in wanted}
    sources = [(index, training)] + ([] if extra is None else [(extra, False)])
    for source, in_order in sources:
        for start in range(0, source.shape[0], chunk_size):
            idx = source[start:start + chunk_size]
            batch = Batch(idx)
            leaves = {}
            with torch.enable_grad():
                parts = module.empty_parts(batch.n)
                parts.mean, parts.log_noise_base = parts.mean.detach(), parts.log_noise_base.detach()
                for term in module.terms:
                    rows = {}
                    for spec in term.direct_tables:
                        value = tables[(term.name, spec.name)][idx[:, spec.factor]]
                        if (term.name, spec.name) in prec:
                            value = leaves[(term.name, spec.name)] = value.requires_grad_(True)
                        rows[spec.name] = Rows(value)
                    if term.reads_pairs:
                        place = torch.arange(start, start + idx.shape[0], device=idx.device) if in_order else None
                        rows.update(term.pair_rows(idx, term.fitted_extras(), place))
                    term.combine(rows, parts)
                # d E[y_n] / d rows: through the mean function by autograd, through E[f] = k(x_n)^T w by its closed form
                x = torch.cat([rows.value for rows in parts.inputs], dim=-1)
                with torch.no_grad():
                    kw = kernel.cross(x, z) * w
                    f_mean, f_grad = kw.sum(-1), kernel.mean_gradient(kw, x, z)
                mean = parts.mean
                if parts.latent_log_scale is not None:
                    scale = torch.exp(parts.latent_log_scale)
                    mean = mean + scale * f_mean
                    f_grad = f_grad * scale.detach().unsqueeze(-1)
                keys = list(leaves)
                outputs = [mean.sum()] + ([x] if x.requires_grad else [])
                grads = torch.autograd.grad(outputs, [leaves[k] for k in keys],
                                            grad_outputs=[None, f_grad][:len(outputs)], allow_unused=True)
            with torch.no_grad():
                lam = noise_moments(parts)[1].detach()
                for (term_name, table_name), g in zip(keys, grads):
                    if g is None:
                        continue
                    spec = module.term(term_name).specs[table_name]
                    weight = lam if g.dim() == 1 else lam.unsqueeze(-1)
                    prec[(term_name, table_name)].index_add_(0, idx[:, spec.factor], weight * g * g)
    out = {}
    for term, spec in wanted:
        key = (term.name, spec.name)
        p = spec.prior_precision
        out[key] = 1.0 / (prec[key] + p) if p else torch.zeros_like(prec[key])
    # a table with a variational posterior (its log-variance table, Table.variance_of): that variance instead
    for term in module.terms:
        for spec in term.specs.values():
            if spec.variance_of is not None:
                out[(term.name, spec.variance_of)] = torch.exp(term.table(spec.name).detach())
    return out
