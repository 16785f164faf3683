"""Reliability table: what every public entry point does with bad or unusual input.

One parametrised table (``TABLE``). Each row is ``(run, outcome)``: ``run(ctx)`` feeds one input
to one API (scikit-learn adapter, Surprise adapter or the torch core) and ``outcome`` says what
must happen:

- ``Raises(E, regex)``: exactly ``E`` (not a subclass) whose message matches ``regex``;
- ``Warns(W, regex, then)``: exactly ``W`` is warned, the call succeeds and ``then(result)`` holds;
- ``Ok(then)``: no warning at all, and ``then(result)`` holds (a defined behaviour, not an error).

A newly found defect is added as a row asserting the *correct* behaviour, marked
``xfail(strict=True, reason="BUG: ...")`` until fixed. ``docs/bad_inputs.md`` documents every row;
keep the two in sync.
Everything is tiny (1 epoch, 4 inducing points) so the whole table runs in seconds on a CPU.
"""
from __future__ import annotations

import copy

import pickle
import re
import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest
import scipy.sparse
import torch
from sklearn.exceptions import DataConversionWarning
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from surprise import Dataset, Reader

from mogp_surprise import MWGP, MWGPRegressor
from mogp_surprise.core import MWGPConfig, MWGPPosterior, NumericalError, fit_mwgp
from mogp_surprise.core.errors import NotFittedError

TINY = {"n_epochs": 1, "n_inducing": 4, "batch_size": 64, "random_state": 0, "device": "cpu"}
#: enough training for cold-start variances to separate from the seen pairs' (still < 0.2 s)
TRAINED = {**TINY, "n_epochs": 40, "n_inducing": 8}


def _ratings() -> pd.DataFrame:
    """~60 ratings of 10 users x 8 items with user and item effects (int ids)."""
    rng = np.random.default_rng(1)
    users, items = (a.ravel() for a in np.meshgrid(np.arange(10), np.arange(8), indexing="ij"))
    keep = rng.random(users.size) < 0.75
    users, items = users[keep], items[keep]
    rating = np.round(3 + (users % 3 - 1) + (items % 2 - 0.5) * 2 + rng.normal(0, 0.3, users.size))
    return pd.DataFrame({"user": users, "item": items, "rating": np.clip(rating, 1, 5)})


DF = _ratings()
N = len(DF)
XY = DF[["user", "item"]]
Y = DF["rating"]
INDEX = XY.to_numpy().astype(np.int64)
N_LEVELS = (int(DF.user.max()) + 1, int(DF.item.max()) + 1)
#: the same ratings with string ids, rows shuffled (so that a Surprise trainset's by-user order differs
#: from the DataFrame's), to check that messages identify a rating by its raw ids
DF_STR = (DF.assign(user="u" + DF.user.astype(str), item="i" + DF.item.astype(str))
          .sample(frac=1.0, random_state=0).reset_index(drop=True))
U3, I3 = DF_STR.user[3], DF_STR.item[3]
UNSEEN = 999  # an id in neither factor


# -- helpers ------------------------------------------------------------------------------------------
def with_value(column: str, value: Any, row: int = 3, df: pd.DataFrame = DF) -> pd.DataFrame:
    """Copy of ``df`` with ``df.loc[row, column] = value`` (column made object dtype)."""
    out = df.copy()
    out[column] = out[column].astype(object)
    out.at[row, column] = value  # .at: a list or dict is one value
    return out


def y_with(value: Any, row: int = 3) -> np.ndarray:
    """The ratings as float (NaN/inf) or object (anything else) ndarray with one bad entry."""
    y = Y.to_numpy().astype(float if isinstance(value, float) else object)
    y[row] = value
    return y


def nullable_user_with_na() -> pd.DataFrame:
    """Ratings whose user column is pandas' nullable Int64 with pd.NA in row 3."""
    out = DF.astype({"user": "Int64"})
    out.loc[3, "user"] = pd.NA
    return out


def trainset(df: pd.DataFrame, scale: tuple[float, float] = (1, 5)):
    data = Dataset.load_from_df(df[["user", "item", "rating"]], Reader(rating_scale=scale))
    return data.build_full_trainset()


def fit_sk(X: Any, y: Any, **params: Any) -> MWGPRegressor:
    return MWGPRegressor(**{**TINY, **params}).fit(X, y)


def fit_su(df: pd.DataFrame, scale: tuple[float, float] = (1, 5), **params: Any) -> MWGP:
    return MWGP(**{**TINY, **params}).fit(trainset(df, scale))


def fit_core(index: Any, ratings: Any, n_levels: tuple[int, ...] = N_LEVELS, **params: Any):
    return fit_mwgp(np.array(index), np.array(ratings), n_levels, MWGPConfig(**{**TINY, **params}))


def foreign_file() -> str:
    """A file that is not a checkpoint (a saved model's layout), in a fresh temporary folder."""
    import tempfile

    path = f"{tempfile.mkdtemp()}/model.pt"
    torch.save({"format": "mogp_surprise", "format_version": 1}, path)
    return path


def checkpoint_file(c: "Ctx") -> str:
    """A checkpoint of a TINY fit on the shared trainset."""
    import tempfile

    path = f"{tempfile.mkdtemp()}/fit.ckpt"
    MWGP(**TINY).fit(c.ts, checkpoint=path)
    return path


def frame(users: list, items: list) -> pd.DataFrame:
    return pd.DataFrame({"user": users, "item": items})


class Ctx:
    """Fitted models shared by the rows, each fitted on first use."""

    @cached_property
    def ts(self):
        return trainset(DF)

    @cached_property
    def sk(self) -> MWGPRegressor:  # fitted on a DataFrame (remembers column names)
        return fit_sk(XY, Y)

    @cached_property
    def sk_arr(self) -> MWGPRegressor:  # fitted on an ndarray
        return fit_sk(INDEX, Y.to_numpy())

    @cached_property
    def sk_context(self) -> MWGPRegressor:  # a third id column: a context factor
        return fit_sk(XY.assign(context=np.arange(len(XY)) % 3), Y)

    @cached_property
    def su(self) -> MWGP:
        return MWGP(**TINY).fit(self.ts)

    @cached_property
    def sk_trained(self) -> MWGPRegressor:
        return MWGPRegressor(**TRAINED).fit(XY, Y)

    @cached_property
    def su_trained(self) -> MWGP:
        return MWGP(**TRAINED).fit(self.ts)


@pytest.fixture(scope="module")
def ctx() -> Ctx:
    return Ctx()


# -- outcomes -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Raises:
    exc: type[BaseException]
    match: str

    def check(self, run: Callable[[Ctx], Any], ctx: Ctx) -> None:
        with pytest.raises(self.exc, match=self.match) as info:
            run(ctx)
        assert type(info.value) is self.exc, (
            f"expected exactly {self.exc.__module__}.{self.exc.__qualname__}, got "
            f"{type(info.value).__module__}.{type(info.value).__qualname__}: {info.value}")


@dataclass(frozen=True)
class Warns:
    category: type[Warning]
    match: str
    then: Callable[[Any], None] | None = None

    def check(self, run: Callable[[Ctx], Any], ctx: Ctx) -> None:
        with pytest.warns(self.category, match=self.match) as record:
            result = run(ctx)
        assert any(type(w.message) is self.category and re.search(self.match, str(w.message)) for w in record)
        if self.then is not None:
            self.then(result)


@dataclass(frozen=True)
class Ok:
    then: Callable[[Any], None]

    def check(self, run: Callable[[Ctx], Any], ctx: Ctx) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a defined behaviour is silent
            result = run(ctx)
        self.then(result)


def row(run: Callable[[Ctx], Any], outcome: Raises | Warns | Ok, id: str, *marks: Any):
    return pytest.param(run, outcome, id=id, marks=list(marks))


# -- checks for the Ok/Warns rows -------------------------------------------------------------------
def finite_positive(mean: np.ndarray, var: np.ndarray, n: int) -> None:
    assert mean.shape == var.shape == (n,)
    assert np.isfinite(mean).all() and np.isfinite(var).all() and (var > 0).all()


def check_all_equal(result: tuple[np.ndarray, np.ndarray]) -> None:
    mean, var = result
    finite_positive(mean, var, 2)
    np.testing.assert_allclose(mean, 3.0, atol=0.5)


def check_between(lo: float, hi: float) -> Callable[[float], None]:
    def check(value: float) -> None:
        assert lo - 1 <= value <= hi + 1, (value, lo, hi)
    return check


DUP_RATINGS = (2.0, 4.0)  # appended for the pair of row 0, which already has DF.rating[0]
DF_DUP = pd.concat([DF, pd.DataFrame({"user": [DF.user[0]] * 2, "item": [DF.item[0]] * 2,
                                      "rating": list(DUP_RATINGS)})], ignore_index=True)
DUP_LO, DUP_HI = min(*DUP_RATINGS, DF.rating[0]), max(*DUP_RATINGS, DF.rating[0])


def dup_sklearn(c: Ctx) -> float:
    model = fit_sk(DF_DUP[["user", "item"]], DF_DUP.rating)
    return float(model.predict(frame([DF.user[0]], [DF.item[0]]))[0])


def dup_surprise(c: Ctx) -> float:
    model = fit_su(DF_DUP)
    assert model.trainset.n_ratings == N + 2  # every row is kept as its own observation
    return model.predict(DF.user[0], DF.item[0]).est


def out_of_scale(c: Ctx) -> tuple[float, float, float]:
    model = fit_su(DF.assign(rating=DF.rating + 4.0), scale=(1, 5))  # ratings 5..9 on a 1..5 Reader
    mean, _ = model.predict_dist(DF.user[0], DF.item[0])
    return mean, model.test([(DF.user[0], DF.item[0], 7.0)])[0].est, model.predict(DF.user[0], DF.item[0]).est


def check_out_of_scale(result: tuple[float, float, float]) -> None:
    unclipped, tested, predicted = result
    assert unclipped > 5.0  # the model fits the values given
    assert tested == predicted == 5.0  # test()/predict() clip to the Reader's scale, like any Surprise algo


def unseen_sklearn(model: MWGPRegressor) -> tuple[np.ndarray, np.ndarray, float]:
    _, seen_var = model.predict_dist(XY)
    X = frame([UNSEEN, DF.user[0], UNSEEN], [DF.item[0], UNSEEN, UNSEEN])
    mean, std = model.predict(X, return_std=True)
    return mean, std, float(np.sqrt(seen_var).mean())


def unseen_surprise(model: MWGP) -> tuple[np.ndarray, np.ndarray, float]:
    _, seen_var = model.predict_dist(list(DF.user), list(DF.item))
    users, items = [UNSEEN, DF.user[0], UNSEEN], [DF.item[0], UNSEEN, UNSEEN]
    preds = [model.predict(u, i) for u, i in zip(users, items)]
    tested = model.test([(u, i, 3.0) for u, i in zip(users, items)])
    mean, var = model.predict_dist(users, items)
    for p, t, m, v in zip(preds, tested, mean, var):
        assert p.details["was_impossible"] is False and t.details["was_impossible"] is False
        assert p.est == pytest.approx(t.est) and t.est == pytest.approx(float(np.clip(m, 1, 5)))
        assert p.details["var"] == pytest.approx(t.details["var"]) and t.details["var"] == pytest.approx(v)
    return mean, np.sqrt(var), float(np.sqrt(seen_var).mean())


def check_cold_start(result: tuple[np.ndarray, np.ndarray, float]) -> None:
    mean, std, seen_std = result
    assert np.isfinite(mean).all() and np.isfinite(std).all()
    assert (std > seen_std).all(), (std, seen_std)


def check_empty(arrays: tuple[np.ndarray, ...]) -> None:
    for a in arrays:
        assert isinstance(a, np.ndarray) and a.shape == (0,)


def sklearn_empty(model: MWGPRegressor, X: Any) -> tuple[np.ndarray, ...]:
    return (model.predict(X), *model.predict_dist(X), *model.predict(X, return_std=True))


def surprise_empty(model: MWGP) -> tuple[np.ndarray, ...]:
    assert model.test([]) == []
    return (*model.predict_dist([]), *model.predict_dist([], []))


def check_fitted_on(n: int, factors: int = 2) -> Callable[[Any], None]:
    def check(model: Any) -> None:
        post = model.posterior if hasattr(model, "posterior") else model.posterior_
        assert post.n_factors == factors
        mean, var = post.predict(np.zeros((1, factors), dtype=np.int64))
        finite_positive(mean, var, 1)
        assert post.n_inducing == n
    return check


def large_ids() -> pd.DataFrame:
    """Ratings with user ids of 10**15 and over-4,000-character item ids."""
    return DF.assign(user=DF.user.astype(np.int64) * 10 ** 15,
                     item=DF.item.map(lambda i: "item" * 1000 + str(i)))


def large_ids_sklearn(c: Ctx) -> np.ndarray:
    df = large_ids()
    model = fit_sk(df[["user", "item"]], df.rating)
    assert model.encoders_[0].n_levels == DF.user.nunique()
    assert model.encoders_[1].n_levels == DF.item.nunique()
    return model.predict_dist(df[["user", "item"]])


def huge_ids_sklearn(c: Ctx) -> np.ndarray:
    X = pd.DataFrame({"user": [int(u) * 2 ** 70 for u in DF.user], "item": DF.item})  # beyond int64
    return fit_sk(X, Y).predict_dist(X)


def large_ids_surprise(c: Ctx) -> np.ndarray:
    df = large_ids()
    model = fit_su(df)
    assert model.trainset.n_users == DF.user.nunique()
    return model.predict_dist(list(df.user), list(df.item))


def pickled(model: Any) -> Any:
    return pickle.loads(pickle.dumps(model))


def posterior_roundtrip(c: Ctx) -> MWGPPosterior:
    return MWGPPosterior.from_state_dict(c.sk.posterior_.state_dict())


# -- hyper-parameters: both adapters, error raised in fit (never in __init__) -------------------------
INT_RULE = r"must be an int >= 1"
POS_RULE = r"must be a finite real number > 0"
NONNEG_RULE = r"must be a finite real number >= 0"
DEVICE_RULE = r"must be one of \('auto', 'cpu', 'cuda'\), 'cuda:N' or a torch.device of the CPU or CUDA"
SEED_RULE = r"must be None, a non-negative int, a numpy.random.Generator or RandomState"
ADAPTERS = ("sklearn", "surprise")
CUDA_MISSING = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
HYPER: list[tuple[str, Any, type[Exception], str, str]] = [  # (parameter, value, exception, rule regex, id)
    *[(name, value, ValueError if isinstance(value, int) and not isinstance(value, bool) else TypeError,
       INT_RULE + (r' or "auto"' if name in ("batch_size", "n_epochs") else ""), f"{name}={value}")
      for name in ("n_inducing", "latent_dim", "n_epochs", "batch_size", "chunk_size")
      for value in (0, -1, 2.5, True)],
    ("batch_size", "big", TypeError, INT_RULE + r' or "auto"', "batch_size=big"),
    ("n_epochs", "many", TypeError, INT_RULE + r' or "auto"', "n_epochs=many"),
    ("lr", 0.0, ValueError, POS_RULE, "lr=0"),
    ("lr", -0.1, ValueError, POS_RULE, "lr=-0.1"),
    ("lr", float("nan"), ValueError, POS_RULE, "lr=nan"),
    ("lr", float("inf"), ValueError, POS_RULE, "lr=inf"),
    ("lr", "0.1", TypeError, POS_RULE, "lr=str"),
    ("embedding_reg", -1.0, ValueError, NONNEG_RULE, "embedding_reg=-1"),
    ("bias_reg", float("nan"), ValueError, NONNEG_RULE + r' or "auto"', "bias_reg=nan"),
    ("bias_reg", "fast", TypeError, NONNEG_RULE + r' or "auto"', "bias_reg=fast"),
    ("mf_reg", -1.0, ValueError, NONNEG_RULE + r' or "auto"', "mf_reg=-1"),
    ("mf_reg", "fast", TypeError, NONNEG_RULE + r' or "auto"', "mf_reg=fast"),
    ("mf_rank", -1, ValueError, r"must be an int >= 0", "mf_rank=-1"),
    ("mf_rank", 2.5, TypeError, r"must be an int >= 0", "mf_rank=2.5"),
    ("kl_weight", -1.0, ValueError, NONNEG_RULE, "kl_weight=-1"),
    ("jitter", 0.0, ValueError, POS_RULE, "jitter=0"),
    ("jitter", -1e-5, ValueError, POS_RULE, "jitter=-1e-5"),
    ("dtype", "float16", ValueError, r"must be one of \('float32', 'float64'\)", "dtype=float16"),
    ("dtype", "half", ValueError, r"must be one of \('float32', 'float64'\)", "dtype=half"),
    ("dtype", torch.float32, ValueError, r"must be one of \('float32', 'float64'\)", "dtype=torch.float32"),
    ("device", "tpu", ValueError, DEVICE_RULE, "device=tpu"),
    ("device", "cuda:x", ValueError, DEVICE_RULE, "device=cuda:x"),
    ("device", "CPU", ValueError, DEVICE_RULE, "device=CPU"),
    ("init", "svd", ValueError, r"must be one of \('pca', 'random'\)", "init=svd"),
    ("lr_schedule", "step", ValueError, r"must be one of \('cosine', 'constant'\)", "lr_schedule=step"),
    ("random_state", -1, ValueError, SEED_RULE, "random_state=-1"),
    ("random_state", "seed", ValueError, SEED_RULE, "random_state=str"),
    ("random_state", 1.5, ValueError, SEED_RULE, "random_state=1.5"),
    ("verbose", "yes", TypeError, r"must be a bool", "verbose=str"),
    ("use_biases", "no", TypeError, r"must be a bool", "use_biases=str"),
    ("implicit", "yes", TypeError, r"must be a bool", "implicit=str"),
    ("implicit", 1, TypeError, r"must be a bool", "implicit=1"),
    ("embedding_uncertainty", "no", TypeError, r"must be a bool", "embedding_uncertainty=str"),
    ("noise", "per-user", ValueError, r"must be one of \('heteroscedastic', 'homoscedastic'\)", "noise=per-user"),
    ("noise", None, ValueError, r"must be one of \('heteroscedastic', 'homoscedastic'\)", "noise=None"),
    ("early_stopping", "yes", ValueError, r'must be True, False or "auto"', "early_stopping=str"),
    ("early_stopping", None, ValueError, r'must be True, False or "auto"', "early_stopping=None"),
    ("neighbourhood", "yes", ValueError, r'must be True, False or "auto"', "neighbourhood=str"),
    ("neighbourhood", None, ValueError, r'must be True, False or "auto"', "neighbourhood=None"),
    ("validation_fraction", 0.0, ValueError, POS_RULE, "validation_fraction=0"),
    ("validation_fraction", 1.0, ValueError, r"must lie in \(0, 1\)", "validation_fraction=1"),
    ("validation_fraction", "10%", TypeError, POS_RULE, "validation_fraction=str"),
]


TOO_MANY_INDUCING = rf"n_inducing=500 exceeds the number of training ratings \({N}\); using {N} inducing"


def fit_with(adapter: str, **params: Any) -> Callable[[Ctx], Any]:
    """Construct (must not raise: scikit-learn/Surprise store parameters unchanged), then fit."""
    cls = MWGPRegressor if adapter == "sklearn" else MWGP

    def run(c: Ctx) -> Any:
        try:
            est = cls(**{**TINY, **params})
        except Exception as exc:  # noqa: BLE001 - turned into a test failure, never swallowed
            pytest.fail(f"{cls.__name__}(**{params}) raised in __init__ ({exc!r}); validation belongs in fit")
        return est.fit(XY, Y) if adapter == "sklearn" else est.fit(c.ts)
    return run


def hyper_rows() -> list:
    rows = []
    for name, value, exc, rule, label in HYPER:
        pattern = rf"`{name}` {rule}, got {re.escape(repr(value))}"
        rows += [row(fit_with(a, **{name: value}), Raises(exc, pattern), f"hyper/{a}/{label}")
                 for a in ADAPTERS]
    for a in ADAPTERS:
        rows += [
            row(fit_with(a, device="cuda"),
                Raises(ValueError, r"`device`='cuda' was requested but CUDA is not available"),
                f"hyper/{a}/device=cuda-without-cuda", CUDA_MISSING),
            row(fit_with(a, device=torch.device("cuda", 0)),
                Raises(ValueError, r"`device`='cuda:0' was requested but CUDA is not available"),
                f"hyper/{a}/device=torch.device-cuda-without-cuda", CUDA_MISSING),
            row(lambda c, a=a: (MWGPRegressor if a == "sklearn" else MWGP)(n_inducing_points=8),
                Raises(TypeError, r"got unexpected keyword argument\(s\) \['n_inducing_points'\]; valid "
                                  r"hyper-parameters are \['n_inducing'"), f"hyper/{a}/unknown-keyword"),
        ]
    return rows


# -- the table ------------------------------------------------------------------------------------------
TABLE = [
    # ---------------------------------------------------------------- data (ratings) ----------------
    row(lambda c: fit_sk(XY, y_with(np.nan)),
        Raises(ValueError, r"y must be finite; found 1 NaN/inf ratings \(first at row 3: .*nan\)"),
        "data/sklearn/y-nan"),
    row(lambda c: fit_sk(XY, y_with(np.inf)),
        Raises(ValueError, r"y must be finite; found 1 NaN/inf ratings \(first at row 3: .*inf\)"),
        "data/sklearn/y-inf"),
    row(lambda c: fit_sk(XY, list(y_with(None))),
        Raises(ValueError, r"y must be finite; found 1 NaN/inf ratings \(first at row 3: .*nan\)"),
        "data/sklearn/y-None"),
    row(lambda c: fit_sk(XY, pd.Series(y_with("abc"))),
        Raises(ValueError, r"(?s)^(?=.*\by\b)(?=.*'abc')(?=.*\brow 3\b)"),
        "data/sklearn/y-str-in-Series"),
    row(lambda c: fit_sk(XY, list(y_with("abc"))),
        Raises(ValueError, r"(?s)^(?=.*\by\b)(?=.*'abc')(?=.*\brow 3\b)"),
        "data/sklearn/y-str-in-list"),
    row(lambda c: fit_sk(XY, pd.Series(y_with(1 + 2j))),
        Raises(ValueError, r"(?s)^(?=.*\by\b)(?=.*\(1\+2j\))(?=.*\brow 3\b)"),
        "data/sklearn/y-complex-in-Series"),
    row(lambda c: fit_sk(XY, Y.to_numpy() + 1j),
        Raises(ValueError, r"(?s)^(?=.*\by\b)(?=.*(?i:complex))"),
        "data/sklearn/y-complex-array"),
    row(lambda c: fit_su(with_value("rating", np.nan, df=DF_STR)),
        Raises(ValueError, rf"(?s)^(?=.*ratings)(?=.*\b{U3}\b)(?=.*\b{I3}\b)"),
        "data/surprise/rating-nan"),
    row(lambda c: fit_su(with_value("rating", np.inf, df=DF_STR)),
        Raises(ValueError, rf"(?s)^(?=.*ratings)(?=.*\b{U3}\b)(?=.*\b{I3}\b)"),
        "data/surprise/rating-inf"),
    row(lambda c: fit_su(with_value("rating", "abc")),
        Raises(ValueError, r"could not convert string to float: 'abc'"), "data/surprise/rating-str"),
    row(lambda c: fit_su(with_value("rating", None)),
        Raises(TypeError, r"float\(\) argument must be a string or a real number, not 'NoneType'"),
        "data/surprise/rating-None"),
    row(lambda c: fit_su(with_value("rating", 1 + 2j)),
        Raises(TypeError, r"float\(\) argument must be a string or a real number, not 'complex'"),
        "data/surprise/rating-complex"),
    row(lambda c: fit_core(INDEX, y_with(np.nan)),
        Raises(ValueError, r"ratings must be finite; 1 are NaN/inf \(first at row 3: .*nan\)"),
        "data/core/ratings-nan"),
    row(lambda c: fit_core(INDEX, y_with(-np.inf)),
        Raises(ValueError, r"ratings must be finite; 1 are NaN/inf \(first at row 3: .*-inf\)"),
        "data/core/ratings-inf"),
    row(lambda c: fit_core(INDEX, Y.to_numpy() + 1j),
        Raises(ValueError, r"ratings must be real numbers, got dtype complex128"),
        "data/core/ratings-complex"),
    row(lambda c: fit_core(INDEX, Y.to_numpy().astype(str)),
        Raises(ValueError, r"ratings must be real numbers, got dtype <U"), "data/core/ratings-str"),
    row(lambda c: fit_sk(XY.iloc[:0], Y.iloc[:0]),
        Raises(ValueError, r"Found array with 0 sample\(s\) \(shape=\(0, 2\)\) while a minimum of 2 is "
                           r"required"),
        "data/sklearn/0-rows"),
    row(lambda c: fit_su(DF.iloc[:0]), Raises(ValueError, r"cannot fit on 0 ratings"),
    "data/surprise/0-rows"),
    row(lambda c: fit_core(np.empty((0, 2), dtype=np.int64), np.empty(0)),
        Raises(ValueError, r"cannot fit on 0 ratings"), "data/core/0-rows"),
    row(lambda c: fit_sk(XY.iloc[:1], Y.iloc[:1]),
        Raises(ValueError, r"Found array with 1 sample\(s\).*at least 2 ratings"), "data/sklearn/1-rating"),
    row(lambda c: fit_su(DF.iloc[:1]),
        Raises(ValueError, r"MW-GP needs at least 2 ratings to fit, got 1"), "data/surprise/1-rating"),
    row(lambda c: fit_core(INDEX[:1], Y.to_numpy()[:1]),
        Raises(ValueError, r"MW-GP needs at least 2 ratings to fit, got 1"), "data/core/1-rating"),
    row(lambda c: fit_sk(XY, np.full(N, 3.0)).predict_dist(frame([DF.user[0], UNSEEN], [DF.item[0], UNSEEN])),
        Ok(check_all_equal), "data/sklearn/all-ratings-equal"),
    row(lambda c: fit_su(DF.assign(rating=3.0)).predict_dist([DF.user[0], UNSEEN], [DF.item[0], UNSEEN]),
        Ok(check_all_equal), "data/surprise/all-ratings-equal"),
    row(dup_sklearn, Ok(check_between(DUP_LO, DUP_HI)), "data/sklearn/duplicate-pairs"),
    row(dup_surprise, Ok(check_between(DUP_LO, DUP_HI)), "data/surprise/duplicate-pairs"),
    row(out_of_scale, Ok(check_out_of_scale), "data/surprise/ratings-outside-rating_scale"),
    row(lambda c: fit_sk(XY, Y.to_numpy()[:, None]),
        Warns(DataConversionWarning, r"A column-vector y was passed when a 1d array was expected",
              check_fitted_on(4)), "data/sklearn/y-column-vector"),
    # ---------------------------------------------------------------- ids -------------------------
    row(lambda c: fit_sk(with_value("user", None)[["user", "item"]], Y),
        Raises(ValueError, r"id column 'user' must not contain None/NaN; found 1 \(first at row 3: None\)"),
        "ids/sklearn/user-None"),
    row(lambda c: fit_sk(XY.assign(item=np.where(DF.index == 3, np.nan, DF.item)), Y),
        Raises(ValueError, r"id column 'item' must not contain NaN/inf; found 1 \(first at row 3\)"),
        "ids/sklearn/item-nan-float-column"),
    row(lambda c: fit_sk(nullable_user_with_na()[["user", "item"]], Y),
        Raises(ValueError, r"id column 'user' must not contain NaN/inf; found 1 \(first at row 3\)"),
        "ids/sklearn/user-pd.NA"),
    row(lambda c: fit_sk(np.c_[np.where(DF.index == 3, np.inf, DF.user), DF.item], Y),
        Raises(ValueError, r"id column 'user' must not contain NaN/inf; found 1 \(first at row 3\)"),
        "ids/sklearn/user-inf-ndarray"),
    row(lambda c: fit_sk(with_value("user", "u1")[["user", "item"]], Y), Ok(check_fitted_on(4)),
        "ids/sklearn/mixed-int-str"),
    row(lambda c: fit_sk(with_value("user", str(DF.user[0]))[["user", "item"]], Y),
        Warns(UserWarning, rf"id column 'user' holds both {DF.user[0]} and '{DF.user[0]}'"),
        "ids/sklearn/int-and-same-str-id"),
    row(lambda c: fit_su(with_value("user", None)),
        Raises(ValueError, r"(?i)user.*(None|NaN)"), "ids/surprise/user-None"),
    row(lambda c: fit_su(with_value("item", np.nan)),
        Raises(ValueError, r"(?i)item.*(None|NaN)"), "ids/surprise/item-nan"),
    row(lambda c: fit_su(with_value("user", "u1")), Ok(check_fitted_on(4)), "ids/surprise/mixed-int-str"),
    row(lambda c: c.su.predict(str(DF.user[0]), DF.item[0]),
        Warns(UserWarning, rf"user id '{DF.user[0]}' \(str\) is not in the training data, but {DF.user[0]} "
                           r"\(int\) is", lambda p: p.details["unknown_user"] is True or pytest.fail("flag")),
        "ids/surprise/predict-str-id-after-int-fit"),
    row(large_ids_sklearn, Ok(lambda r: finite_positive(*r, N)), "ids/sklearn/int-1e15-and-4000-char-str"),
    row(huge_ids_sklearn, Ok(lambda r: finite_positive(*r, N)), "ids/sklearn/int-beyond-int64"),
    row(large_ids_surprise, Ok(lambda r: finite_positive(*r, N)), "ids/surprise/int-1e15-and-4000-char-str"),
    row(lambda c: c.sk.predict(with_value("user", None)[["user", "item"]]),
        Raises(ValueError, r"id column 'user' must not contain None/NaN"), "ids/sklearn/predict-user-None"),
    row(lambda c: c.sk.predict(frame([1, "a"], [1, 2])), Ok(lambda m: np.isfinite(m).all() or pytest.fail("nan")),
        "ids/sklearn/predict-mixed-int-str"),
    row(lambda c: c.sk.predict(XY.astype(str)),
        Warns(UserWarning, r"user id '\d+' \(str\) is not in the training data, but \d+ \(int\) is"),
        "ids/sklearn/predict-str-ids-after-int-fit"),
    row(lambda c: fit_sk(with_value("user", {"a": 1})[["user", "item"]], Y),
        Raises(TypeError, r"id column 'user' must hold hashable labels such as str or int; got the dict "
                          r"\{'a': 1\} at row 3"), "ids/sklearn/user-dict"),
    row(lambda c: c.sk.predict(with_value("item", ["i", 2])[["user", "item"]]),
        Raises(TypeError, r"id column 'item' must hold hashable labels.*got the list \['i', 2\] at row 3"),
        "ids/sklearn/predict-item-list"),
    row(lambda c: c.su.predict_dist([[int(DF.user[0]), int(DF.user[1])]], [int(DF.item[0])]),
        Raises(TypeError, r"user ids must be hashable labels such as str or int; got the list \[\d+, \d+\] at "
                          r"position 0"), "ids/surprise/predict_dist-nested-lists"),
    row(lambda c: c.su.predict(int(DF.user[0]), [int(DF.item[0])]),
        Raises(TypeError, r"item ids must be hashable labels.*got the list \[\d+\] at position 0"),
        "ids/surprise/predict-list-id"),
    row(lambda c: fit_sk(XY.assign(ctx=DF.index % 2), Y).predict(XY.assign(ctx=DF.index % 2 == 1)),
        Warns(UserWarning, r"ctx id False \(bool\) is not in the training data, but 0 \(int\) is"),
        "ids/sklearn/predict-bool-context-after-int-fit"),
    row(lambda c: fit_sk(XY.assign(user=pd.to_datetime(np.where(DF.index == 3, None, "2020-01-01"))), Y),
        Raises(ValueError, r"id column 'user' must not contain NaT; found 1 \(first at row 3\)"),
        "ids/sklearn/datetime-user-NaT"),
    row(lambda c: fit_sk(XY[["item", "user"]], Y),
        Warns(UserWarning, r"X's columns are read by position: the first is the user.*\['item', 'user'\]"),
        "ids/sklearn/columns-item-before-user"),
    row(lambda c: (c.sk_arr.predict(INDEX.astype(">i8")), c.sk_arr.predict(INDEX)),
        Ok(lambda r: np.testing.assert_array_equal(*r)), "ids/sklearn/big-endian-ids"),
    row(lambda c: (c.su.predict_dist(iter(DF.user[:3].tolist()), iter(DF.item[:3].tolist())),
                   c.su.predict_dist(DF.user[:3].tolist(), DF.item[:3].tolist())),
        Ok(lambda r: [np.testing.assert_array_equal(got, want) for got, want in zip(*r)]),
        "ids/surprise/predict_dist-iterators"),
    row(lambda c: c.su.recommend_many(pd.DataFrame({"user": DF.user[:2]})),
        Raises(ValueError, r"a DataFrame is not a list of ids .* pass one of its columns"),
        "ids/surprise/recommend_many-DataFrame"),
    row(lambda c: c.su.test(DF.head()),
        Raises(ValueError, r"test takes a testset, a list of \(uid, iid, r\) tuples, not a DataFrame"),
        "ids/surprise/test-DataFrame"),
    # ---------------------------------------------------------------- shapes ----------------------
    row(lambda c: fit_sk(XY[["user"]], Y),
        Raises(ValueError, r"X has 1 feature\(s\) \(shape=\(\d+, 1\)\) while a minimum of 2 is required"),
        "shapes/sklearn/X-1-column"),
    row(lambda c: fit_sk(DF.user.to_numpy(), Y),
        Raises(ValueError, r"X must be 2-D.*1 dimension\(s\).*Reshape your data"), "shapes/sklearn/X-1-D"),
    row(lambda c: fit_sk(INDEX[:, :, None], Y),
        Raises(ValueError, r"X must be 2-D.*3 dimension\(s\).*Reshape your data"), "shapes/sklearn/X-3-D"),
    row(lambda c: fit_sk([], []), Raises(ValueError, r"Reshape your data"), "shapes/sklearn/X-empty-list"),
    row(lambda c: fit_sk(None, Y), Raises(ValueError, r"X must be an array-like or DataFrame.*got None"),
        "shapes/sklearn/X-None"),
    row(lambda c: fit_sk(XY.assign(ctx=DF.index % 3), Y), Ok(check_fitted_on(4, factors=3)),
        "shapes/sklearn/X-3-columns-context"),
    row(lambda c: fit_sk(scipy.sparse.csr_matrix(INDEX), Y),
        Raises(TypeError, r"X must be dense id columns; sparse matrices are not supported"),
        "shapes/sklearn/X-sparse"),
    row(lambda c: fit_sk(INDEX + 1j, Y),
        Raises(ValueError, r"Complex data not supported"), "shapes/sklearn/X-complex"),
    row(lambda c: fit_sk(XY, Y.iloc[:-1]),
        Raises(ValueError, rf"X and y have inconsistent lengths: X has {N} rows, y has {N - 1}"),
        "shapes/sklearn/X-y-length-mismatch"),
    row(lambda c: fit_sk(XY, np.c_[Y, Y]),
        Raises(ValueError, rf"y must be 1-D ratings of shape \(n_samples,\), got shape \({N}, 2\)"),
        "shapes/sklearn/y-2-columns"),
    row(lambda c: fit_sk(XY, None), Raises(ValueError, r"MWGPRegressor requires y to be passed"),
        "shapes/sklearn/y-None"),
    row(lambda c: c.sk.predict(XY.assign(ctx=1)),
        Raises(ValueError, r"X has 3 features, but MWGPRegressor is expecting 2 features as input"),
        "shapes/sklearn/predict-3-columns"),
    row(lambda c: c.sk.predict(XY[["user"]]),
        Raises(ValueError, r"X has 1 features, but MWGPRegressor is expecting 2 features"),
        "shapes/sklearn/predict-1-column"),
    row(lambda c: c.sk.predict(XY.rename(columns={"user": "u"})),
        Raises(ValueError, r"X has columns \['u', 'item'\], but MWGPRegressor was fitted with columns "
                           r"\['user', 'item'\]"), "shapes/sklearn/predict-other-column-names"),
    row(lambda c: c.sk.predict(XY[["item", "user"]]),
        Raises(ValueError, r"fitted with columns \['user', 'item'\]"),
        "shapes/sklearn/predict-swapped-columns"),
    row(lambda c: (c.sk.predict(INDEX), c.sk.predict(XY)),
        Warns(UserWarning, r"^X does not have valid feature names, but MWGPRegressor was fitted with feature names$",
              lambda r: np.testing.assert_array_equal(*r)),  # read by position, as scikit-learn's estimators do
        "shapes/sklearn/predict-array-after-a-DataFrame-fit"),
    row(lambda c: (c.sk_arr.predict(XY), c.sk_arr.predict(INDEX)),
        Warns(UserWarning, r"^X has feature names, but MWGPRegressor was fitted without feature names$",
              lambda r: np.testing.assert_array_equal(*r)),
        "shapes/sklearn/predict-DataFrame-after-an-array-fit"),
    row(lambda c: c.sk.predict(np.array([1, 2])), Raises(ValueError, r"Reshape your data"),
        "shapes/sklearn/predict-1-D"),
    row(lambda c: c.sk_arr.predict(scipy.sparse.csr_matrix(INDEX)),
        Raises(TypeError, r"sparse matrices are not supported"), "shapes/sklearn/predict-sparse"),
    row(lambda c: fit_core(INDEX, Y, n_levels=(N_LEVELS[0], N_LEVELS[1] - 1)),
        Raises(ValueError, rf"`index\[:, 1\]` must lie in \[0, {N_LEVELS[1] - 1}\), got range "
                           rf"\[0, {N_LEVELS[1] - 1}\]"),
        "shapes/core/index-out-of-range"),
    row(lambda c: fit_core(np.where(np.arange(N)[:, None] == 3, -1, INDEX), Y),
        Raises(ValueError, rf"`index\[:, 0\]` must lie in \[0, {N_LEVELS[0]}\), got range \[-1, "),
        "shapes/core/index-negative"),
    row(lambda c: fit_core(INDEX.astype(float), Y),
        Raises(ValueError, r"`index` must hold integers, got dtype float64"), "shapes/core/index-float"),
    row(lambda c: fit_core(np.c_[INDEX, INDEX[:, 0]], Y),
        Raises(ValueError, rf"`index` must have shape \(n, 2\), got \({N}, 3\)"),
        "shapes/core/index-vs-n_levels"),
    row(lambda c: fit_core(INDEX, Y.to_numpy()[:-1]),
        Raises(ValueError, rf"`ratings` must have shape \({N},\) to match `index`, got \({N - 1},\)"),
        "shapes/core/ratings-length"),
    row(lambda c: MWGP(**TINY).fit(Dataset.load_from_df(DF, Reader(rating_scale=(1, 5)))),
        Raises(TypeError, r"(?i)trainset"), "shapes/surprise/fit-on-Dataset"),
    # ---------------------------------------------------------------- fit options: checkpoints, processes --
    row(lambda c: MWGP(**TINY).fit(c.ts, resume=True),
        Raises(ValueError, r"resume=True needs the checkpoint file to resume from: pass checkpoint=PATH"),
        "fit/surprise/resume-without-checkpoint"),
    row(lambda c: MWGP(**TINY).fit(c.ts, checkpoint="c.pt", checkpoint_every=0),
        Raises(ValueError, r"the epochs between checkpoints \(`checkpoint_every`\) must be an int >= 1, got 0"),
        "fit/surprise/checkpoint_every=0"),
    row(lambda c: MWGP(**TINY).fit(c.ts, checkpoint=foreign_file(), resume=True),
        Raises(ValueError, r"is not a mogp_surprise checkpoint"), "fit/surprise/resume-from-a-model-file"),
    row(lambda c: MWGP(**{**TINY, "n_inducing": 3}).fit(c.ts, checkpoint=checkpoint_file(c), resume=True),
        Raises(ValueError, r"other training data or hyper-parameters; cannot resume \(n_inducing: 4 in the "
                           r"checkpoint, 3 now\)"), "fit/surprise/resume-with-other-hyper-parameters"),
    row(lambda c: MWGP(**TINY).fit(c.ts, distributed=True),
        Raises(ValueError, r"data-parallel training needs an initialised torch.distributed process group"),
        "fit/surprise/distributed-without-process-group"),
    # ---------------------------------------------------------------- hyper-parameters -------------
    *hyper_rows(),
    row(lambda c: MWGPConfig(n_inducing=0), Raises(ValueError, r"`n_inducing` must be an int >= 1, got 0"),
        "hyper/core/MWGPConfig-n_inducing=0"),
    row(lambda c: MWGPConfig(n_inducing_points=8),
        Raises(TypeError, r"unexpected keyword argument 'n_inducing_points'"),
        "hyper/core/MWGPConfig-unknown"),
    row(lambda c: MWGPRegressor(**TINY).set_params(latent_dim=0).fit(XY, Y),
        Raises(ValueError, r"`latent_dim` must be an int >= 1, got 0"),
        "hyper/sklearn/set_params-latent_dim=0"),
    row(lambda c: fit_sk(XY, Y, n_inducing=500),
        Warns(UserWarning, TOO_MANY_INDUCING, check_fitted_on(N)),
        "hyper/sklearn/n_inducing-above-n_ratings"),
    row(lambda c: fit_su(DF, n_inducing=500),
        Warns(UserWarning, TOO_MANY_INDUCING, check_fitted_on(N)),
        "hyper/surprise/n_inducing-above-n_ratings"),
    row(lambda c: fit_core(INDEX, Y, n_inducing=500),
        Warns(UserWarning, TOO_MANY_INDUCING, check_fitted_on(N)),
        "hyper/core/n_inducing-above-n_ratings"),
    row(lambda c: fit_sk(XY, Y, lr=1e6, n_epochs=3),
        Raises(NumericalError, r"(?s)(parameters diverged|loss became).*[Ll]ower `lr`"),
        "hyper/sklearn/lr=1e6-diverges"),
    # ---------------------------------------------------------------- fold-in ---------------------
    *[row(lambda c, api=api, r=r: (c.su if api == "surprise" else c.sk).recommend("new", ratings=r),
          Raises(ValueError, pattern), f"foldin/{api}/{label}")
      for api in ADAPTERS
      for r, pattern, label in (({10 ** 6: 3.0}, r"not in the training data: \[1000000\]", "unknown-item"),
                                ({int(DF.item[0]): 9.0}, r"must lie in (the rating scale|the range of the training ratings)",
                                 "rating-outside-scale"),
                                ([(int(DF.item[0]), 3.0)] * 2, r"more than once", "duplicate-item"),
                                ({int(DF.item[0]): float("nan")}, r"must be finite", "nan-rating"),
                                ("50", r"must be a dict", "str-ratings"))],
    *[row(lambda c, api=api, u=u: copy.deepcopy(c.su if api == "surprise" else c.sk).fold_in(u, {int(DF.item[0]): 3.0}),
          Raises(ValueError, r"the user id to fold in must not be None/NaN, as in the training data"),
          f"foldin/{api}/{label}-user-id")
      for api in ADAPTERS for u, label in ((None, "None"), (float("nan"), "NaN"))],
    row(lambda c: c.su.recommend("new", ratings={int(DF.item[0]): 3.0}, kappa=-1.0),
        Raises(ValueError, r"`kappa` must be None or a number in \[0, 1e\+30\]"), "foldin/surprise/kappa<0"),
    row(lambda c: c.sk.recommend("new", n=0, ratings={int(DF.item[0]): 3.0}),
        Raises(ValueError, r"`n` must be an int >= 1"), "foldin/sklearn/n=0"),
    row(lambda c: copy.deepcopy(c.su).fold_in("new", []),
        Ok(lambda m: m.predict_dist("new", int(DF.item[0])) == m.predict_dist("other", int(DF.item[0]))
           or pytest.fail("not the cold-start answer")), "foldin/surprise/empty-ratings-cold-start"),
    *[row(lambda c, api=api: (c.su if api == "surprise" else c.sk).recommend_many("196"),
          Raises(ValueError, r"recommend_many takes a sequence of raw user ids .* got '196'; for one user, recommend"),
          f"recommend/{api}/recommend_many-of-a-string") for api in ADAPTERS],
    *[row(lambda c, api=api: (c.su if api == "surprise" else c.sk).recommend(int(DF.user[0]), exclude_rated="no"),
          Raises(ValueError, r"`exclude_rated` must be True or False, got 'no'"), f"recommend/{api}/exclude_rated-str")
      for api in ADAPTERS],
    row(lambda c: c.su.recommend(int(DF.user[0]), strategy="thompson", random_state=-1),
        Raises(ValueError, r"`random_state` must be None, an int >= 0 or a numpy Generator or RandomState, got -1"),
        "recommend/surprise/random_state<0"),
    row(lambda c: c.su.predict_dist(int(DF.user[0]), int(DF.item[0]), include_noise="no"),
        Raises(ValueError, r"`include_noise` must be True or False, got 'no'"), "predict/surprise/include_noise-str"),
    row(lambda c: c.sk.predict_dist(XY, include_noise="no"),
        Raises(ValueError, r"`include_noise` must be True or False, got 'no'"), "predict/sklearn/include_noise-str"),
    # ---------------------------------------------------------------- prediction ------------------
    row(lambda c: MWGPRegressor(**TINY).predict(XY), Raises(SklearnNotFittedError, r"not fitted yet"),
        "predict/sklearn/predict-before-fit"),
    row(lambda c: MWGPRegressor(**TINY).predict(XY, return_std=True),
        Raises(SklearnNotFittedError, r"not fitted yet"), "predict/sklearn/return_std-before-fit"),
    row(lambda c: MWGPRegressor(**TINY).predict_dist(XY), Raises(SklearnNotFittedError, r"not fitted yet"),
        "predict/sklearn/predict_dist-before-fit"),
    row(lambda c: MWGP(**TINY).predict_dist(1, 2),
        Raises(NotFittedError, r"This MWGP instance is not fitted yet; call `fit` first"),
        "predict/surprise/predict_dist-before-fit"),
    row(lambda c: MWGP(**TINY).test([(1, 2, 3.0)]),
        Raises(NotFittedError, r"This MWGP instance is not fitted yet"), "predict/surprise/test-before-fit"),
    row(lambda c: MWGP(**TINY).estimate(0, 0),
        Raises(NotFittedError, r"This MWGP instance is not fitted yet"),
        "predict/surprise/estimate-before-fit"),
    row(lambda c: MWGP(**TINY).predict(1, 2),
        Raises(NotFittedError, r"not fitted yet"), "predict/surprise/predict-before-fit"),
    row(lambda c: unseen_sklearn(c.sk_trained), Ok(check_cold_start),
    "predict/sklearn/unseen-ids-cold-start"),
    row(lambda c: unseen_surprise(c.su_trained), Ok(check_cold_start),
    "predict/surprise/unseen-ids-cold-start"),
    row(lambda c: sklearn_empty(c.sk, XY.iloc[:0]), Ok(check_empty), "predict/sklearn/0-rows-DataFrame"),
    row(lambda c: sklearn_empty(c.sk_arr, np.empty((0, 2), dtype=np.int64)), Ok(check_empty),
        "predict/sklearn/0-rows-ndarray"),
    row(lambda c: surprise_empty(c.su), Ok(check_empty), "predict/surprise/0-rows"),
    row(lambda c: c.su.predict_dist([0, 1], [0]),
        Raises(ValueError, r"`uid` and `iid` must have the same length, got 2 and 1"),
        "predict/surprise/predict_dist-length-mismatch"),
    row(lambda c: c.su.predict_dist([0, 1]),
        Raises(ValueError, r"`predict_dist` takes a testset of \(uid, iid\[, r\]\) tuples; got the entry 0\. Pass "
                           r"`iid` for single ids"),
        "predict/surprise/predict_dist-ids-without-iid"),
    row(lambda c: c.su.predict_dist([(0, 0, 3.0), (0, 0, 3.0, 1)]),
        Raises(ValueError, r"`predict_dist` takes a testset of \(uid, iid\[, r\]\) tuples; got the entry "
                           r"\(0, 0, 3\.0, 1\)\. MWGP \(Surprise\) models \(user, item\) pairs only; for further id "
                           r"columns such as a context, use MWGPRegressor"),
        "predict/surprise/predict_dist-context-tuples"),
    row(lambda c: c.su.test([(0, 0, 3.0, 1)]),
        Raises(ValueError, r"`test` takes a testset of \(uid, iid, r\) tuples; got the entry \(0, 0, 3\.0, 1\)\. "
                           r"MWGP \(Surprise\) models \(user, item\) pairs only"),
        "predict/surprise/test-context-tuples"),
    *(row(call, Raises(ValueError, rf"^{what} needs a \(user, item\) model; this one has 3 id columns$"),
          f"predict/sklearn/{name}-context-model")
      for name, what, call in [
          ("recommend", "recommend", lambda c: c.sk_context.recommend(int(DF.user[0]))),
          ("recommend-ratings", "recommend", lambda c: c.sk_context.recommend("new", ratings={int(DF.item[0]): 3.0})),
          ("recommend_many", "recommend", lambda c: c.sk_context.recommend_many([int(DF.user[0])])),
          ("ask", "ask", lambda c: c.sk_context.ask(int(DF.user[0]))),
          ("fold_in", "fold-in", lambda c: c.sk_context.fold_in("new", {int(DF.item[0]): 3.0}))]),
    row(lambda c: c.su.test([(0, 0)]),
        Raises(ValueError, r"`test` takes a testset of \(uid, iid, r\) tuples; got the entry \(0, 0\)\.$"),
        "predict/surprise/test-pairs-without-rating"),
    row(lambda c: c.su.estimate(10 ** 6, 0),
        Raises(ValueError, r"`index\[0\]` must be an integer in \[-1, \d+\) \(-1 = unseen in training\), got "
                           r"1000000"), "predict/surprise/estimate-inner-id-out-of-range"),
    row(lambda c: c.sk.posterior_.predict(np.array([[-2, 0]])),
        Raises(ValueError, r"`index\[:, 0\]` must lie in \[-1, \d+\) \(-1 = unseen in training\), got range "
                           r"\[-2, -2\]"), "predict/core/posterior-index-below-minus-1"),
    row(lambda c: c.sk.posterior_.predict(np.array([[0, c.sk.posterior_.n_levels[1]]])),
        Raises(ValueError, r"`index\[:, 1\]` must lie in \[-1, (\d+)\).*got range \[\1, \1\]"),
        "predict/core/posterior-index-equal-n_levels"),
    row(lambda c: c.sk.posterior_.predict(np.array([[0.0, 1.0]])),
        Raises(ValueError, r"`index` must hold integers, got dtype float64"),
        "predict/core/posterior-index-float"),
    row(lambda c: c.sk.posterior_.predict(np.array([0, 1])),
        Raises(ValueError, r"`index` must have shape \(n, 2\), got \(2,\)"),
        "predict/core/posterior-index-1-D"),
    row(lambda c: c.sk.posterior_.predict(np.zeros((1, 2), dtype=np.int64), chunk_size=0),
        Raises(ValueError, r"`chunk_size` must be an int >= 1, got 0"),
        "predict/core/posterior-chunk_size=0"),
    # ---------------------------------------------------------------- persistence-independent -----
    row(lambda c: pickled(c.sk).predict(XY.assign(ctx=1)),
        Raises(ValueError, r"expecting 2 features"), "persist/sklearn/unpickled-predict-3-columns"),
    row(lambda c: pickled(c.sk).predict(XY.rename(columns={"user": "u"})),
        Raises(ValueError, r"fitted with columns \['user', 'item'\]"),
        "persist/sklearn/unpickled-other-names"),
    row(lambda c: unseen_sklearn(pickled(c.sk_trained)), Ok(check_cold_start),
        "persist/sklearn/unpickled-unseen-ids"),
    row(lambda c: unseen_surprise(pickled(c.su_trained)), Ok(check_cold_start),
        "persist/surprise/unpickled-unseen-ids"),
    row(lambda c: pickled(c.su).predict_dist([0, 1], [0]),
        Raises(ValueError, r"`uid` and `iid` must have the same length"),
        "persist/surprise/unpickled-length-mismatch"),
    row(lambda c: posterior_roundtrip(c).predict(np.array([[-2, 0]])),
        Raises(ValueError, r"`index\[:, 0\]` must lie in \[-1, "),
        "persist/core/state_dict-roundtrip-index-below-minus-1"),
    row(lambda c: MWGPPosterior.from_state_dict(
            {**(state := c.sk.posterior_.state_dict()), "gp": {k: v for k, v in state["gp"].items() if k != "w"}}),
        Raises(ValueError, r"posterior state is missing the entries \['gp.w'\]"),
        "persist/core/state_dict-missing-entry"),
]


@pytest.mark.parametrize("run, outcome", TABLE)
def test_bad_input(ctx: Ctx, run: Callable[[Ctx], Any], outcome: Raises | Warns | Ok) -> None:
    outcome.check(run, ctx)


def test_table_is_large_and_ids_are_unique() -> None:
    ids = [p.id for p in TABLE]
    assert len(ids) >= 45 and len(set(ids)) == len(ids)
