"""Fit MW-GP by maximising the minibatch ELBO with Adam."""
from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from . import checkpoint as ckpt
from .checkpoint import Checkpointing
from .calibration import centred_global_mean
from .config import EARLY_STOPPING_MIN, MWGPConfig
from .seeding import seeded_generator
from .distributed import DataParallel, touched_rows
from .errors import NumericalError, caller_stacklevel, validate_training_data
from .initialization import initialise
from .kernels import Workspace
from .laplace import laplace_variances, noise_scaled
from .model import MWGPModule
from .objective import elbo, log_prior
from .optim import TrainingOptimizer, implicit_update_interval, uses_sparse_rows
from .posterior import MWGPPosterior
from .rows import Batch, distinct_index_rows
from .validation import (HeldOutNoise, calibrates_noise, known_rows, leave_one_out_noise_scale, noise_calibration,
                         recorded_calibration, run_calibration, validation_scores, with_posterior_variances)

logger = logging.getLogger(__name__)


@dataclass
class FitResult:
    """What :func:`fit_mwgp` returns."""

    posterior: MWGPPosterior
    # per epoch: -(minibatch ELBO averaged over the epoch + log prior at its end) / n_ratings
    loss_history: list[float] = field(default_factory=list)
    epoch_times: list[float] = field(default_factory=list)  # wall-clock seconds of each epoch's optimisation
    fit_time: float = 0.0
    n_data: int = 0
    # with early stopping: RMSE (standardised units) on the internal validation ratings after each epoch
    validation_rmse: list[float] = field(default_factory=list)
    n_epochs: int = 0  # epochs of the final training run (chosen by early stopping when it is on)
    # the final run's lr and mf_reg: the config's, or those early stopping's search chose (MWGPConfig.search_space)
    chosen: dict[str, float] = field(default_factory=dict)
    # with early stopping: each setting of the search with its validation curve, in MWGPConfig.search_space order
    searched: list[tuple[dict[str, float], list[float]]] = field(default_factory=list)
    # the factor on the final fit's noise: with early stopping and a variational posterior the chosen run's at its
    # best epoch; without early stopping (MAP factors, from 1,000 ratings) from the training ratings' leave-one-out
    # errors (core/validation.py)
    noise_scale: float = 1.0
    # and the factor on its log-noise offsets (core/validation.py: noise_calibration)
    noise_shrink: float = 1.0


def fit_mwgp(index: np.ndarray, ratings: np.ndarray, n_levels: tuple[int, ...],
             config: MWGPConfig | None = None, *, parallel: DataParallel | None = None,
             checkpointing: Checkpointing | None = None) -> FitResult:
    """Train MW-GP on observed tuples.

    Parameters
    ----------
    index : int ndarray of shape (n_ratings, F)
        Inner indices of each factor (F = 2: user, item), in ``[0, n_levels[f])``.
    ratings : float ndarray of shape (n_ratings,)
    n_levels : tuple of int, length F
        Number of levels of each factor.
    config : MWGPConfig, optional
    parallel : DataParallel, optional
        Train data-parallel on the processes of the current ``torch.distributed`` process group
        (:mod:`.distributed`); every process passes the same data and config and gets the same model.
    checkpointing : Checkpointing, optional
        Save the training state every few epochs, and resume from it (:mod:`.checkpoint`); with
        ``parallel`` only rank 0 writes.

    Returns
    -------
    FitResult
        The fitted posterior and the per-epoch loss history.
    """
    config = MWGPConfig() if config is None else config
    if not isinstance(config, MWGPConfig):
        raise TypeError(f"`config` must be an MWGPConfig (e.g. MWGPConfig(**params)), got {type(config).__name__}")
    index, ratings = np.asarray(index), np.asarray(ratings)
    n_levels = validate_training_data(index, ratings, tuple(n_levels), config.dtype)
    device, dtype = config.torch_device(), config.torch_dtype()
    started = time.perf_counter()
    gen = seeded_generator(config.random_state)

    if config.n_inducing > index.shape[0]:  # quietly at the default: the user chose no number to warn about
        if config.n_inducing != MWGPConfig.n_inducing:
            warnings.warn(f"n_inducing={config.n_inducing} exceeds the number of training ratings ({index.shape[0]}); "
                          f"using {index.shape[0]} inducing points", UserWarning, stacklevel=caller_stacklevel())
        config = config.replace(n_inducing=index.shape[0])
    config = config.for_data(index.shape[0], n_levels)
    ratings = ratings.astype(np.float64)
    rating_mean = float(ratings.mean())
    rating_std = float(ratings.std())
    if not rating_std > 1e-12:  # all ratings equal: keep the scale, let the noise shrink
        rating_std = 1.0
    n = index.shape[0]
    idx_t = torch.from_numpy(np.array(index, dtype=np.int64))  # a copy: inputs may be read-only views
    y_t = torch.as_tensor((ratings - rating_mean) / rating_std, dtype=dtype)
    batch = config.resolved_batch_size(n)

    if parallel is not None and parallel.world_size > 1:
        parallel.check_same_data(idx_t, y_t, n_levels, config.random_state)
    else:
        parallel = None
    saver = None
    if checkpointing is not None:
        saver = _Saver(checkpointing, ckpt.fingerprint(config, index, ratings, n_levels),
                       parallel is None or parallel.is_main)
    resumed = saver.resume() if saver is not None else None
    if resumed is not None and "initial_generator" in resumed:  # the internal split drawn as before the break
        gen.set_state(resumed["initial_generator"])  # (random_state=None or a Generator: another seed now)
    if saver is not None:
        saver.initial_generator = gen.get_state()
    common = dict(n_levels=n_levels, config=config, gen=gen, batch=batch, device=device, parallel=parallel,
                  saver=saver, shared={})

    validation: list[float] = []
    stop_after = config.n_epochs
    chosen, scale = config.search_space(n)[0], (1.0, 1.0)
    # [setting, validation curve, noise calibration] of each run of early stopping's search (checkpointed with the
    # running one; core/validation.py: run_calibration)
    tried = [] if resumed is None else [[dict(t[0]), list(t[1]), *t[2:]] for t in resumed.get("tried", [])]
    if resumed is not None and resumed["phase"] == "final":  # the epochs and settings were chosen before the break
        validation, stop_after = list(resumed["validation"]), int(resumed["stop_after"])
        chosen, scale = dict(resumed.get("chosen", chosen)), recorded_calibration(resumed.get("noise_scale", 1.0))
    elif config.uses_early_stopping(n):
        chosen, validation, tried, scale = _search(idx_t, y_t, common, tried, resumed)
        resumed = None
        stop_after = int(np.argmin(validation)) + 1
    run = _train(idx_t, y_t, **{**common, "config": config.replace(**chosen)}, stop_after=stop_after,
                 resumed=resumed, phase={"phase": "final", "stop_after": stop_after, "validation": validation,
                                         "chosen": chosen, "tried": tried, "noise_scale": scale})
    module = run.module
    if scale != (1.0, 1.0):  # the noise the held-out ratings called for (core/validation.py), before the variances
        module.scale_noise(*scale)
    laplace = laplace_variances(module, idx_t.to(device), config.jitter, config.chunk_size, training=True)
    posterior = MWGPPosterior.from_module(module, rating_mean, rating_std, config.jitter, config.chunk_size,
                                          laplace=laplace, embedding_uncertainty=config.embedding_uncertainty)
    if not config.uses_early_stopping(n) and n >= EARLY_STOPPING_MIN and not module.variational:
        # a MAP fit's noise from its training ratings' leave-one-out errors (core/validation.py)
        loo = leave_one_out_noise_scale(posterior, idx_t.to(device), y_t.to(device), seeded_generator(0, device))
        module.scale_noise(loo)
        laplace = noise_scaled(module, laplace, loo)
        posterior = MWGPPosterior.from_module(module, rating_mean, rating_std, config.jitter, config.chunk_size,
                                              laplace=laplace, embedding_uncertainty=config.embedding_uncertainty)
        scale = (loo, 1.0)
    if n < EARLY_STOPPING_MIN:  # a few full-batch steps: the global mean at its optimum given the rest
        posterior = centred_global_mean(posterior, index, ratings)
    # unseen users / items: their latent variance calibrated on the training ratings (leave-one-out)
    posterior = posterior.with_cold_start_calibration(index, ratings, laplace)
    elapsed = time.perf_counter() - started
    logger.info("MW-GP fitted on %d ratings in %.1f s (final loss %.4f)", n, elapsed, run.history[-1])
    return FitResult(posterior=posterior, loss_history=run.history, epoch_times=run.epoch_times,
                     fit_time=elapsed, n_data=n, validation_rmse=validation, n_epochs=stop_after,
                     chosen=dict(chosen), searched=[(dict(t[0]), list(t[1])) for t in tried], noise_scale=scale[0],
                     noise_shrink=scale[1])


def _search(idx_t: torch.Tensor, y_t: torch.Tensor, common: dict, tried: list, resumed: dict | None):
    """Early stopping's search: the number of epochs (and on little data ``lr`` and ``mf_reg``, the settings of
    :meth:`~.config.MWGPConfig.search_space`) chosen on a seeded internal split, each setting trained over the
    whole schedule; the final run then trains on every rating with the best setting and the same schedule,
    stopped after its best epoch (measured on 10 % samples of ML-100K: RMSE 1.0028 vs 1.0078 when the schedule
    is compressed into the chosen epochs). ``tried``: the runs that a resumed fit finished before. Returns
    (setting, its validation curve, every run's [setting, curve, noise calibration], the chosen run's (c, lambda))."""
    config, gen, n = common["config"], common["gen"], idx_t.shape[0]
    n_val = min(n - 1, max(1, int(round(config.validation_fraction * n))))  # >= 1 rating on each side
    held, kept = validation_split(idx_t, n_val, gen)
    validation = (idx_t[held], y_t[held], known_rows(idx_t[held], idx_t[kept]))  # the same for every setting
    for setting in config.search_space(n)[len(tried):]:
        run = _train(idx_t[kept], y_t[kept], **{**common, "config": config.replace(**setting)},
                     validation=validation, resumed=resumed,
                     phase={"phase": "choose", "tried": [list(t) for t in tried]})
        resumed = None
        tried.append([setting, run.validation, {"c": run.calibration[0], "shrink": run.calibration[1]}])
    best = min(tried, key=lambda t: min(t[1]))  # the first (the config's own) on ties
    return dict(best[0]), best[1], tried, run_calibration(best)


def validation_split(idx_t: torch.Tensor, n_val: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Early stopping's internal split: (held-out rows, kept rows), about ``n_val`` held out, drawn at random.

    The rows of one index (a pair rated more than once) go to one side together, the side of the first of
    them in a random order: a repeat of a held-out rating left in training would let the validation RMSE
    reward memorising pairs (the battery's 20 % repeated pairs: 90 % coverage 0.842 with rows split, 0.902 with
    pairs split; ``docs/history.md``).
    Without repeats this is the first ``n_val`` rows of one random permutation.
    """
    n = idx_t.shape[0]
    perm = torch.randperm(n, generator=gen)
    index = idx_t.cpu().numpy()
    _, inverse = distinct_index_rows(index, tuple(int(s) for s in index.max(0) + 1))
    inverse = torch.from_numpy(inverse)
    first = torch.full((int(inverse.max()) + 1,), n, dtype=torch.long)  # each index's first position in perm
    first.scatter_reduce_(0, inverse[perm], torch.arange(n), reduce="amin")
    # held out: every row of an index whose first row is among perm's first n_val (so >= n_val rows; without
    # repeats, exactly perm's first n_val)
    held = first[inverse[perm]] < n_val
    if held.all():  # one index repeated throughout: rows split as without repeats
        return perm[:n_val], perm[n_val:]
    return perm[held], perm[~held]


@dataclass
class _Run:
    module: MWGPModule
    history: list[float]
    epoch_times: list[float]
    validation: list[float]  # RMSE of the predictive mean on the validation ratings after each epoch
    # what the noise calibration reads at the best epoch so far; the calibration (c, lambda) at the run's end
    noise_rows: HeldOutNoise | None = None
    calibration: tuple[float, float] = (1.0, 1.0)


def _train(idx_t: torch.Tensor, y_t: torch.Tensor, n_levels: tuple[int, ...], config: MWGPConfig,
           gen: torch.Generator, batch: int, device: torch.device, parallel: DataParallel | None = None,
           saver: "_Saver | None" = None, validation: tuple[torch.Tensor, ...] | None = None,
           stop_after: int | None = None, resumed: dict | None = None, phase: dict | None = None,
           shared: dict | None = None) -> _Run:
    """Initialise a module on (idx_t, y_t) and run Adam with the schedule of ``config.n_epochs`` epochs,
    stopped after ``stop_after`` epochs (default: all).

    With ``validation`` = (index, standardised ratings, which rows have known levels: the noise scale's), the RMSE
    of the predictive mean on them and the noise scale (:func:`~.validation.validation_scores`) are recorded after
    every epoch, over the whole schedule (no patience: the validation RMSE can
    plateau for several epochs before the GP's inputs take over, and a cosine schedule often
    gives its best epochs last). ``parallel``: this process computes the gradient of its shard of
    every minibatch and the shards' gradients are summed. ``saver`` checkpoints the state (tagged
    with ``phase``), ``resumed`` is a checkpoint of this run to continue from. ``shared``: what the terms keep
    between the runs of one fit (:attr:`~.initialization.InitContext.shared`).
    """
    n = idx_t.shape[0]
    dtype = y_t.dtype
    module = MWGPModule.from_config(config, tuple(n_levels)).to(dtype=dtype)
    module.set_implicit_graph(idx_t)
    initialise(module, idx_t, y_t, config.init, gen, shared)
    if parallel is not None:
        parallel.broadcast_module(module)
    module = module.to(device)
    if device.type != "cpu":
        module.set_implicit_graph(idx_t.to(device))
    module.workspace = Workspace()
    idx_t, y_t = idx_t.to(device), y_t.to(device)
    if validation is not None:
        validation = tuple(t.to(device) for t in validation)

    steps_per_epoch = math.ceil(n / batch)
    total_steps = config.n_epochs * steps_per_epoch
    module.sparse_rows = uses_sparse_rows(config, tuple(n_levels), batch, n) and module.supports_sparse_rows
    # row-sparse with implicit feedback: the implicit factors updated a few times per epoch, with the gradient of
    # the steps in between (core/implicit.py)
    accumulate = module.sparse_rows and module.implicit_feedback
    refresh_every = implicit_update_interval(steps_per_epoch)
    if accumulate:
        module.implicit.start_accumulating()
    if module.sparse_rows:  # a factor's tables side by side: one row per level reached per step (model.py)
        module.pack_tables()
    optimizer = TrainingOptimizer(module, config, n, total_steps, sparse=module.sparse_rows,
                                  implicit_steps=config.n_epochs * math.ceil(steps_per_epoch / refresh_every))
    phase = phase or {"phase": "choose"}
    run = _Run(module, [], [], [])
    order = torch.arange(n, device=device)  # the training ratings' current order (checkpointed)
    first = 0
    if resumed is not None:
        first = _restore(resumed, module, optimizer, gen, run, device)
        order = resumed["order"].to(device)
        idx_t, y_t = idx_t[order], y_t[order]
    desc = "MW-GP (choosing epochs)" if validation is not None else "MW-GP"
    last = stop_after or config.n_epochs
    show = config.verbose and (parallel is None or parallel.is_main)
    bar = tqdm(range(first, last), desc=desc, unit="epoch", disable=not show, leave=False,
               initial=first, total=last)
    share = 1.0 / parallel.world_size if parallel is not None else 1.0
    stale = True  # the implicit sums are to be refreshed before the next step (row-sparse path)
    for epoch in bar:
        epoch_start = time.perf_counter()
        # shuffle the training arrays once per epoch so that every minibatch is a contiguous slice
        # (gathering random rows every step cost ~0.7 ms of a ~11 ms step); permuting the previous
        # epoch's order by a fresh random permutation is again a uniformly random order
        perm = torch.randperm(n, generator=gen).to(device)
        idx_t, y_t, order = idx_t[perm], y_t[perm], order[perm]
        total = 0.0
        for k, start in enumerate(range(0, n, batch)):
            if accumulate and stale:  # the sums that the steps up to the next update read (it ends the epoch too)
                end = min(n, start + (refresh_every - k % refresh_every) * batch)
                module.refresh_implicit(idx_t[start:end])
                stale = False
            rows = slice(start, start + batch)
            size = min(start + batch, n) - start
            mine = rows if parallel is None else parallel.shard(rows)
            # the Gaussian priors of embeddings, factors and biases enter through the optimiser (optim.py)
            loss = -elbo(module, Batch(idx_t[mine], module.sparse_rows, order[mine]), y_t[mine], n, config.jitter,
                         config.kl_weight, batch_size=size, share=share) / n
            optimizer.zero_grad()
            loss.backward()
            loss = loss.detach()
            if parallel is not None:
                loss = parallel.all_reduce_gradients(module, touched_rows(module, idx_t[rows]), extra=loss)
            value = float(loss)
            if not math.isfinite(value):
                raise NumericalError(
                    f"the training loss became {value} at epoch {epoch + 1}; lower `lr` "
                    f"(now {config.lr}), increase `jitter` (now {config.jitter}) or use dtype='float64'")
            optimizer.step()
            total += value * size
            if accumulate:
                module.implicit.step_done()
                if (k + 1) % refresh_every == 0 or start + batch >= n:  # (the epoch ends with an update)
                    module.flush_implicit(None if parallel is None else parallel.all_reduce_implicit)
                    optimizer.step_implicit()
                    stale = True
        # variational variances (e.g. mf_posterior="variational"): their closed-form optimum given the epoch's end
        # (not before the first epoch: see terms/bilinear.py)
        module.update_variances(idx_t, config.chunk_size)
        with torch.no_grad():
            prior = float(log_prior(module))
        run.history.append(total / n - prior / n)
        run.epoch_times.append(time.perf_counter() - epoch_start)
        bar.set_postfix(loss=f"{run.history[-1]:.4f}")
        logger.debug("epoch %d: negative ELBO per rating %.5f", epoch + 1, run.history[-1])
        if validation is not None:
            rmse, rows = validation_scores(module, *validation[:2], config.jitter, config.chunk_size,
                                           calibrates_noise(module), known=validation[2])
            if rows is not None and (not run.validation or rmse < min(run.validation)):  # the first best epoch's
                run.noise_rows = rows
            run.validation.append(rmse)
        if saver is not None and saver.checkpointing.due(epoch + 1, last):
            saver.save(phase, epoch + 1, module, optimizer, gen, order, run)
    module.workspace, module.sparse_rows = None, False
    module.unpack_tables()
    module.implicit.stop_accumulating()
    for term in module.terms:  # (a term's lazy penalty ends with the run)
        if getattr(term, "lazy", None) is not None:
            term.lazy = None
    if run.noise_rows is not None:  # the noise the best epoch's held-out ratings call for, beside every variance
        initial = torch.empty_like(idx_t).index_copy_(0, order, idx_t)  # (the order the module was initialised on)
        run.calibration = noise_calibration(*with_posterior_variances(
            run.noise_rows, module, initial, *validation[::2], config, MWGPPosterior.from_module))
    return run


class _Saver:
    """Writes checkpoints (on the writing rank only) and reads the one to resume from."""

    def __init__(self, checkpointing: Checkpointing, fingerprint: dict, writes: bool) -> None:
        self.checkpointing, self.fingerprint, self.writes = checkpointing, fingerprint, writes
        self.initial_generator: torch.Tensor | None = None  # the generator's state at the start of the fit

    def resume(self) -> dict | None:
        if not self.checkpointing.resume:
            return None
        state = ckpt.load(self.checkpointing.path, self.fingerprint)
        if state is not None:
            logger.info("resuming from %s (%s run, %d epochs done)", self.checkpointing.path, state["phase"],
                        state["epoch"])
        return state

    def save(self, phase: dict, epoch: int, module, optimizer, gen, order, run: _Run) -> None:
        if not self.writes:
            return
        ckpt.save(self.checkpointing.path, {
            "fingerprint": self.fingerprint, **phase, "epoch": epoch,
            "module": {k: v.detach().cpu() for k, v in module.state_dict().items()},
            "optimizer": optimizer.state_dict(),
            "generator": gen.get_state(), "initial_generator": self.initial_generator, "order": order.cpu(),
            "history": list(run.history),
            "epoch_times": list(run.epoch_times), "validation_run": list(run.validation),
            "noise_rows_run": run.noise_rows and [t if t is None else t.cpu() for t in run.noise_rows]})


def _restore(state: dict, module: MWGPModule, optimizer: TrainingOptimizer, gen: torch.Generator, run: _Run,
             device: torch.device) -> int:
    """Load a checkpoint into a freshly initialised run; return the number of epochs already done."""
    if any(k not in state["module"] for k in module.state_dict()):  # before 2026-11-26: no packed tables
        raise ValueError("the checkpoint was written by an earlier release of mogp_surprise, whose row-sparse "
                         "training kept every table apart; it cannot continue this run. Remove it or pass "
                         "another checkpoint path")
    module.load_state_dict({k: v.to(device) for k, v in state["module"].items()})
    optimizer.load_state_dict(state["optimizer"])
    gen.set_state(state["generator"])
    run.history[:] = state["history"]
    run.epoch_times[:] = state["epoch_times"]
    run.validation[:] = state["validation_run"]
    rows = state.get("noise_rows_run")
    run.noise_rows = None if rows is None else HeldOutNoise(*rows)
    if rows is None and state.get("scales_run"):  # a release that recorded c after every epoch
        run.calibration = recorded_calibration(state["scales_run"][int(np.argmin(run.validation))])
    return int(state["epoch"])
