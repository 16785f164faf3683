"""The fitted model's state: typed, versioned, saved as a plain dict of tensors and numbers.

:class:`PosteriorState` is everything a fitted posterior is: the rating scale, the global mean and
noise variance, the fitted GP (:class:`~.gp.FittedGP`), one :class:`FittedTerm` per model term (its
fitted tables, their Laplace variances and populations, and what fold-in needs besides), the cold-start
calibration and the folded-in users predicted as unseen. :meth:`PosteriorState.to_dict` writes format
:data:`FORMAT_VERSION`; :meth:`PosteriorState.from_dict` reads it, and older formats through their
explicit migrations (:mod:`.migrations`). Everything derived from it (the kernel expectations of unseen
levels) is recomputed when a posterior is built, never saved.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
from torch import Tensor

from .gp import FittedGP
from .terms import Table, Term, term_class

#: the saved format of a posterior (1: mogp_surprise 0.1, positional and untyped; 2: terms as components). Optional
#: entries of format 2, absent from files written before them and read as None: ``cold_users``, ``folded_users``
#: (since 2026-12-02; a reader before it serves those users as trained ones, updating them)
FORMAT_VERSION = 2
_GP_FIELDS = ("inducing", "lengthscale", "outputscale", "w", "M")


@dataclass
class FittedTable:
    """A term table after training: its values (the effective rows, implicit sums included; the raw rows
    for an implicit-feedback table kept for fold-in), the Laplace variance of every row (None: not used
    in predictions) and the population (mean, variance) an unseen level's row is drawn from (None for an
    implicit-feedback table)."""

    values: Tensor
    laplace_var: Tensor | None = None
    population: tuple[Tensor, Tensor] | None = None


@dataclass
class FittedTerm:
    """A term after training: its definition (``term``: a :class:`~.terms.Term` without parameters), its
    fitted tables by name and its fitted extras (:meth:`~.terms.Term.fitted_extras`)."""

    term: Term
    tables: dict[str, FittedTable]
    extras: dict[str, Tensor] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.term.name

    def spec(self, name: str) -> Table:
        return self.term.specs[name]

    @property
    def complete(self) -> bool:
        """False for a term migrated from a state that lacked some of its hyper-parameters (fold-in refuses it)."""
        return all(value is not None for value in self.term.options.values())

    def map(self, fn: Callable[[Tensor], Tensor]) -> "FittedTerm":
        tables = {name: FittedTable(fn(t.values), None if t.laplace_var is None else fn(t.laplace_var),
                                    None if t.population is None else (fn(t.population[0]), fn(t.population[1])))
                  for name, t in self.tables.items()}
        return FittedTerm(self.term, tables, {k: fn(v) for k, v in self.extras.items()})


#: tensors already mapped: the id of a tensor -> (the tensor, the result)
Mapped = dict[int, tuple[Tensor, Tensor]]


def map_reusing(state: "PosteriorState", fn: Callable[[Tensor], Tensor],
                done: Mapped | None) -> tuple["PosteriorState", Mapped]:
    """``state.map(fn)``, reusing ``done`` for the tensors it holds, with the same record of this map for the states
    derived from ``state``: a posterior with a folded-in user shares every tensor with the one it came from but those
    the fold-in replaced (the user tables; with the neighbourhood term, its graph of a re-folded user), so its
    float64 copy converts those alone (at 200,000 users the whole copy took some 40 ms of the first request after
    each fold-in)."""
    done, record = done or {}, {}

    def reuse(t: Tensor) -> Tensor:
        hit = done.get(id(t))
        out = hit[1] if hit is not None and hit[0] is t else fn(t)
        record[id(t)] = (t, out)
        return out
    return state.map(reuse), record


def shared_part(record: Mapped, state: "PosteriorState") -> Mapped:
    """The entries of a :func:`map_reusing` record for the tensors ``state`` holds: what a posterior derived by a
    fold-in can reuse (the replaced tables' entries dropped, so that no old table is kept alive through it)."""
    held: set[int] = set()
    state.map(lambda t: held.add(id(t)) or t)
    return {key: entry for key, entry in record.items() if key in held}


@dataclass
class PosteriorState:
    """What a fitted MW-GP posterior is (module docstring); standardised units but for the rating scale."""

    rating_mean: float
    rating_std: float
    global_mean: Tensor
    noise_variance: Tensor
    gp: FittedGP
    terms: list[FittedTerm]
    #: the factor of the latent variance of each pattern of unseen factors (entry p: bit f set when factor f
    #: is unseen; entry 0 is 1); all 1 before the cold-start calibration
    cold_scale: Tensor
    #: user rows predicted exactly as an unseen user (folded-in users with 0 ratings); None: none
    cold_users: Tensor | None = None
    chunk_size: int = 65536
    #: user rows that hold fold-in's posterior from the population prior (stored new users, or users folded in again
    #: from all their ratings), not training's: their next ratings fold them in again from all (:mod:`.update`);
    #: None: none
    folded_users: Tensor | None = None

    @property
    def n_levels(self) -> tuple[int, ...]:
        inputs = self.term("gp_input")
        return tuple(int(inputs.tables[f"embedding_{f}"].values.shape[0]) for f in range(len(inputs.term.n_levels)))

    def term(self, name: str) -> FittedTerm | None:
        return next((t for t in self.terms if t.name == name), None)

    def map(self, fn: Callable[[Tensor], Tensor]) -> "PosteriorState":
        """A copy with ``fn`` applied to every tensor (numbers and the cold users' flags' dtype kept)."""
        gp = FittedGP(*(fn(getattr(self.gp, name)) for name in _GP_FIELDS), self.gp.input_width)
        cold = None if self.cold_users is None else fn(self.cold_users)
        folded = None if self.folded_users is None else fn(self.folded_users)
        return replace(self, global_mean=fn(self.global_mean), noise_variance=fn(self.noise_variance), gp=gp,
                       terms=[t.map(fn) for t in self.terms], cold_scale=fn(self.cold_scale), cold_users=cold,
                       folded_users=folded)

    # -- the saved form ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain dict of tensors, numbers and strings (CPU copies); inverse of :meth:`from_dict`."""
        state = self.map(lambda t: t.detach().cpu())
        terms = []
        for fitted in state.terms:
            tables = {}
            for name, table in fitted.tables.items():
                entry = {"values": table.values}
                if table.laplace_var is not None:
                    entry["laplace_var"] = table.laplace_var
                if table.population is not None:
                    entry["population_mean"], entry["population_var"] = table.population
                tables[name] = entry
            terms.append({"name": fitted.name, "options": dict(fitted.term.options),
                          "n_levels": list(fitted.term.n_levels), "tables": tables, "extras": dict(fitted.extras)})
        return {"format_version": FORMAT_VERSION, "rating_mean": self.rating_mean, "rating_std": self.rating_std,
                "chunk_size": self.chunk_size, "global_mean": state.global_mean,
                "noise_variance": state.noise_variance,
                "gp": {**{name: getattr(state.gp, name) for name in _GP_FIELDS}, "input_width": state.gp.input_width},
                "terms": terms, "cold_scale": state.cold_scale, "cold_users": state.cold_users,
                **({} if state.folded_users is None else {"folded_users": state.folded_users})}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> "PosteriorState":
        """The state of a saved dict of this format or an older one (migrated); ``ValueError`` naming what
        is wrong with an incomplete or foreign one."""
        if not isinstance(state, dict):
            raise ValueError(f"a posterior state must be a dict, got {type(state).__name__}")
        version = state.get("format_version", 1)
        if version == 1:
            from .migrations import from_version_1

            state = from_version_1(state)
        elif version != FORMAT_VERSION:
            raise ValueError(f"posterior state format {version!r} is not supported (this version reads 1 and "
                             f"{FORMAT_VERSION}); upgrade mogp_surprise to load it")
        missing = [k for k in ("rating_mean", "rating_std", "global_mean", "noise_variance", "gp", "terms",
                               "cold_scale") if k not in state]
        missing += [f"gp.{k}" for k in (*_GP_FIELDS, "input_width") if k not in state.get("gp", {})]
        if missing:
            raise ValueError(f"posterior state is missing the entries {missing}")
        terms = [_fitted_term(entry) for entry in state["terms"]]
        if not any(t.name == "gp_input" for t in terms):
            raise ValueError("posterior state has no GP-input term ('gp_input')")
        gp = state["gp"]
        return cls(float(state["rating_mean"]), float(state["rating_std"]), state["global_mean"],
                   state["noise_variance"], FittedGP(*(gp[k] for k in _GP_FIELDS), int(gp["input_width"])), terms,
                   state["cold_scale"], state.get("cold_users"), int(state.get("chunk_size", 65536)),
                   state.get("folded_users"))


def _fitted_term(entry: dict[str, Any]) -> FittedTerm:
    cls = term_class(entry["name"])
    term = cls(tuple(entry["n_levels"]), entry.get("options", {}), parameters=False)
    tables = {}
    for name, table in entry["tables"].items():
        if name not in term.specs:
            raise ValueError(f"the saved term {term.name!r} has a table {name!r} that this version does not know")
        population = None
        if "population_mean" in table:
            population = (table["population_mean"], table["population_var"])
        tables[name] = FittedTable(table["values"], table.get("laplace_var"), population)
    missing = [spec.name for spec in term.direct_tables if spec.name not in tables]
    if missing:
        raise ValueError(f"the saved term {term.name!r} lacks its tables {missing}")
    return FittedTerm(term, tables, dict(entry.get("extras", {})))



@dataclass
class FoldedUser:
    """One user's parameters inferred by fold-in (:func:`~.foldin.fold_in`), to append to a posterior
    (:meth:`~.posterior.MWGPPosterior.with_extra_users`).

    Attributes
    ----------
    rows : dict of str to ndarray
        The user's row of every user table of every term, keyed ``"term.table"`` (e.g.
        ``"gp_input.embedding_0"``): the effective row (implicit feedback included), as predictions use it.
    raw : dict of str to ndarray
        The same rows without the implicit sums (the free parameters of fold-in).
    variances : dict of str to ndarray
        The Laplace variance of the rows of tables that have one (the entries of :attr:`rows` with
        ``laplace=True``).
    n_ratings : int
        Ratings folded in; 0 means the user is predicted as the cold-start user (index -1).
    objective : float
        The maximised fold-in objective (the user's part of the ELBO, standardised units).
    n_iter : int
        L-BFGS iterations used.
    covariance : ndarray of shape (d, d)
        The Gauss-Newton posterior covariance of the user's Laplace entries (``layout`` says which), full
        rather than diagonal (the ``variances`` are those of the diagonal approximation, as for trained users).
    layout : list of (str, int)
        ``"term.table"`` and width of each block of ``covariance``, in order.
    answers : tuple of (ndarray, ndarray), optional
        The inner items and standardised ratings folded in: a term that reads what the user rated
        (:attr:`~.terms.Term.reads_pairs`) serves the user from them.
    model : tuple of float, optional
        :meth:`~.gp.FittedGP.fingerprint` of the model the user was folded in with (checked where the user is
        added to a posterior).
    updated : bool
        An update of a known user's posterior by new ratings (:func:`~.foldin.update_user`): its prior was
        the user's own posterior, so its variances are not widened as a new user's are (the unseen user's
        calibration factor, :meth:`~.posterior.MWGPPosterior.with_extra_users`).
    """

    rows: dict[str, Any]
    raw: dict[str, Any]
    variances: dict[str, Any]
    n_ratings: int
    objective: float = 0.0
    n_iter: int = 0
    covariance: Any = None
    layout: list = field(default_factory=list)
    answers: tuple | None = None
    model: tuple | None = None
    updated: bool = False

    @property
    def cold(self) -> bool:
        """True for a user folded in from 0 ratings (predicted as index -1)."""
        return self.n_ratings == 0


def check_folded_users(state: "PosteriorState", users: list) -> None:
    """``ValueError`` unless every one of ``users`` is a :class:`FoldedUser` of the model ``state`` holds: a row of
    the right shape for every user table, folded in with this model's GP (a user of another model with tables of
    the same shapes predicted without a word)."""
    if len(state.n_levels) != 2:
        raise ValueError(f"folded-in users need a (user, item) model; this one has {len(state.n_levels)} factors")
    fingerprint = None
    for n, u in enumerate(users):
        if not all(hasattr(u, a) for a in ("rows", "variances", "n_ratings")):
            raise ValueError(f"`users[{n}]` is not a FoldedUser (from mogp_surprise.core.foldin.fold_in), "
                             f"got {type(u).__name__}")
        for fitted in state.terms:
            for spec in fitted.term.user_tables:
                key = f"{fitted.name}.{spec.name}"
                want = (spec.width,) if spec.width else ()
                if key not in u.rows or np.shape(u.rows[key]) != want:
                    raise ValueError(f"`users[{n}]` has no row of shape {want} for {key!r} (got "
                                     f"{np.shape(u.rows[key]) if key in u.rows else 'none'}); it was folded in "
                                     "with another model")
        if getattr(u, "model", None) is not None:
            fingerprint = fingerprint or state.gp.fingerprint()
            if not np.allclose(u.model, fingerprint, rtol=1e-5, atol=1e-8):
                raise ValueError(f"`users[{n}]` was folded in with another model (its GP differs); fold the user in "
                                 "with this posterior")


def check_user_rows(rows, n_users: int, n_given: int) -> np.ndarray:
    """Validated user rows (int64) for :meth:`MWGPPosterior.with_replaced_users`."""
    rows = np.asarray(rows)
    if rows.ndim != 1 or (rows.size and not np.issubdtype(rows.dtype, np.integer)):
        raise ValueError(f"`rows` must be a 1-d array of user indices, got {rows!r}")
    if rows.size and (rows.min() < 0 or rows.max() >= n_users):
        raise ValueError(f"`rows` must lie in [0, {n_users}), got range [{rows.min()}, {rows.max()}]")
    if np.unique(rows).size != rows.size:
        raise ValueError("`rows` must not repeat a user")
    if n_given != rows.size:
        raise ValueError(f"`rows` has {rows.size} entries but {n_given} users were given")
    return rows.astype(np.int64)
