"""The component interface of MW-GP: one per-level model term, defined in one place.

A *term* is a part of the model with values per level of a factor (each user, item or context
level): the GP input of a level (its embedding, with implicit feedback), a bias, a bilinear factor,
a log-noise offset. A term declares its **tables** (:class:`Table`: which factor indexes the rows,
their width, their Gaussian prior, whether they get a Laplace variance, whether implicit feedback
adds into them) and says, in :meth:`Term.combine`, how the rows of its tables gathered for a rating
enter that rating's predictive (:class:`RatingParts`: the mean function and its variance, the GP
input of each factor, the log-noise, a scale of the latent function).

Everything else is done for every term alike, from its tables: training (the priors as weight decay,
row-sparse updates of large tables, the data-parallel exchange of the rows a step touched), the
Laplace variances (:mod:`..laplace`, one Gauss-Newton pass for every table), the population an unseen
level is integrated over (:meth:`Term.population`), fold-in of a new user (the user's row of every
user table is the fold-in parameter vector, :mod:`..foldin`), saving and loading (the fitted tables,
:mod:`..state`). The same :meth:`Term.combine` serves training, prediction and fold-in: they differ
only in where the rows come from (the trained parameters, the fitted tables or the population, the
folded user's parameters).

A term defined outside the package takes part once registered (:func:`register_term`) and named in
``MWGPConfig(extra_terms=...)``; ``docs/architecture.md`` walks through an example.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

#: how fold-in's prior over a new user's parameters is chosen: the learned users' population, or the model's own
PRIORS = ("population", "model")


@dataclass(frozen=True)
class Table:
    """One table of per-level values of a term.

    Attributes
    ----------
    name : str
        Unique within its term, e.g. ``"embedding_0"``; a parameter and a saved field of that name.
    factor : int
        The factor whose levels index the rows (0: users, 1: items, 2...: context factors).
    width : int
        Entries per row; 0 for a 1-d table (one value per level).
    prior_precision : float or None
        Gaussian prior N(0, 1 / prior_precision) on every entry (MAP; applied as weight decay, lazily on
        the row-sparse path). None: no Gaussian prior (a term's :meth:`Term.penalty` may add another).
    laplace : bool
        The effective rows get a diagonal Laplace (Gauss-Newton) variance after training; it enters a known
        level's predictive variance and widens the population of unseen levels.
    feeds : str or None
        Implicit feedback: this table's rows are indexed by the levels of ``factor``, and the normalised sum
        of the rows of the levels a level of the *other* factor rated adds into that level's row of the
        table named ``feeds`` (SVD++-style). Such a table is trained but not used directly by
        :meth:`Term.combine`.
    population_floor : float
        Smallest variance of the population of its rows (cold start).
    variance_of : str or None
        A variational posterior: this table holds the log-variance of a mean-field Gaussian q over every
        entry of the table named ``variance_of`` (its mean), of the same shape. It is not trained by
        gradient: the term sets it to its optimum given everything else, in closed form, before training
        and after every epoch (:meth:`Term.variance_statistics`, :meth:`Term.update_variances`); training
        reads it (its rows go to :meth:`Term.combine` as ``rows[name]``). After training ``exp`` of it is
        that table's variance in place of a Laplace one (:mod:`..laplace`); it is not saved on its own.
    """

    name: str
    factor: int
    width: int
    prior_precision: float | None = None
    laplace: bool = False
    feeds: str | None = None
    population_floor: float = 0.0
    variance_of: str | None = None

    def shape(self, n_levels: tuple[int, ...]) -> tuple[int, ...]:
        rows = n_levels[self.factor]
        return (rows, self.width) if self.width else (rows,)


@dataclass
class Rows:
    """A term table's rows for n ratings: their values, their variance (None: point values) and whether they
    stand for a level unseen in training (then ``value`` and ``var`` are the population's, for every row)."""

    value: Tensor
    var: Tensor | None = None
    unseen: bool = False


@dataclass
class RatingParts:
    """What the terms say about n ratings, in standardised units; :mod:`..predictive` turns it into the
    predictive mean, latent variance and noise variance.

    ``mean`` starts at the global mean and every term adds to it (:meth:`add_mean`); ``mean_var`` is the
    variance of the mean function (None while every part is a point value); ``inputs[f]`` is the GP input
    of factor f; ``log_noise`` is E[log sigma_n^2] (None: one noise variance, exp(``log_noise_base``)),
    ``log_noise_var`` its variance; ``latent_log_scale`` the log of a factor on the latent function f
    (None: 1).
    """

    mean: Tensor
    log_noise_base: Tensor
    inputs: list[Rows | None]
    mean_var: Tensor | None = None
    log_noise: Tensor | None = None
    log_noise_var: Tensor | None = None
    latent_log_scale: Tensor | None = None

    @property
    def n(self) -> int:
        return int(self.mean.shape[0])

    @property
    def xp(self) -> Any:
        """The namespace of the parts' arrays: ``torch`` or ``numpy`` (both have ``exp``, ``log``, ...)."""
        return torch if isinstance(self.mean, Tensor) else np

    def add_mean(self, value: Tensor, var: Tensor | None = None) -> None:
        self.mean = self.mean + value
        if var is not None:
            self.mean_var = var if self.mean_var is None else self.mean_var + var

    def add_log_noise(self, mean: Tensor, var: Tensor) -> None:
        """Add a log-noise offset with a Gaussian distribution N(mean, var) (per rating)."""
        if self.log_noise is None:
            self.log_noise, self.log_noise_var = self.log_noise_base + mean, var
        else:
            self.log_noise, self.log_noise_var = self.log_noise + mean, self.log_noise_var + var

    def set_input(self, factor: int, rows: Rows) -> None:
        self.inputs[factor] = rows

    def add_latent_log_scale(self, value: Tensor) -> None:
        self.latent_log_scale = value if self.latent_log_scale is None else self.latent_log_scale + value


def noise_moments(parts: RatingParts) -> tuple[Tensor, Tensor]:
    """E_q[log sigma_n^2] and lambda_n = E_q[1 / sigma_n^2] of the ratings of ``parts``, (n,) each."""
    if parts.log_noise is None:
        base = parts.log_noise_base
        return base.expand(parts.n), torch.exp(-base).expand(parts.n)
    return parts.log_noise.expand(parts.n), torch.exp(0.5 * parts.log_noise_var - parts.log_noise).expand(parts.n)


class Term(nn.Module):
    """A per-level model term (module docstring). Subclasses set :attr:`name` and :attr:`order` and implement
    :meth:`from_config`, :meth:`tables` and :meth:`combine`; the other methods have defaults.

    ``options`` are the term's plain hyper-parameters (saved with the model); ``n_levels`` the number of
    levels of every factor. With ``parameters=False`` the term is only a definition (a fitted model keeps
    its values in :class:`~..state.FittedTerm`).
    """

    #: the name the term is registered, configured and saved under
    name: ClassVar[str] = ""
    #: terms are applied in increasing order (it fixes the order of the sums and of fold-in's parameters)
    order: ClassVar[int] = 100
    #: built-in terms are built whenever their configuration switches them on; others only when named in
    #: ``MWGPConfig(extra_terms=...)``
    builtin: ClassVar[bool] = False
    #: width-0 tables whose rows enter the mean with weight 1: a rating's leverage on such a level's value is
    #: its Laplace variance / the rating's noise variance (the cold-start calibration's leave-one-out step)
    unit_mean_tables: ClassVar[tuple[str, ...]] = ()
    #: :meth:`combine` adds to the mean function and its variance only (:meth:`RatingParts.add_mean`), not to the
    #: noise, the GP inputs or the latent scale: the noise variance alone is formed without it
    mean_only: ClassVar[bool] = False

    def __init__(self, n_levels: tuple[int, ...], options: dict[str, Any] | None = None,
                 parameters: bool = True) -> None:
        super().__init__()
        self.n_levels = tuple(int(n) for n in n_levels)
        self.options = dict(options or {})
        self.specs: dict[str, Table] = self._table_specs()
        if parameters:
            for spec in self.specs.values():
                if spec.variance_of is not None:  # set in closed form, not by gradient: a buffer
                    self.register_buffer(spec.name, torch.zeros(spec.shape(self.n_levels)))
                else:
                    self.register_parameter(spec.name, nn.Parameter(torch.zeros(spec.shape(self.n_levels))))

    # -- what a term must define -------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: Any, n_levels: tuple[int, ...]) -> "Term | None":
        """The term for these hyper-parameters (an ``MWGPConfig``) and levels, or None when it is switched off."""
        raise NotImplementedError

    def tables(self) -> list[Table]:
        """The term's tables (from ``self.options`` and ``self.n_levels``)."""
        raise NotImplementedError

    def _table_specs(self) -> dict[str, Table]:
        return {t.name: t for t in self.tables()}

    def set_options(self, **changes: Any) -> None:
        """Change options after construction (e.g. a prior estimated from the data in
        :meth:`initialise_from_data`; they are saved with the model) and rebuild :attr:`specs` from them. The
        tables themselves (names and shapes) must stay as they are."""
        self.options.update(changes)
        specs = self._table_specs()
        if [(t.name, t.shape(self.n_levels)) for t in specs.values()] != \
                [(t.name, t.shape(self.n_levels)) for t in self.specs.values()]:
            raise ValueError(f"set_options({changes}) changes the tables of term {self.name!r}")
        self.specs = specs

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        """Add the term's part of n ratings' predictive to ``parts``, from the rows of its tables (every table
        but the implicit-feedback ones, ``rows[name]``, with implicit sums included)."""
        raise NotImplementedError

    # -- training ---------------------------------------------------------------------------------------
    @property
    def user_tables(self) -> list[Table]:
        """The tables indexed by users (factor 0) that :meth:`combine` reads after training (fold-in's parameters)."""
        return [t for t in self.direct_tables if t.factor == 0]

    @property
    def direct_tables(self) -> list[Table]:
        """The tables :meth:`combine` reads after training (all but the implicit-feedback and variance tables)."""
        return [t for t in self.specs.values() if t.feeds is None and t.variance_of is None]

    @property
    def trained_tables(self) -> list[Table]:
        """The tables :meth:`combine` reads in training: the direct tables and the variational variance tables."""
        return [t for t in self.specs.values() if t.feeds is None]

    def table(self, name: str) -> Tensor:
        """The table's parameter (a buffer for a variance table, :attr:`Table.variance_of`)."""
        return getattr(self, name)

    @torch.no_grad()
    def initialise(self, init: Any) -> None:
        """Random starting values (``init``: :class:`~..initialization.InitContext`); default: zeros."""

    @torch.no_grad()
    def initialise_from_data(self, init: Any) -> None:
        """Starting values from the data, after every term's random ones (default: none)."""

    def penalty(self) -> Tensor | None:
        """Log-density terms of the ELBO beyond the Gaussian priors of the tables (e.g. -KL of a variational
        posterior), over every level; None: none."""
        return None

    def variance_statistics(self, tables: dict[str, Tensor], index: Tensor, weights: Tensor) -> dict[str, Tensor]:
        """A term with variance tables (:attr:`Table.variance_of`): the sufficient statistics of their
        closed-form update from a chunk of the training ratings (``index``; ``weights``: each rating's
        E[1 / sigma_n^2]; ``tables``: the term's tables as :meth:`combine` reads them, implicit sums
        included), summed over the chunks and handed to :meth:`update_variances`. Default: none."""
        return {}

    @torch.no_grad()
    def update_variances(self, statistics: dict[str, Tensor]) -> None:
        """Set the variance tables to their optimum from the summed :meth:`variance_statistics`."""

    @torch.no_grad()
    def shrink_log_noise(self, factor: float) -> None:
        """A term that adds log-noise offsets (:meth:`RatingParts.add_log_noise`) multiplies them by ``factor`` > 0:
        their means by it, their variances by its square (early stopping's noise calibration,
        :func:`~..validation.noise_calibration`). Default: no offsets."""

    def row_update(self, spec: Table, n_data: int, total_steps: int) -> Any:
        """How the row-sparse path updates this table: None for lazy Adam with the table's Gaussian prior as
        lazy decay (the default); a term whose :meth:`penalty` touches the table's rows returns an object
        that adds it lazily (``update(param, packed_rows, rows, grad, t, betas, eps, step_size, kernel)``,
        ``state_dict``, ``load_state_dict``; see :class:`~.noise_offset.LazyOffsetKL`)."""
        return None

    # -- after training -----------------------------------------------------------------------------------
    def population(self, spec: Table, values: Tensor, laplace_var: Tensor | None) -> tuple[Tensor, Tensor]:
        """Mean and variance of the distribution an unseen level's row is drawn from: the spread of the
        learned rows (at least ``spec.population_floor``) plus their average Laplace variance (law of total
        variance: point estimates are shrunk towards the prior, the population of true values is wider)."""
        mean = values.mean(0)
        var = values.var(0, unbiased=False).clamp_min(spec.population_floor)
        if laplace_var is not None:
            var = var + laplace_var.to(var).mean(0)
        return mean, var

    def fitted_extras(self) -> dict[str, Tensor]:
        """Fitted values besides the tables that prediction or fold-in need (saved with the model)."""
        return {}

    # -- inputs of a (user, item) pair rather than of a level ------------------------------------------------
    #: :meth:`combine` also reads inputs of each rating's pair (e.g. what the user rated among the item's
    #: neighbours), which :meth:`pair_rows` forms from the term's fitted extras
    reads_pairs: ClassVar[bool] = False

    def pair_rows(self, index: Any, extras: dict[str, Any], rows: Tensor | None = None) -> dict[str, Rows]:
        """The pair inputs of index tuples (n, F) (-1: unseen), from the fitted extras (torch tensors, or numpy
        arrays on the one-pair serving path), keyed as :meth:`combine` reads them. ``rows``: in training, the
        tuples' positions in the data the term was initialised on. Default: none."""
        return {}

    def pair_part(self, index: tuple[int, ...], tables: dict[str, tuple[np.ndarray, np.ndarray | None]],
                  extras: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray | None] | None:
        """One index tuple's addition to the mean and its variance, each (1,), as :meth:`pair_rows` and
        :meth:`combine` give it, computed in one step for the one-pair serving path (:mod:`..serving`), which
        checks it against the batched path. ``tables``: every table's (values, Laplace variance or None), as
        numpy arrays; ``extras``: the fitted extras, as numpy arrays. Default: None (the serving path forms the
        pair inputs and calls :meth:`combine`)."""
        return None

    def pair_combine(self, index: tuple[int, ...], tables: dict[str, tuple[np.ndarray, np.ndarray | None]],
                     extras: dict[str, np.ndarray] | None, parts: Any) -> bool:
        """:meth:`combine` for one index tuple of known levels in Python floats, the one-pair serving path's fast
        lane (:class:`~..serving.PairParts`: ``add_mean``, ``add_log_noise``, ``set_input`` and
        ``add_latent_log_scale`` as :class:`RatingParts`, on floats and 1-d rows). ``tables`` and ``extras`` as in
        :meth:`pair_part`. The same formulas as :meth:`combine`, without a numpy call per operation on (1, k) rows;
        the serving path checks the result against the batched one. Default: False (it forms rows and calls
        :meth:`combine`)."""
        return False

    def catalogue_part(self, user: int, rows: dict[str, Rows], extras: dict[str, Any], variance: bool
                       ) -> tuple[Tensor, Tensor | None] | None:
        """A known user's addition to the mean with every item (n_items,), and with ``variance`` its variance, in
        one step, for ranking (:func:`~..predictive.catalogue_moments`); ``rows``: the term's tables' rows there
        (the user's broadcast, the items' whole). The same values as :meth:`pair_rows` and :meth:`combine` up to
        float rounding. Default: None (the catalogue forms the pair inputs and calls :meth:`combine`)."""
        return None

    def user_pair_rows(self, items: Tensor, answers: tuple[Tensor, Tensor], extras: dict[str, Tensor]
                       ) -> dict[str, Rows]:
        """The pair inputs of one user who is not in the fitted extras (fold-in), with ``items`` (n,), from the
        user's ``answers`` (inner items, standardised ratings). Default: none."""
        return {}

    def extras_with_users(self, extras: dict[str, Tensor], answers: list[tuple[np.ndarray, np.ndarray] | None],
                          rows: np.ndarray | None, n_users: int) -> dict[str, Tensor]:
        """The extras of a posterior whose users ``rows`` (None: appended after the ``n_users`` known ones) are
        folded-in users with these ``answers`` (inner items, standardised ratings; None: not kept). Default:
        unchanged."""
        return extras

    # -- fold-in (one user's rows, everything else fixed) ---------------------------------------------------
    #: a folded-in user's row of each user table has a Gaussian prior: "population", N(population mean, variance)
    #: on the effective row (implicit sum included); "model", the table's N(0, 1 / prior_precision) on the raw
    #: row. False: the term gives the log prior itself (:meth:`user_log_prior`).
    gaussian_user_prior: ClassVar[bool] = True
    #: for a term without a Gaussian prior: its user methods below also take, as ``prior``, a known user's fitted raw
    #: row, whose posterior is then the prior (an update by new ratings, :mod:`..update`)
    own_user_prior: ClassVar[bool] = False
    #: the user rows of this term set the noise of the user's ratings: fold-in fits them to the expected squared
    #: residuals under the user's Laplace posterior (:mod:`..foldin`, ``expected_residuals``)
    user_noise: ClassVar[bool] = False

    def user_prior_precision(self, spec: Table, prior: str, fitted: Any) -> Tensor | None:
        """The precision of a folded user's Gaussian prior, per entry of the row (None where it is flat: then
        the row gets no Laplace variance either); its mean is the population's (or 0 under the model's prior)."""
        if prior == "population":
            _, var = fitted.tables[spec.name].population
            return 1.0 / var.clamp_min(MIN_PRIOR_VAR)
        if spec.prior_precision:
            return torch.full((max(spec.width, 1),), float(spec.prior_precision), dtype=torch.float64)
        return None

    def user_log_prior(self, spec: Table, raw: Tensor, prior: str, fitted: Any) -> Tensor:
        """log p of a folded user's raw row (up to a constant), for a term whose prior is not Gaussian."""
        raise NotImplementedError(f"{type(self).__name__} sets gaussian_user_prior = False: it must give "
                                  "user_log_prior")

    def user_noise_hessian(self, spec: Table, raw: Tensor, log_noise: tuple[Tensor, Tensor], prior: str,
                           fitted: Any) -> Tensor | None:
        """The Hessian of fold-in's -L in a folded user's raw row of a ``user_noise`` table, from ``log_noise``:
        the gradient and Hessian of -L in a shift (m, V) of every rating's log-noise mean and variance
        (:meth:`~..user_objective.FoldInContext.log_noise_curvature`), its prior included; None (the default):
        fold-in forms it by autograd (its whitening, :mod:`..foldin`)."""
        return None

    def user_start(self, spec: Table, prior: str, fitted: Any) -> Tensor | None:
        """The raw row a folded user starts from, implicit sum excluded; None: the default (the population
        mean minus the user's implicit sum, or 0 under the model's prior)."""
        return None


#: smallest variance of a fold-in population prior (a population without spread would fix the row)
MIN_PRIOR_VAR = 1e-12

# -- the registry ---------------------------------------------------------------------------------------
_REGISTRY: dict[str, type[Term]] = {}


def register_term(cls: type[Term]) -> type[Term]:
    """Make a :class:`Term` subclass known under ``cls.name`` (usable as a class decorator). Built-in terms
    register themselves; a term defined elsewhere is registered by importing its module, and used by naming
    it in ``MWGPConfig(extra_terms=(name, ...))`` (a saved model that uses it loads once it is registered)."""
    if not (isinstance(cls, type) and issubclass(cls, Term)) or not cls.name:
        raise TypeError(f"register_term expects a Term subclass with a `name`, got {cls!r}")
    known = _REGISTRY.get(cls.name)
    if known is not None and known.__qualname__ != cls.__qualname__:
        raise ValueError(f"a model term named {cls.name!r} is already registered ({known.__module__}."
                         f"{known.__qualname__})")
    # the same class defined again (its module reloaded, a notebook cell run twice): the newer definition
    _REGISTRY[cls.name] = cls
    return cls
