"""The trainer's optimiser: dense Adam, or row-sparse SparseAdam with lazy prior decay."""
from __future__ import annotations

import copy
import os

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPConfig, fit_mwgp
from mogp_surprise.core import optim
from mogp_surprise.core.model import MWGPModule
from mogp_surprise.core.objective import elbo
from mogp_surprise.core.optim import TrainingOptimizer, uses_sparse_rows
from mogp_surprise.core.rows import Batch, sparse_gather
from tests.core._modules import module as build

pytestmark = pytest.mark.usefixtures("one_thread")
PAPER = {"noise": "homoscedastic", "implicit": False}
CFG = MWGPConfig(**PAPER, mf_rank=2, embedding_reg=3.0, bias_reg=1.0, mf_reg=2.0, lr=0.05, lr_schedule="constant")


def module(seed: int = 0) -> MWGPModule:
    mod = build((9, 6), 2, 4, mf_rank=2, embedding_reg=3.0, bias_reg=1.0, mf_reg=2.0).double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in mod.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return mod


def batches(n_steps: int, size: int, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n_steps):
        index = torch.stack([torch.randint(0, 9, (size,), generator=gen), torch.randint(0, 6, (size,), generator=gen)], 1)
        yield index, torch.randn(size, generator=gen, dtype=torch.float64)


def _tables(mod: MWGPModule, kind: str) -> list:
    """The users' and items' tables of one kind: "embedding", "factor" or "bias"."""
    term = {"embedding": "gp_input", "factor": "bilinear", "bias": "bias"}[kind]
    return [mod.term(term).table(f"{kind}_{f}") for f in range(2)]


def test_sparse_gather_gives_the_rows_and_a_row_sparse_gradient():
    table = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    rows = torch.tensor([3, 0, 3])
    out = sparse_gather(table, rows)
    assert torch.equal(out, table.detach()[rows])
    (out * torch.arange(9.0, dtype=torch.float64).view(3, 3)).sum().backward()
    assert table.grad.is_sparse
    dense = torch.zeros(5, 3, dtype=torch.float64).index_add_(0, rows, torch.arange(9.0, dtype=torch.float64).view(3, 3))
    assert torch.equal(table.grad.to_dense(), dense)


def test_the_sparse_path_touches_only_the_minibatch_rows():
    mod = module()
    mod.sparse_rows = True
    opt = TrainingOptimizer(mod, CFG, 100, 10, sparse=True)
    before = copy.deepcopy(mod)
    index, y = next(batches(1, 4))
    opt.zero_grad()
    (-elbo(mod, Batch(index, True), y, 100, 1e-6) / 100).backward()
    opt.step()
    for f, (new, old) in enumerate(zip(_tables(mod, "embedding"), _tables(before, "embedding"))):
        moved = (new != old).any(1)
        assert set(torch.nonzero(moved).flatten().tolist()) == set(index[:, f].tolist())
    for f, (new, old) in enumerate(zip(_tables(mod, "bias"), _tables(before, "bias"))):
        assert set(torch.nonzero(new != old).flatten().tolist()) == set(index[:, f].tolist())
    assert not torch.equal(mod.gp.inducing, before.gp.inducing)  # dense parameters keep moving


NO_NUMBA = "numba is not installed (pip install -e '.[numba]'): its kernel is not tested"
UPDATES = ["torch", pytest.param("numba", marks=pytest.mark.skipif(optim.row_kernel() is None, reason=NO_NUMBA))]


@pytest.fixture(params=UPDATES)
def row_update(request, monkeypatch):
    """RowAdam's update of the touched rows by torch operations, or by the numba kernel."""
    if request.param == "torch":
        monkeypatch.setattr(optim, "row_kernel", lambda: None)
    return request.param


def test_row_adam_with_lazy_decay_matches_a_plain_reference_implementation(row_update):
    """Per table row, written out: Adam on the rows of the minibatch only, each row's gradient being its
    data gradient plus k * reg / N * theta when it last moved k steps ago (the prior's gradients of the
    steps it missed, at the value it kept meanwhile)."""
    n, lr, b1, b2, eps = 100, CFG.lr, 0.9, 0.999, 1e-8
    mod, ref = module(), module()
    mod.sparse_rows = True
    opt = TrainingOptimizer(mod, CFG, n, 10, sparse=True)
    tables = [*_tables(ref, "embedding"), *_tables(ref, "factor"), *_tables(ref, "bias")]
    dense_ref = torch.optim.Adam([p for p in ref.parameters() if all(p is not t for t in tables)], lr=lr)
    regs = [3.0, 3.0, 2.0, 2.0, 1.0, 1.0]
    state = [(torch.zeros_like(t), torch.zeros_like(t), torch.zeros(t.shape[0], dtype=torch.int64)) for t in tables]
    missed_more_than_one = False
    for step, (index, y) in enumerate(batches(4, 3), start=1):
        opt.zero_grad()
        (-elbo(mod, Batch(index, True), y, n, 1e-6) / n).backward()
        opt.step()
        ref.zero_grad(set_to_none=True)
        (-elbo(ref, Batch(index), y, n, 1e-6) / n).backward()
        dense_ref.step()
        with torch.no_grad():
            for k, (t, (m, v, last)) in enumerate(zip(tables, state)):
                for row in sorted(set(index[:, k % 2].tolist())):
                    missed = step - int(last[row])
                    missed_more_than_one |= missed > 1
                    g = t.grad[row] + missed * regs[k] / n * t[row]
                    m[row] = b1 * m[row] + (1 - b1) * g
                    v[row] = b2 * v[row] + (1 - b2) * g * g
                    last[row] = step
                    t[row] -= lr * (1 - b2 ** step) ** 0.5 / (1 - b1 ** step) * m[row] / (v[row].sqrt() + eps)
    assert missed_more_than_one
    for (name, a), (_, b) in zip(mod.named_parameters(), ref.named_parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-13, err_msg=name)


@pytest.mark.skipif(optim.row_kernel() is None, reason=NO_NUMBA)
def test_numbas_kernels_keep_the_users_torch_thread_count():
    """Starting numba's thread pool set OpenMP's thread count (torch's) to every core: a user's
    torch.set_num_threads(1) was undone by the process's first kernel call (a fresh process: the pool starts once)."""
    import subprocess
    import sys

    code = ("import numpy as np, torch; torch.set_num_threads(1); from mogp_surprise.core import optim; "
            "row_adam = optim.row_kernel(); before = torch.get_num_threads(); "
            "row_adam(np.zeros((4, 3)), np.zeros((4, 7)), np.arange(2), np.ones((2, 3)), 1, 0.1, 0.9, 0.999, 1e-8, "
            "0.01, 1); import numba; print(before, torch.get_num_threads(), numba.get_num_threads() >= 1)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "NUMBA_NUM_THREADS": "2"}).stdout
    assert out.split() == ["1", "1", "True"]


def test_when_every_row_is_touched_every_step_sparse_and_dense_adam_agree():
    """Then nothing is lazy: SparseAdam with the prior in the gradient = fused Adam with weight decay
    (Adam's epsilon aside)."""
    full = torch.cartesian_prod(torch.arange(9), torch.arange(6))
    mods = [module(3), module(3)]
    mods[1].sparse_rows = True
    opts = [TrainingOptimizer(mods[0], CFG, 500, 5, sparse=False), TrainingOptimizer(mods[1], CFG, 500, 5, sparse=True)]
    for opt in opts:  # the two put Adam's epsilon in different places: take it out of the comparison
        for group in (g for o in opt.optimizers for g in o.param_groups):
            group["eps"] = 1e-30
    y = torch.randn(full.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        for mod, opt in zip(mods, opts):
            opt.zero_grad()
            (-elbo(mod, Batch(full, mod.sparse_rows), y, 500, 1e-6) / 500).backward()
            opt.step()
    for (name, a), (_, b) in zip(mods[0].named_parameters(), mods[1].named_parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
    assert not torch.equal(_tables(mods[0], "embedding")[0], _tables(module(3), "embedding")[0])


def test_sparse_rows_for_large_catalogues_and_with_implicit_feedback_for_large_data(monkeypatch):
    paper = MWGPConfig(**PAPER)
    assert uses_sparse_rows(paper, (900_000, 100_000), 8192)
    assert uses_sparse_rows(paper, (120_000, 20_000), 8192)
    assert not uses_sparse_rows(paper, (30_000, 3_000), 8192)  # the dense pass is still cheaper
    assert not uses_sparse_rows(paper, (6040, 3706), 8192)
    default = MWGPConfig()
    assert uses_sparse_rows(default, (900_000, 100_000), 8192)  # every term on the row-sparse path too
    assert not uses_sparse_rows(default, (6040, 3706), 8192, n_ratings=900_000)  # ML-1M: dense
    assert uses_sparse_rows(default, (6040, 3706), 8192, n_ratings=3_000_000)  # the whole graph each step: not
    assert not uses_sparse_rows(paper, (6040, 3706), 8192, n_ratings=3_000_000)  # (without implicit feedback)
    # between the two thresholds: row-sparse where the compiled update is available
    monkeypatch.setattr(optim, "row_kernel", lambda: None)
    assert not uses_sparse_rows(paper, (60_000, 10_000), 8192)
    monkeypatch.setattr(optim, "row_kernel", lambda: object())
    assert uses_sparse_rows(paper, (60_000, 10_000), 8192)
    monkeypatch.setattr(MWGPConfig, "torch_device", lambda self: torch.device("cuda"))  # the kernel is CPU-only
    assert not uses_sparse_rows(paper, (60_000, 10_000), 8192)


def _rank_two_ratings(seed: int, n: int = 4000, levels: tuple[int, int] = (200, 120)):
    """Integer 1..5 ratings of a rank-2 world with noise 0.3: (index, ratings, levels)."""
    rng = np.random.default_rng(seed)
    index = np.stack([rng.integers(0, levels[0], n), rng.integers(0, levels[1], n)], 1)
    a, b = rng.normal(size=(levels[0], 2)), rng.normal(size=(levels[1], 2))
    return index, np.clip(np.round(3 + (a[index[:, 0]] * b[index[:, 1]]).sum(1) + rng.normal(0, 0.3, n)), 1, 5), levels


def test_a_fit_on_the_sparse_path_learns_and_resumes_exactly(monkeypatch, tmp_path):
    from mogp_surprise.core.checkpoint import Checkpointing

    from .test_checkpoint import Stop, interrupt_after, same_posterior

    index, y, levels = _rank_two_ratings(0)
    cfg = MWGPConfig(**PAPER, mf_rank=0, n_inducing=64, n_epochs=6, batch_size=200, random_state=0,
                     early_stopping=False)
    monkeypatch.setattr(optim, "SPARSE_ROWS_PER_BATCH", 0.0)
    whole = fit_mwgp(index, y, levels, cfg)
    assert np.sqrt(np.mean((whole.posterior.predict(index)[0] - y) ** 2)) < 0.85 * np.std(y)  # the mean: 1.0 std
    path = tmp_path / "c.pt"
    with monkeypatch.context() as patch:
        interrupt_after(patch, 2)
        with pytest.raises(Stop):
            fit_mwgp(index, y, levels, cfg, checkpointing=Checkpointing(path, every=2))
    state = torch.load(path, weights_only=True)
    row_adam = state["optimizer"]["optimizers"][0]["state"][0]  # the users' embeddings: [m, v, last step] per row
    assert int(row_adam["step"]) == 4 * 20 and int(row_adam["rows"][:, -1].max()) == 4 * 20
    resumed = fit_mwgp(index, y, levels, cfg, checkpointing=Checkpointing(path, every=2, resume=True))
    assert same_posterior(whole, resumed)


@pytest.mark.skipif(optim.row_kernel() is None, reason=NO_NUMBA)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_numba_kernel_and_torch_operations_update_the_same_rows(dtype, monkeypatch):
    """Large 2-d and 1-d tables, rows touched at irregular intervals (so lazy decay matters), both dtypes:
    parameters and the packed Adam row-state agree."""
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(shape, generator=gen, dtype=dtype) for shape in ((5000, 8), (5000,))]
    tables = [[torch.nn.Parameter(t.clone()) for t in start] for _ in range(2)]
    opts = [optim.RowAdam(ts, lr=0.05, decay=[3e-4, 1e-4]) for ts in tables]
    kernel = optim.row_kernel()
    for step in range(6):
        rows = torch.unique(torch.randint(0, 5000 if step % 2 else 300, (700,), generator=gen))
        grads = [torch.randn((rows.shape[0], *t.shape[1:]), generator=gen, dtype=dtype) for t in start]
        for use_kernel, ts, opt in zip((False, True), tables, opts):
            for t, g in zip(ts, grads):
                t.grad = torch.sparse_coo_tensor(rows.unsqueeze(0), g, t.shape, is_coalesced=True,
                                                 check_invariants=True)
            monkeypatch.setattr(optim, "row_kernel", (lambda: kernel) if use_kernel else (lambda: None))
            opt.step()
    tol = {torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    for k, (a, b) in enumerate(zip(*tables)):
        assert not torch.equal(a.detach(), start[k])
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(opts[1].state[b]["rows"].numpy(), opts[0].state[a]["rows"].numpy(),
                                   rtol=tol, atol=tol)


# -- the default model on the row-sparse path: lazy noise-offset KL, accumulated implicit feedback ------------
DEFAULT = MWGPConfig(latent_dim=2, n_inducing=4, mf_rank=2, lr=0.05, lr_schedule="constant")


@pytest.mark.parametrize("mf_posterior", ["laplace", "variational"])
def test_when_every_row_is_touched_every_step_the_default_models_sparse_path_is_dense_adam(mf_posterior):
    """Every level in every minibatch and the implicit factors updated every step: nothing is lazy or delayed,
    so the row-sparse path (lazy KL of the noise offsets, tau's gradient from the running sums, the implicit
    sums refreshed and their gradient flushed every step; with variational bilinear factors too, whose
    variances the steps read) takes the dense path's steps."""
    config = DEFAULT.replace(mf_posterior=mf_posterior)
    full = torch.cartesian_prod(torch.arange(9), torch.arange(6))
    y = torch.randn(full.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    mods = []
    for sparse in (False, True):
        mod = MWGPModule.from_config(config, (9, 6)).double()
        gen = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for p in mod.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
        mod.set_implicit_graph(full)
        mod.sparse_rows = sparse
        mods.append(mod)
    mods[1].implicit.start_accumulating()
    opts = [TrainingOptimizer(mods[0], config, 500, 5, sparse=False),
            TrainingOptimizer(mods[1], config, 500, 5, sparse=True, implicit_steps=5)]
    assert mods[1].term("noise_offset").lazy is not None and opts[1].implicit is not None
    for opt in opts:  # RowAdam and Adam put epsilon in different places: take it out of the comparison
        for group in (g for o in [*opt.optimizers, *([opt.implicit] if opt.implicit else [])] for g in o.param_groups):
            group["eps"] = 1e-30
    for step in range(5):
        for mod, opt in zip(mods, opts):
            if mod.sparse_rows and step == 0:
                mod.refresh_implicit()
            opt.zero_grad()
            (-elbo(mod, Batch(full, mod.sparse_rows), y, 500, 1e-6) / 500).backward()
            opt.step()
            if mod.sparse_rows:
                mod.implicit.step_done()
                assert mod.flush_implicit()
                opt.step_implicit()
                mod.refresh_implicit()
    for (name, a), (_, b) in zip(mods[0].named_parameters(), mods[1].named_parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
    assert not torch.equal(mods[0].gp.inducing, MWGPModule.from_config(config, (9, 6)).double().gp.inducing)


def test_the_lazy_offset_kl_matches_a_written_out_reference(row_update):
    """Per row [mu, log v], written out: Adam on the minibatch's rows only, each row's gradient being its data
    gradient plus the KL's gradient, at the value it kept, for every step since it last moved, with the prior
    variance tau of each of those steps (tau moves every step); the running sums follow the table."""
    from mogp_surprise.core.terms.noise_offset import NoiseOffset

    n, lr, b1, b2, eps = 50, 0.05, 0.9, 0.999, 1e-8
    term = NoiseOffset((30,))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        term.table("offset_0").copy_(torch.randn(30, 2, generator=gen) * 0.5)
    table, reference = term.table("offset_0"), term.table("offset_0").detach().clone().double()
    opt = optim.RowAdam([table], lr=lr, decay=[0.0], rules=[term.row_update(term.specs["offset_0"], n, 12)])
    m, v = torch.zeros_like(reference), torch.zeros_like(reference)
    last = torch.zeros(30, dtype=torch.int64)
    taus = []
    for step in range(1, 9):
        with torch.no_grad():  # tau moves (the dense Adam's doing in training)
            term.prior_logvar.fill_(-2.0 + 0.3 * step)
        taus.append(float(torch.exp(term.prior_logvar[0])))
        rows = torch.unique(torch.randint(0, 30 if step % 2 else 8, (6,), generator=gen))
        grad = torch.randn(rows.shape[0], 2, generator=gen)
        table.grad = torch.sparse_coo_tensor(rows.unsqueeze(0), grad, table.shape, is_coalesced=True)
        opt.step()
        for k, row in enumerate(rows.tolist()):
            mu, logvar = reference[row]
            missed = sum(1.0 / tau for tau in taus[int(last[row]):step]) / n  # the steps (last, step]
            g = grad[k].double() + torch.stack([mu * missed, 0.5 * (torch.exp(logvar) * missed
                                                                    - (step - int(last[row])) / n)])
            m[row] = b1 * m[row] + (1 - b1) * g
            v[row] = b2 * v[row] + (1 - b2) * g * g
            last[row] = step
            reference[row] -= lr * (1 - b2 ** step) ** 0.5 / (1 - b1 ** step) * m[row] / (v[row].sqrt() + eps)
    assert int((last > 1).sum()) > 5  # rows that missed steps
    np.testing.assert_allclose(table.detach().double().numpy(), reference.numpy(), rtol=2e-5, atol=2e-6)
    values = table.detach().double()
    want = torch.stack([(values[:, 0] ** 2 + torch.exp(values[:, 1])).sum(), values[:, 1].sum()])
    np.testing.assert_allclose(term.lazy[0].sums.numpy(), want.numpy(), rtol=1e-9)
    # and the noise term's KL from the running sums equals the KL over the whole table, value and tau's gradient
    lazy_kl = term.penalty()
    term.lazy = None
    full_kl = term.penalty()
    assert float(lazy_kl) == pytest.approx(float(full_kl), rel=1e-6)
    assert float(torch.autograd.grad(lazy_kl, term.prior_logvar)[0][0]) == pytest.approx(
        float(torch.autograd.grad(full_kl, term.prior_logvar)[0][0]), rel=1e-6)


@pytest.mark.parametrize("mf_posterior", ["laplace", "variational"])
def test_a_default_model_fit_on_the_sparse_path_learns_and_resumes_exactly(monkeypatch, tmp_path, mf_posterior):
    from .test_checkpoint import interrupted_and_resumed, same_posterior

    index, y, levels = _rank_two_ratings(1)
    # bias_reg=1: this rank-2 world has no biases, so the estimated prior ("auto") holds them at 0, and this short
    # fit's in-sample RMSE, the bound below, is then 1.11 (held out, 80/20, it is as good: 1.163 against 1.173)
    cfg = MWGPConfig(mf_rank=2, n_inducing=32, n_epochs=20, batch_size=200, random_state=0, early_stopping=False,
                     mf_posterior=mf_posterior, bias_reg=1.0, device="cpu")  # resumed bit for bit: on the CPU
    monkeypatch.setattr(optim, "SPARSE_RATINGS_PER_BATCH", 0.0)
    monkeypatch.setattr(optim, "IMPLICIT_UPDATES", 4)
    whole = fit_mwgp(index, y, levels, cfg)
    assert np.sqrt(np.mean((whole.posterior.predict(index)[0] - y) ** 2)) < 0.85 * np.std(y)  # measured 0.70
    assert same_posterior(whole, interrupted_and_resumed(monkeypatch, (index, y, levels), cfg, tmp_path / "c.pt", 5))
    dense = fit_mwgp(index, y, levels, cfg.replace(n_epochs=1))  # (the flag does switch paths: not this one)
    monkeypatch.setattr(optim, "SPARSE_RATINGS_PER_BATCH", 1e9)
    assert not np.array_equal(fit_mwgp(index, y, levels, cfg.replace(n_epochs=1)).posterior.predict(index[:50])[0],
                              dense.posterior.predict(index[:50])[0])


def test_a_refresh_of_only_the_levels_the_next_steps_read_trains_as_a_whole_refresh(monkeypatch):
    """The default model on the row-sparse path refreshes the implicit sums of only the levels that the steps up
    to the next update read (numba's kernel leaves the others as they were): the fit is that of whole refreshes,
    over updates every 5 steps (the last one of an epoch shorter)."""
    from mogp_surprise.core.implicit import ImplicitFeedback

    index, y, levels = _rank_two_ratings(2, n=1500, levels=(300, 150))
    cfg = DEFAULT.replace(n_epochs=2, batch_size=10, random_state=0, early_stopping=False)
    monkeypatch.setattr(optim, "SPARSE_ROWS_PER_BATCH", 0.0)
    assert optim.implicit_update_interval(150) == 5
    partial = fit_mwgp(index, y, levels, cfg)
    refresh = ImplicitFeedback.refresh
    monkeypatch.setattr(ImplicitFeedback, "refresh", lambda self, feeders, upcoming=None: refresh(self, feeders))
    whole = fit_mwgp(index, y, levels, cfg)
    assert partial.loss_history == whole.loss_history
    np.testing.assert_array_equal(partial.posterior.predict(index)[0], whole.posterior.predict(index)[0])


@pytest.mark.parametrize("kernel", ["numba", "torch"])
def test_packed_tables_train_as_separate_tables_and_resume_exactly(kernel, monkeypatch, tmp_path):
    """On the row-sparse path a factor's embedding, bias and bilinear factor are one packed parameter (one row per
    level, one Adam state; per-column prior decay), and so are the two implicit-feedback tables feeding a factor
    (one implicit sum and one accumulated gradient per level, one pass over the graph): the fit equals that of
    separate tables (numba's kernel or torch operations), and a resumed run equals an uninterrupted one."""
    from mogp_surprise.core.checkpoint import Checkpointing
    from mogp_surprise.core.model import MWGPModule

    from .test_checkpoint import interrupted_and_resumed, same_posterior

    index, y, levels = _rank_two_ratings(3, n=1500, levels=(300, 150))
    cfg = DEFAULT.replace(n_epochs=3, batch_size=50, random_state=0, early_stopping=False, device="cpu")  # bit for bit
    monkeypatch.setattr(optim, "SPARSE_ROWS_PER_BATCH", 0.0)
    if kernel == "torch":
        monkeypatch.setattr(optim, "row_kernel", lambda: None)
    elif optim.row_kernel() is None:
        pytest.skip(NO_NUMBA)
    seen, seen_feeders = [], []
    pack = MWGPModule.pack_tables

    def spy(self):
        pack(self)
        seen.append({f: [b for _, b, _, _ in layout] for f, (_, layout) in self.packed_tables().items()})
        seen_feeders.extend(self.packed_feeders())
    monkeypatch.setattr(MWGPModule, "pack_tables", spy)
    packed = fit_mwgp(index, y, levels, cfg)
    assert seen == [{0: ["embedding_0", "bias_0", "factor_0"], 1: ["embedding_1", "bias_1", "factor_1"]}]
    assert [[b for _, b, _, _ in layout] for _, _, layout in seen_feeders] == [["implicit_0"] * 2, ["implicit_1"] * 2]
    path = tmp_path / "c.pt"
    assert same_posterior(packed, interrupted_and_resumed(monkeypatch, (index, y, levels), cfg, path, 2))
    state = torch.load(path, weights_only=True)  # one written before tables were packed: a clear refusal
    state["module"] = {k: v for k, v in state["module"].items() if not k.startswith("packs.")}
    del state["checksum"]  # (written before checkpoints carried one)
    torch.save(state, path)
    with pytest.raises(ValueError, match="earlier release"):
        fit_mwgp(index, y, levels, cfg, checkpointing=Checkpointing(path, every=1, resume=True))
    monkeypatch.setattr(MWGPModule, "pack_tables", lambda self: None)
    separate = fit_mwgp(index, y, levels, cfg)
    # the same arithmetic for every entry; Adam's vectorised loops over a 24-wide table and tables of 8 and 16
    # (and torch's sparse product over them) round a few entries differently (1e-7 to 1e-6 relative after 3 epochs)
    np.testing.assert_allclose(packed.loss_history, separate.loss_history, rtol=1e-5)
    for a, b in zip(packed.posterior.predict(index), separate.posterior.predict(index)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
