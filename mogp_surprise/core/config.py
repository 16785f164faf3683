"""The hyper-parameters of MW-GP, defined once and shared by every adapter."""
from __future__ import annotations

import dataclasses
import math
import numbers
import re
import types
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from .seeding import valid_random_state

_DTYPES, _DEVICES = {"float32": torch.float32, "float64": torch.float64}, ("auto", "cpu", "cuda")
_CHOICES = {"lr_schedule": ("cosine", "constant"), "init": ("pca", "random"),
            "noise": ("heteroscedastic", "homoscedastic"), "mf_posterior": ("auto", "laplace", "variational"),
            "dtype": tuple(_DTYPES)}
#: the paper's model (Yang & Buettner, 2021): one scalar noise variance, no implicit feedback, no bilinear or
#: neighbourhood term, and the embedding prior tuned for it; ``MWGP(**PAPER_MODEL)`` reproduces the paper's figures.
#: Read-only: a change would alter it for the whole process (``{**PAPER_MODEL, "n_epochs": 3}`` for a variant)
PAPER_MODEL = types.MappingProxyType({
    "noise": "homoscedastic", "implicit": False, "mf_rank": 0, "neighbourhood": False, "embedding_uncertainty": False,
    "embedding_reg": 3.0, "bias_reg": 1.0, "n_epochs": 30, "early_stopping": False})
#: batch_size="auto": the MovieLens-tuned batch, reduced on small data to keep >= MIN_STEPS steps
AUTO_BATCH, MIN_AUTO_BATCH, MIN_STEPS = 8192, 256, 360
#: early_stopping="auto" chooses the number of epochs on a validation split from EARLY_STOPPING_MIN ratings (a split
#: of at least 100) to below EARLY_STOPPING_BELOW. On fewer the choice follows the noise of a few held-out ratings
#: (16 of 160: a held-out MSE uncertain by a third) and trains on 90 % of them: generated ratings, 200 over 12
#: seeds 1.0620 -> 1.0582 without it (BaselineOnly 1.0582), 600 over 8 seeds 1.0964 -> 1.0912
EARLY_STOPPING_MIN, EARLY_STOPPING_BELOW = 1000, 200_000
#: ... and also, from EARLY_STOPPING_MIN ratings to where the automatic batch exceeds
#: SEARCH_BATCH (about 37,000 ratings with 20 epochs), the step size lr * sqrt(batch / AUTO_BATCH) and a bilinear
#: prior MF_REG_SEARCH times weaker (MWGPConfig.search_space; on ML-100K's 80,000 ratings the step size gained
#: 0.0003 RMSE for a third training run). From there to AUTO_BATCH that step size alone, without a search (ML-100K
#: 5-fold, batch 4,445: lr 0.01 / 0.012 / 0.014 / 0.017 / 0.02 / 0.03 gave RMSE 0.8773 / 0.8768 / 0.8766 / 0.8769 /
#: 0.8774 / 0.8802; the rule's 0.0147 sits at the best; ML-1M's batch of 8,192 keeps lr: 0.014 gave the same RMSE
#: there with a worse NLL)
SEARCH_BATCH, MF_REG_SEARCH = 2048, 5.0
#: neighbourhood="auto" switches the neighbourhood term on for (user, item) data of at least NEIGHBOURHOOD_MIN ratings
#: (below, generated data of 16K-36K ratings lost 0.2-6 % RMSE with it and 10 % samples of ML-100K gained nothing;
#: ML-100K's 80K gain 0.3 %) and at most NEIGHBOURHOOD_BUDGET ratings x items (its similarity costs about that many
#: multiply-adds before training: 9 s for ML-1M's 1M x 3,706 = 3.7e9); where early stopping is on, only where the
#: ratings fill at least NEIGHBOURHOOD_DENSITY of the (users x items) matrix (a rating's item has then about one of
#: its 30 neighbours rated by the user: ML-100K's 5 % gains 0.2 % RMSE; uniform samples of ML-1M, one 80/20 split:
#: 10 / 15 / 20 % of its ratings (0.4-0.8 %) gained nothing, 0.9349 / 0.9087 / 0.9036 with and without, for half
#: again the fit time, and a 25 % sample with early stopping 0.0004; a shop-shaped generated set 0.03 %: nothing)
NEIGHBOURHOOD_MIN, NEIGHBOURHOOD_BUDGET, NEIGHBOURHOOD_DENSITY = 50_000, 2 ** 32, 1 / 32
#: n_epochs="auto": the schedule's epochs; fewer where the neighbourhood term is on and early stopping off (one ML-1M
#: split with the term: 10 / 14 / 20 epochs RMSE 0.8232 / 0.8228 / 0.8231; docs/history.md)
AUTO_EPOCHS, NEIGHBOURHOOD_EPOCHS = 20, 12
#: mf_reg="auto": the bilinear factors' prior precision for each posterior (the variational one pays for the
#: factors' variance in its expected likelihood, so a weaker prior fits best: ML-100K 5-fold 25 / 50 gave 0.8774 /
#: 0.8854; the MAP factors lose most of their components under a prior of 80; docs/history.md)
MF_REG = {"laplace": 50.0, "variational": 25.0}


@dataclass(frozen=True)
class MWGPConfig:
    """Hyper-parameters of the MW-GP model and its trainer.

    Parameters
    ----------
    n_inducing : int, default=128
        Number m of paired inducing points (z^A_l, z^B_l), cost O(m^2) per rating; at most the training ratings
        (the default is quietly limited to them, a number you set with a warning).
    latent_dim : int, default=8
        Dimension r of each user and item embedding.
    n_epochs : int or "auto", default="auto"
        Passes over the training ratings (with early stopping: the most that are tried). "auto": 20, or
        12 where the neighbourhood term is on and early stopping off (on MovieLens 1M the model with the term
        is as accurate after 12 epochs as after 20; see :meth:`for_data`).
    early_stopping : bool or "auto", default="auto"
        Choose the number of epochs on an internal validation split: train on a seeded
        ``1 - validation_fraction`` of the ratings over the whole schedule, recording the RMSE of the
        held-out ones after every epoch, then train on all ratings with the same learning-rate
        schedule, stopped after the best number of epochs. It prevents over-fitting on small data
        at the cost of a second training run. Where ``batch_size="auto"`` is 2048 or less (N * n_epochs up to
        737,280: to about 37,000 ratings at 20 epochs) it also chooses the peak lr, ``lr`` or ``lr * sqrt(batch/8192)``,
        and the bilinear prior, ``mf_reg`` or ``mf_reg / 5`` (four runs on the split; see
        :meth:`search_space`). "auto": on from 1,000 to 200,000 ratings (where 20 epochs can over-fit), off above
        and below (a validation split of fewer than 100 ratings chooses by chance).
    validation_fraction : float in (0, 1), default=0.1
        Share of the ratings held out to choose the number of epochs (with early stopping). A pair rated
        more than once is held out or kept whole (:func:`~.trainer.validation_split`).
    batch_size : int or "auto", default="auto"
        Ratings per minibatch (the data term of the ELBO is scaled by N / batch). "auto" uses
        8192, reduced on small data so that training takes at least 360 optimisation steps:
        ``min(8192, max(256, ceil(N * n_epochs / 360)))``; see :meth:`resolved_batch_size`.
    lr : float, default=0.02
        Peak Adam learning rate at a minibatch of 8192. With ``batch_size="auto"`` below that: from about
        37,000 to 147,000 ratings ``lr * sqrt(batch / 8192)`` (Adam's square-root rule), and on smaller data
        with early stopping both ``lr`` and that rate are tried (:meth:`search_space`).
    lr_schedule : {"cosine", "constant"}, default="cosine"
        Learning-rate schedule over all steps (cosine decays to ``lr / 20``).
    embedding_reg : float, default=10.0
        Precision of the Gaussian prior N(0, 1/embedding_reg) on every embedding and implicit-factor
        entry (MAP; an L2 penalty of ``embedding_reg / 2 * ||A||^2`` on the whole log joint).
    bias_reg : float or "auto", default="auto"
        Precision of the Gaussian prior on user and item biases (in standardised rating units).
        "auto": one precision per factor estimated from the training data (empirical Bayes: 1 / the
        variance of the levels' true biases, estimated by moments as for the biases' closed-form
        start), set before training and saved with the model; little data then get the shrinkage
        that their spread of biases supports (see :mod:`~mogp_surprise.core.terms.bias`).
    use_biases : bool, default=True
        Learn a global mean plus user and item biases as the GP mean function; otherwise only a learned constant.
    noise : {"heteroscedastic", "homoscedastic"}, default="heteroscedastic"
        "heteroscedastic": every user, item (and context level) has its own log-noise offset,
        sigma^2_ui = sigma^2 exp(s_u + t_i), with a learned Gaussian prior and a variational
        posterior; raters who are consistent and items that are not divisive get narrower
        predictive intervals. "homoscedastic": one noise variance for every rating (the paper).
    implicit : bool, default=True
        SVD++-style implicit feedback: a user's GP input is their embedding plus a normalised sum of
        implicit factors of the items they rated, and likewise for items. ``False`` as in the
        paper. ``MWGP(**PAPER_MODEL)`` (``PAPER_MODEL = {"noise": "homoscedastic", "implicit": False,
        "mf_rank": 0, "neighbourhood": False, "embedding_uncertainty": False, "embedding_reg": 3.0,
        "bias_reg": 1.0, "n_epochs": 30, "early_stopping": False}``, importable from ``mogp_surprise``) is the
        paper's model.
    mf_rank : int, default=16
        Rank k of a bilinear term p_u . q_i in the GP's mean function: users and items carry
        k-dimensional factors of their own (prior N(0, 1 / mf_reg); p_u start at 0, q_i at N(0, 0.1^2)),
        so that the model contains biased matrix factorisation and the GP fits what it misses.
        With ``implicit`` the factors get SVD++-style implicit feedback too. Their Laplace
        variance enters the predictive variance with ``embedding_uncertainty``, and an unseen user
        or item is integrated over the learned factors' spread. 0: no such term (the paper).
        Seeded ML-1M 80/20 split: RMSE 0.8573 without, 0.8276 with (ML-100K 0.9096 -> 0.8834).
    mf_reg : float or "auto", default="auto"
        Precision of the Gaussian prior N(0, 1 / mf_reg) on every entry of the bilinear factors
        and their implicit factors. "auto": 50 with the Laplace posterior, 25 with the variational one
        (``MF_REG``; on small data early stopping's search also tries a 5 times weaker one).
    mf_posterior : {"auto", "laplace", "variational"}, default="auto"
        How the bilinear factors' uncertainty is learned. ``"laplace"``: MAP factors with a diagonal
        Laplace variance after training. ``"variational"``: a mean-field Gaussian posterior over every
        entry in the ELBO (the fit accounts for the factors' variance and its KL to the prior; the
        variances are set in closed form after every epoch); with early stopping the noise is then scaled
        to early stopping's held-out ratings (:mod:`~mogp_surprise.core.validation`: the learned noise
        already holds the factors' variance). "auto": variational where early stopping is on (from 1,000
        to 200,000 ratings), Laplace elsewhere. Measured with the defaults otherwise: ML-100K 5-fold RMSE 0.8784
        -> 0.8774, NLL 1.2562 -> 1.2534; the battery of generated data (``benchmarks/regimes.py``) 2-6 %
        lower RMSE in most cases, 90 % coverage 0.88-0.93; ML-1M (no early stopping) 0.8263 against
        Laplace's 0.8243, so Laplace there.
    embedding_uncertainty : bool, default=True
        Add the estimation uncertainty of a known user's and item's embedding, bilinear factor and bias (a
        diagonal Laplace posterior, propagated linearly) to their predictions' variance; users and items with
        few ratings get wider intervals. ``False``: the GP's variance at the point estimates (the paper).
    neighbourhood : bool or "auto", default="auto"
        Koren's global neighbourhood model as a term of the mean: what the user rated among the item's 30
        most similar items, with learned weights (:mod:`~mogp_surprise.core.terms.neighbourhood`). 5-fold
        ML-1M: RMSE 0.8289 -> 0.8243, NLL 1.1954 -> 1.1889 (12 epochs with it, 20 without). Its similarity
        costs about ratings x items multiply-adds before training (2.3-2.7 s on ML-1M, by dense products) and its
        inputs 120 bytes per rating, so "auto" switches it on for (user, item) data with ratings x items up to
        2^32 (ML-1M: 3.7e9) and off above (10M ratings over 10,000 items: 1e11); and from 50,000 ratings: on
        less, generated data lost 0.2-6 % RMSE with it (they have no structure beyond low rank) and 10 % samples
        of ML-100K gained nothing; below 200,000 ratings, where early stopping is on, only where the ratings fill
        at least 1/32 of the users x items (sparser samples of ML-1M gained nothing for half again the fit time).
        ``True`` switches it on at any size.
    extra_terms : tuple of str, default=()
        Model terms defined outside the library (subclasses of ``mogp_surprise.core.terms.Term``
        registered with ``register_term``), by name, added to the built-in ones; see "how to add a model
        term" in docs/architecture.md. A model that uses them saves their names and fitted values; it loads
        once their module is imported.
    kl_weight : float, default=1.0
        Weight of KL(q(v) || p(v)). 1.0 gives the correct ELBO; larger values regularise more
        (the paper's code implicitly used N / batch_size).
    init : {"pca", "random"}, default="pca"
        Embedding initialisation: scaled truncated SVD of the centred rating matrix, or N(0, 0.5^2).
    jitter : float, default=1e-5
        Added to the diagonal of K_mm (standardised units). Escalated x10 up to three times,
        with a warning, when a Cholesky factorisation fails.
    chunk_size : int, default=65536
        Pairs per chunk at prediction time (bounds memory).
    random_state : int, numpy.random.Generator, numpy.random.RandomState or None, default=None
        Seeds initialisation and shuffling. None: numpy's global random state, as scikit-learn and Surprise.
    device : {"auto", "cpu", "cuda"} or torch.device, default="auto"
        "auto" uses CUDA when available, else the CPU.
    dtype : {"float32", "float64"}, default="float32"
        Training dtype; the fitted model stays float64 where float32 would serve it less exactly (core.precision).
    verbose : bool, default=False
        Show a tqdm progress bar while training.
    """

    n_inducing: int = 128
    latent_dim: int = 8
    n_epochs: Any = "auto"
    early_stopping: Any = "auto"
    validation_fraction: float = 0.1
    batch_size: Any = "auto"
    lr: float = 0.02
    lr_schedule: str = "cosine"
    embedding_reg: float = 10.0
    bias_reg: Any = "auto"
    use_biases: bool = True
    noise: str = "heteroscedastic"
    implicit: bool = True
    mf_rank: int = 16
    mf_reg: Any = "auto"
    mf_posterior: str = "auto"
    embedding_uncertainty: bool = True
    neighbourhood: Any = "auto"
    extra_terms: tuple = ()
    kl_weight: float = 1.0
    init: str = "pca"
    jitter: float = 1e-5
    chunk_size: int = 65536
    random_state: Any = None
    device: Any = "auto"
    dtype: str = "float32"
    verbose: bool = False

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {f.name: f.default for f in fields(cls)}

    def replace(self, **changes: Any) -> "MWGPConfig":
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        """Check every value; raise ``ValueError``/``TypeError`` naming the parameter."""
        for name in ("n_inducing", "latent_dim", "chunk_size"):
            _check_int(name, getattr(self, name), minimum=1)
        if not _is_auto(self.n_epochs):
            _check_int("n_epochs", self.n_epochs, minimum=1, also='or "auto"')
        _check_int("mf_rank", self.mf_rank, minimum=0)
        if not _is_auto(self.batch_size):
            _check_int("batch_size", self.batch_size, minimum=1, also='or "auto"')
        for name in ("lr", "jitter"):
            _check_float(name, getattr(self, name), positive=True)
        for name in ("embedding_reg", "kl_weight"):
            _check_float(name, getattr(self, name), positive=False)
        if not _is_auto(self.mf_reg):
            _check_float("mf_reg", self.mf_reg, positive=False, also='or "auto"')
        if not _is_auto(self.bias_reg):
            _check_float("bias_reg", self.bias_reg, positive=False, also='or "auto"')
        for name in ("early_stopping", "neighbourhood"):
            if not (_is_auto(getattr(self, name)) or isinstance(getattr(self, name), (bool, np.bool_))):
                raise ValueError(f"`{name}` must be True, False or \"auto\", got {getattr(self, name)!r}")
        _check_float("validation_fraction", self.validation_fraction, positive=True)
        if not self.validation_fraction < 1:
            raise ValueError(f"`validation_fraction` must lie in (0, 1), got {self.validation_fraction!r}")
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"`{name}` must be one of {choices}, got {getattr(self, name)!r}")
        for name in ("use_biases", "implicit", "embedding_uncertainty", "verbose"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"`{name}` must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.extra_terms, (tuple, list)) or not all(
                isinstance(name, str) and name for name in self.extra_terms):
            raise TypeError(f"`extra_terms` must be a tuple of registered model-term names (str), got "
                            f"{self.extra_terms!r}")
        if len(set(self.extra_terms)) != len(self.extra_terms):
            raise ValueError(f"`extra_terms` names a term twice: {self.extra_terms!r}")
        if not valid_random_state(self.random_state):
            raise ValueError(
                "`random_state` must be None, a non-negative int, a numpy.random.Generator or RandomState, "
                f"got {self.random_state!r}")
        _check_device(self.device)

    # -- derived values, computed on demand (never stored) -------------------------------
    def for_data(self, n_ratings: int, n_levels: tuple[int, ...]) -> "MWGPConfig":
        """This config with the "auto" values that depend on the data's shape made concrete, as training uses
        it: ``neighbourhood`` (on for (user, item) data of at least ``NEIGHBOURHOOD_MIN`` ratings and ratings x items
        up to ``NEIGHBOURHOOD_BUDGET``, with early stopping only where the ratings fill ``NEIGHBOURHOOD_DENSITY`` of
        the users x items) and
        ``n_epochs`` (``NEIGHBOURHOOD_EPOCHS`` where that term is on without early stopping, else
        ``AUTO_EPOCHS``), ``mf_posterior`` (variational where early stopping is on, else Laplace) and ``mf_reg``
        (``MF_REG`` of that posterior)."""
        term = self.neighbourhood
        if "neighbourhood" in self.extra_terms:  # how it was switched on before it was built in
            term = True
        elif _is_auto(term):
            term = (len(n_levels) == 2 and n_levels[1] > 1 and NEIGHBOURHOOD_MIN <= n_ratings
                    and n_ratings * n_levels[1] <= NEIGHBOURHOOD_BUDGET
                    and (not self.uses_early_stopping(n_ratings)
                         or n_ratings >= NEIGHBOURHOOD_DENSITY * n_levels[0] * n_levels[1]))
        epochs = self.n_epochs
        if _is_auto(epochs):
            epochs = NEIGHBOURHOOD_EPOCHS if term and not self.uses_early_stopping(n_ratings) else AUTO_EPOCHS
        posterior, prior = self.bilinear(n_ratings)
        return self.replace(neighbourhood=bool(term), n_epochs=int(epochs), mf_posterior=posterior, mf_reg=prior)

    def bilinear(self, n_ratings: int | None = None) -> tuple[str, float]:
        """The bilinear factors' posterior and prior precision for ``n_ratings`` training ratings: "auto" is the
        variational posterior where early stopping is on, else (and without ``n_ratings``: a model built from a
        config that :meth:`for_data` did not make concrete) Laplace; ``mf_reg="auto"`` is that posterior's
        ``MF_REG``."""
        posterior = self.mf_posterior
        if _is_auto(posterior):
            early = n_ratings is not None and self.uses_early_stopping(n_ratings)
            posterior = "variational" if early else "laplace"
        return posterior, MF_REG[posterior] if _is_auto(self.mf_reg) else float(self.mf_reg)

    def resolved_batch_size(self, n_ratings: int) -> int:
        """The minibatch size used for ``n_ratings`` training ratings (never more than ``n_ratings``)."""
        if _is_auto(self.batch_size):
            epochs = AUTO_EPOCHS if _is_auto(self.n_epochs) else self.n_epochs
            batch = min(AUTO_BATCH, max(MIN_AUTO_BATCH, math.ceil(n_ratings * epochs / MIN_STEPS)))
        else:
            batch = int(self.batch_size)
        return max(1, min(batch, n_ratings))

    def search_space(self, n_ratings: int) -> list[dict[str, float]]:
        """The settings of ``lr`` and ``mf_reg`` that early stopping's search tries for ``n_ratings`` ratings
        (the first: this config's own, which training uses without early stopping). Where the automatic batch is
        at most 2048 (to about 37,000 ratings at 20 epochs, 245,000 at 3): the peak learning rate ``lr`` and
        ``lr * sqrt(batch / 8192)`` (Adam's square-root rule for the smaller batch's noisier steps), each with
        the bilinear factors' prior ``mf_reg`` and one 5 times weaker (nearly noise-free data need a larger
        product p_u . q_i than MovieLens). Else only this config's own, whose step size is that square-root
        rule's where the automatic batch lies between 2048 and 8192 (about 37,000 to 147,000 ratings at 20
        epochs, e.g. ML-100K's 80,000; measured at ``SEARCH_BATCH``)."""
        batch = self.resolved_batch_size(n_ratings)
        scaled = float(self.lr) * math.sqrt(batch / AUTO_BATCH)
        given = {"lr": scaled if _is_auto(self.batch_size) and batch > SEARCH_BATCH else float(self.lr),
                 "mf_reg": self.bilinear(n_ratings)[1]}
        if not (_is_auto(self.batch_size) and batch <= SEARCH_BATCH and n_ratings >= EARLY_STOPPING_MIN):
            return [given]
        rates = (given["lr"], scaled)
        priors = (given["mf_reg"], given["mf_reg"] / MF_REG_SEARCH) if self.mf_rank > 0 else (given["mf_reg"],)
        return [{"lr": lr, "mf_reg": reg} for reg in priors for lr in rates]

    def uses_early_stopping(self, n_ratings: int) -> bool:
        """Whether the number of epochs is chosen on a validation split for ``n_ratings`` ratings."""
        if _is_auto(self.early_stopping):
            return EARLY_STOPPING_MIN <= n_ratings < EARLY_STOPPING_BELOW
        return bool(self.early_stopping) and n_ratings >= 2

    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    def torch_device(self) -> torch.device:
        """Resolve ``device``; 'cuda' without CUDA is an error, 'auto' falls back to the CPU."""
        return resolve_device(self.device)


def _check_device(device: Any) -> str:
    """``device``'s name if it is 'auto', 'cpu', 'cuda', 'cuda:N' or a torch.device of them; else ValueError."""
    name = str(device) if isinstance(device, torch.device) else device
    if not isinstance(name, str) or not (name in _DEVICES or re.fullmatch(r"(cuda|cpu):\d+", name)):
        raise ValueError(f"`device` must be one of {_DEVICES}, 'cuda:N' or a torch.device of the CPU or CUDA, "
                         f"got {device!r}")
    return name


def resolve_device(device: Any) -> torch.device:
    """The torch.device that ``device`` (a config's ``device``, or ``load``'s) names; 'cuda' without CUDA is an
    error that says what to use instead, 'auto' falls back to the CPU."""
    name = _check_device(device)
    name = "cpu" if name.startswith("cpu:") else name  # torch.device("cpu", 0): the one CPU
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"`device`={name!r} was requested but CUDA is not available in this PyTorch "
                         f"build ({torch.__version__}); use device='cpu' or device='auto'")
    return torch.device(name)


def resolve_dtype(dtype: Any) -> torch.dtype:
    """The floating torch dtype that ``dtype`` ("float32", "float64" or such a torch dtype) names."""
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    raise ValueError(f"`dtype` must be one of {tuple(_DTYPES)} or such a torch dtype, got {dtype!r}")


def _check_int(name: str, value: Any, minimum: int, also: str = "") -> None:
    rule = f"an int >= {minimum}" + (f" {also}" if also else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be {rule}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"`{name}` must be {rule}, got {value!r}")


def _check_float(name: str, value: Any, positive: bool, also: str = "") -> None:
    rule = ("> 0" if positive else ">= 0") + (f" {also}" if also else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be a finite real number {rule}, got {value!r}")
    if not np.isfinite(value) or (value <= 0 if positive else value < 0):
        raise ValueError(f"`{name}` must be a finite real number {rule}, got {value!r}")


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == "auto"
