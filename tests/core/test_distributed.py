"""Data-parallel training on torch.distributed (gloo, 2 processes on 127.0.0.1, started and stopped here).

Every run is bounded in time: the processes get a short collective timeout and the test kills them
if they outlive it.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPConfig
from mogp_surprise.core.distributed import DataParallel, touched_rows
from tests.core import _dp_worker as worker
from tests.core._modules import module as build, table

WORKER = Path(__file__).with_name("_dp_worker.py")
pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="this PyTorch build has no torch.distributed gloo backend")
#: gloo on the CPU (a GPU machine would train each rank on its one GPU: nccl needs one GPU per rank)
SMALL = {"n_inducing": 16, "random_state": 0, "early_stopping": False, "dtype": "float64", "device": "cpu"}
#: largest relative difference (float64) between a fit on two ranks and one on the union of their
#: shards. The sums are formed in another order (each rank sums its shard, gloo adds the ranks'
#: sums), and Adam's normalisation carries the last bits of small gradients into the parameters:
#: measured after 2-21 steps up to 1.9e-9 (dense) and 1.6e-8 (row-sparse) on an AMD EPYC (Zen 4),
#: under 1e-8 on the Intel Xeon before; since every rank keeps its one thread while numba's kernels run (they
#: had moved torch to every core), 2.5e-8 in the parameters and 1.2e-7 in the cold-start calibration factor
#: (a ratio of the fitted predictive: row-sparse, neighbourhood term). The checks that the runs moved (> 1e-4)
#: and that the row-sparse flag switched paths (1.4e-3 / 2.4e-2 there) stay far above it.
SAME_RUN_RTOL = 3e-7


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: list[str], world: int, timeout: float = 120.0, module: bool = False, env_extra=None):
    """Start ``world`` processes like torchrun does (env://), wait for all; return their (rc, stdout, stderr)."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
               "RANK": str(rank), "LOCAL_RANK": str(rank), "OMP_NUM_THREADS": "1", "MOGP_DIST_TIMEOUT": "30",
               **(env_extra or {})}
        cmd = [sys.executable, "-m", "mogp_surprise", *args] if module else [sys.executable, str(WORKER), *args]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            out.append((p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return out


def fit_state(tmp_path: Path, params: dict, world: int, name: str, *flags: str) -> dict:
    """The posterior's state after a fit on ``world`` ranks; one rank runs in this process (the worker's own
    function, one thread as there: the same numbers without an interpreter's start)."""
    if world == 1:
        return worker.fit_state(MWGPConfig(**params), list(flags))
    path = tmp_path / f"{name}.pt"
    runs = launch([json.dumps(params), str(path), *flags], world)
    for rc, stdout, stderr in runs:
        assert rc == 0, stdout + stderr[-3000:]
    return torch.load(path, weights_only=True)


def max_relative_difference(a, b) -> float:
    """Largest |a - b| / max(|a|, 1) over every float tensor of two nested state dicts."""
    if isinstance(a, dict):
        return max([max_relative_difference(a[k], b[k]) for k in a] or [0.0])
    if isinstance(a, (list, tuple)):
        return max([max_relative_difference(x, y) for x, y in zip(a, b)] or [0.0])
    if torch.is_tensor(a) and a.is_floating_point() and a.numel():
        return float(((a - b).abs() / a.abs().clamp_min(1.0)).max())
    assert not torch.is_tensor(a) or torch.equal(a, b)
    return 0.0


@pytest.mark.parametrize("params", [
    {"n_epochs": 1, "batch_size": 3000},  # one step of the default model on 2 ranks = one step on the union
    {"n_epochs": 3, "batch_size": 451, "noise": "homoscedastic", "implicit": False, "mf_rank": 0},  # uneven shards
    {"n_epochs": 1, "batch_size": 2999},  # the second step's one rating leaves rank 1 an empty shard
    {"n_epochs": 1, "batch_size": 1000, "neighbourhood": True},  # each shard reads its ratings' inputs
], ids=["one-step-default", "paper-model-21-steps", "an-empty-shard", "neighbourhood"])
def test_steps_on_two_ranks_equal_one_process_on_the_union_of_their_batches(tmp_path, params):
    one = fit_state(tmp_path, {**SMALL, **params}, 1, "one")
    two = fit_state(tmp_path, {**SMALL, **params}, 2, "two")
    assert max_relative_difference(one, two) <= SAME_RUN_RTOL
    # and the run is not trivially equal to its initialisation: a second step moves the parameters
    more = fit_state(tmp_path, {**SMALL, **params, "n_epochs": params["n_epochs"] + 1}, 1, "more")
    assert max_relative_difference(one, more) > 1e-4


@pytest.mark.parametrize("batch, model", [
    (451, {"noise": "homoscedastic", "implicit": False, "mf_rank": 2}),
    (2999, {"noise": "homoscedastic", "implicit": False, "mf_rank": 2}),
    (451, {"mf_rank": 2}),
    (451, {"mf_rank": 2, "neighbourhood": True}),
], ids=["uneven-shards", "an-empty-shard", "default-model", "neighbourhood"])
def test_row_sparse_steps_on_two_ranks_equal_one_process(tmp_path, batch, model):
    """The large-catalogue path: row-sparse gradients all-reduced over the minibatch's rows, lazy prior
    (with a minibatch of 2999 of 3000 ratings, the second step's one rating leaves rank 1 nothing); the
    default model adds the noise offsets' lazy KL and the implicit factors' accumulated gradient, summed
    over the ranks at each of their updates."""
    params = {**SMALL, "n_epochs": 2, "batch_size": batch, **model}
    one = fit_state(tmp_path, params, 1, "one", "--row-sparse")
    two = fit_state(tmp_path, params, 2, "two", "--row-sparse")
    assert max_relative_difference(one, two) <= SAME_RUN_RTOL
    dense = fit_state(tmp_path, params, 1, "dense")
    assert max_relative_difference(one, dense) > 1e-6  # the flag did switch paths


def test_a_rank_that_dies_stops_the_other_with_a_clear_error(tmp_path):
    started = time.monotonic()
    runs = launch([json.dumps({**SMALL, "n_epochs": 3, "batch_size": 300}), str(tmp_path / "x.pt"),
                   "--die-at-step", "4"], 2, timeout=90)
    elapsed = time.monotonic() - started
    (rc0, out0, err0), (rc1, _, _) = runs
    assert rc1 == 17
    assert rc0 == 3, out0 + err0[-2000:]
    assert "ERROR DistributedError: rank 0 of 2" in out0 and "another training process stopped" in out0
    assert "--resume" in out0
    assert elapsed < 60
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.parametrize("flag, message", [("--rank-data", "the ranks hold different training data"),
                                           ("--rank-seed", "the ranks were given different `random_state`")])
def test_ranks_with_different_data_or_seeds_are_refused(tmp_path, flag, message):
    runs = launch([json.dumps({**SMALL, "n_epochs": 1}), str(tmp_path / "x.pt"), flag], 2, timeout=90)
    for rc, stdout, stderr in runs:
        assert rc == 3, stdout + stderr[-2000:]
        assert message in stdout


@pytest.mark.parametrize("seed", [None, np.random.default_rng(0), True, 1.5])
def test_data_parallel_training_needs_an_int_seed_before_any_exchange(seed):
    """With random_state=None each rank shuffled with its own seed: the minibatches were no one process's."""
    with pytest.raises(ValueError, match="data-parallel training needs `random_state` set to an int"):
        DataParallel.check_same_data(object(), torch.zeros((3, 2), dtype=torch.long), torch.zeros(3), (2, 2), seed)


def test_cli_fit_under_torchrun_trains_one_model_that_loads_without_a_process_group(tmp_path):
    """`python -m mogp_surprise fit` on 2 ranks: rank 0 alone reports and saves; test RMSE within 0.003 of one process."""
    from mogp_surprise import MWGP

    rng = np.random.default_rng(3)
    n, n_users, n_items = 12000, 300, 150
    users, items = rng.integers(0, n_users, n), rng.integers(0, n_items, n)
    a, b = rng.normal(size=(n_users, 3)), rng.normal(size=(n_items, 3))
    r = np.clip(np.round(3 + 0.7 * (a[users] * b[items]).sum(1) + rng.normal(0, 0.5, n)), 1, 5)
    test = rng.random(n) < 0.1
    test &= np.isin(users, users[~test]) & np.isin(items, items[~test])
    lines = [f"u{u},i{i},{v:g}" for u, i, v in zip(users[~test], items[~test], r[~test])]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    params = json.dumps({"n_epochs": 4, "device": "cpu"})  # two ranks: gloo, also where one GPU is visible

    def rmse(model: Path) -> float:
        algo = MWGP.load(model)
        mean, _ = algo.predict_dist([f"u{u}" for u in users[test]], [f"i{i}" for i in items[test]])
        return float(np.sqrt(np.mean((np.clip(mean, 1, 5) - r[test]) ** 2)))

    common = ["fit", "--ratings", str(tmp_path / "train.csv"), "--params", params, "--no-progress"]
    (rc0, out0, err0), (rc1, out1, err1) = launch([*common, "--out", str(tmp_path / "two.pt")], 2, module=True)
    assert rc0 == 0 and rc1 == 0, out0 + err0[-2000:] + err1[-2000:]
    assert "data-parallel on 2 processes" in out0 and "Saved to" in out0
    assert out1 == ""  # the other ranks are silent
    ((rc, out, err),) = launch([*common, "--out", str(tmp_path / "one.pt")], 1, module=True)
    assert rc == 0, out + err[-2000:]
    one, two = rmse(tmp_path / "one.pt"), rmse(tmp_path / "two.pt")
    assert one < 0.85  # the model learned the signal (the training mean as prediction: 1.12)
    assert abs(one - two) <= 0.003


def test_cli_fit_under_torchrun_reports_a_killed_rank_and_exits(tmp_path):
    rng = np.random.default_rng(4)
    lines = [f"u{u},i{i},{v}" for u, i, v in zip(rng.integers(0, 400, 30000), rng.integers(0, 200, 30000),
                                                 rng.integers(1, 6, 30000))]
    (tmp_path / "r.csv").write_text("\n".join(lines) + "\n")
    port = free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
               "RANK": str(rank), "LOCAL_RANK": str(rank), "OMP_NUM_THREADS": "1", "MOGP_DIST_TIMEOUT": "30"}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "mogp_surprise", "-v", "fit", "--ratings", str(tmp_path / "r.csv"),
             "--out", str(tmp_path / "m.pt"), "--params", '{"n_epochs": 200, "batch_size": 256, "device": "cpu"}',
             "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        first = procs[0].stdout.readline()  # rank 0 announces the fit once the data are loaded
        assert "data-parallel on 2 processes" in first
        time.sleep(3.0)  # training under way
        procs[1].kill()
        started = time.monotonic()
        _, err = procs[0].communicate(timeout=60)
        assert time.monotonic() - started < 30
        assert procs[0].returncode == 1
        assert "error: rank 0 of 2: summing gradients failed" in err and "--resume" in err
        assert "Traceback" not in err
        assert not (tmp_path / "m.pt").exists()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


# -- in-process pieces ------------------------------------------------------------------------------
def test_shards_of_a_minibatch_partition_it():
    rows = slice(10, 17)
    shards = [list(range(20))[DataParallel(r, 3).shard(rows)] for r in range(3)]
    assert sorted(sum(shards, [])) == list(range(10, 17))


def test_touched_rows_are_the_minibatch_levels_and_skip_implicit_tables():
    module = build((6, 5), 2, 4, heteroscedastic=True, implicit=True, mf_rank=2)
    module.set_implicit_graph(torch.tensor([[0, 1], [2, 3], [5, 4]]))
    rows = touched_rows(module, torch.tensor([[2, 3], [0, 3], [2, 1]]))
    assert torch.equal(rows[id(table(module, "gp_input", "embedding_0"))], torch.tensor([0, 2]))
    assert torch.equal(rows[id(table(module, "noise_offset", "offset_1"))], torch.tensor([1, 3]))
    assert torch.equal(rows[id(table(module, "bilinear", "factor_1"))], torch.tensor([1, 3]))
    assert torch.equal(rows[id(table(module, "bias", "bias_0"))], torch.tensor([0, 2]))
    assert id(table(module, "gp_input", "implicit_0")) not in rows and id(module.gp.inducing) not in rows
    # every other per-level table of every term: exactly the implicit-feedback ones are left out
    assert {id(t) for _, spec, t in module.tables() if spec.feeds is None} == set(rows)


def test_training_data_parallel_needs_a_process_group():
    with pytest.raises(ValueError, match="torchrun"):
        DataParallel.from_process_group()


def test_more_ranks_than_gpus_is_refused_with_what_to_do(monkeypatch):
    """nccl needs one GPU per process: a rank whose LOCAL_RANK has no GPU says so before joining (rather than
    leaving the others to time out waiting for it)."""
    from mogp_surprise.core.distributed import DistributedError, init_from_env

    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    with pytest.raises(DistributedError, match=r"LOCAL_RANK=1 but its machine has 1 CUDA device.*--nproc-per-node 1"
                                               r".*device='cpu'"):
        init_from_env("cuda")
