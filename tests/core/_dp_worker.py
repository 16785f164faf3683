"""One process of a data-parallel test run (started by tests/core/test_distributed.py, never collected).

    python _dp_worker.py CONFIG_JSON OUT [--die-at-step K] [--rank-data] [--rank-seed] [--row-sparse]

(--row-sparse: the large-catalogue path, with implicit feedback's tables updated 3 times per epoch)

Fits seeded synthetic ratings with ``fit_mwgp`` (data-parallel when WORLD_SIZE > 1) and saves the
posterior's state from rank 0 to OUT (:func:`fit_state`, which the test also calls in its own process for
a run on one rank); prints ``ERROR <type>: <message>`` on a failure.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch

from mogp_surprise.core import MWGPConfig, fit_mwgp
from mogp_surprise.core.distributed import DataParallel, DistributedError, init_from_env, shutdown


def data(shift: int = 0):
    rng = np.random.default_rng(7)
    n, n_users, n_items = 3000, 60, 40
    index = np.stack([rng.integers(0, n_users, n), rng.integers(0, n_items, n)], 1)
    a, b = rng.normal(size=(n_users, 2)), rng.normal(size=(n_items, 2))
    y = np.clip(np.round(3 + (a[index[:, 0]] * b[index[:, 1]]).sum(1) + rng.normal(0, 0.5, n)), 1, 5)
    return index[shift:], y[shift:], (n_users, n_items)


def fit_state(config: MWGPConfig, flags: list[str], parallel=None) -> dict:
    """Fit the test data (``--row-sparse``: on the large-catalogue path; ``--rank-data``: each rank's own
    shift of it) and return the posterior's state; the test calls it in its own process for one rank."""
    from mogp_surprise.core import optim
    saved = optim.SPARSE_ROWS_PER_BATCH, optim.IMPLICIT_UPDATES, torch.get_num_threads()
    torch.set_num_threads(1)
    if "--row-sparse" in flags:  # the large-catalogue path on a small problem
        optim.SPARSE_ROWS_PER_BATCH = 0.0
        optim.IMPLICIT_UPDATES = 3  # (with implicit feedback: its tables updated every few steps)
    try:
        shift = parallel.rank if ("--rank-data" in flags and parallel is not None) else 0
        index, y, levels = data(shift)
        return fit_mwgp(index, y, levels, config, parallel=parallel).posterior.state_dict()
    finally:
        optim.SPARSE_ROWS_PER_BATCH, optim.IMPLICIT_UPDATES, threads = saved
        torch.set_num_threads(threads)


def main() -> None:
    config = MWGPConfig(**json.loads(sys.argv[1]))
    out = sys.argv[2]
    parallel = init_from_env() if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None
    if "--rank-seed" in sys.argv and parallel is not None:  # each rank its own random_state
        config = config.replace(random_state=parallel.rank)
    if "--die-at-step" in sys.argv and parallel is not None and parallel.rank == 1:
        die_at = int(sys.argv[sys.argv.index("--die-at-step") + 1])
        calls = []
        original = DataParallel.all_reduce_gradients

        def dying(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == die_at:
                os._exit(17)  # a crash: no exception, no goodbye to the other rank
            return original(self, *args, **kwargs)
        DataParallel.all_reduce_gradients = dying
    try:
        state = fit_state(config, sys.argv[3:], parallel)
    except Exception as exc:  # report to the test, which checks the message
        print(f"ERROR {type(exc).__name__}: {exc}", flush=True)
        if isinstance(exc, DistributedError):
            os._exit(3)  # a broken process group cannot be torn down cleanly (as the CLI does)
        shutdown()
        sys.exit(3)
    shutdown()
    if parallel is None or parallel.is_main:
        torch.save(state, out)


if __name__ == "__main__":
    main()
