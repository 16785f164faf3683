"""Kernels of MW-GP: the paired product RBF kernel, its fast training forms and the psi statistics.

References are written independently in numpy (float64), not with the library's own ``rbf``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core.kernels import (Workspace, cross_kernel, data_fit, paired_kernel, rbf, rbf_expectations,
                                        rbf_mean_gradient)

R = 3  # embedding dimension of each factor


def _np_rbf(x: np.ndarray, z: np.ndarray, ls: np.ndarray) -> np.ndarray:
    """Unit-scale ARD RBF by explicit pairwise differences (no GEMM expansion)."""
    d = (x[:, None, :] - z[None, :, :]) / ls
    return np.exp(-0.5 * (d ** 2).sum(-1))


def _inputs(n_factors: int, n: int = 9, m: int = 6, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    dim = n_factors * R
    x = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    z = torch.randn(m, dim, generator=gen, dtype=torch.float64)
    ls = 0.5 + torch.rand(dim, generator=gen, dtype=torch.float64) * 1.5  # distinct per dimension
    s = torch.tensor(1.7, dtype=torch.float64)
    return x, z, ls, s


@pytest.mark.parametrize("n_factors", [2, 3])
def test_paired_kernel_is_product_of_factor_kernels(n_factors: int) -> None:
    """s * prod_f k_f(x_f, z_f), each factor with its own block of lengthscales."""
    x, z, ls, s = _inputs(n_factors)
    got = paired_kernel(x, z, ls, s).numpy()
    want = float(s) * np.ones((x.shape[0], z.shape[0]))
    for f in range(n_factors):
        blk = slice(f * R, (f + 1) * R)
        want = want * _np_rbf(x[:, blk].numpy(), z[:, blk].numpy(), ls[blk].numpy())
    assert got.shape == (x.shape[0], z.shape[0])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_paired_kernel_uses_separate_lengthscales_per_factor() -> None:
    """Swapping the user and item lengthscale blocks must change the kernel (ARD is honoured)."""
    x, z, ls, s = _inputs(2)
    swapped = torch.cat([ls[R:], ls[:R]])
    a = paired_kernel(x, z, ls, s)
    b = paired_kernel(x, z, swapped, s)
    assert (a - b).abs().max() > 1e-3


def test_kmm_is_hadamard_not_kronecker_product() -> None:
    _, z, ls, s = _inputs(2, m=5)
    m = z.shape[0]
    kmm = paired_kernel(z, z, ls, s).numpy()
    ka = _np_rbf(z[:, :R].numpy(), z[:, :R].numpy(), ls[:R].numpy())
    kb = _np_rbf(z[:, R:].numpy(), z[:, R:].numpy(), ls[R:].numpy())
    assert kmm.shape == (m, m)  # the Kronecker product would be (m^2, m^2)
    np.testing.assert_allclose(kmm, float(s) * ka * kb, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(kmm, kmm.T, atol=1e-15)
    np.testing.assert_allclose(np.diag(kmm), float(s), rtol=1e-12)
    assert np.linalg.eigvalsh(kmm).min() > 0


def test_rbf_matches_numpy_reference() -> None:
    x, z, ls, _ = _inputs(2)
    np.testing.assert_allclose(rbf(x, z, ls).numpy(), _np_rbf(x.numpy(), z.numpy(), ls.numpy()),
                               rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("n_factors", [1, 2, 3])
def test_cross_kernel_equals_paired_kernel(n_factors: int) -> None:
    x, z, ls, s = _inputs(n_factors, n=13, m=7, seed=n_factors)
    np.testing.assert_allclose(cross_kernel(x, z, ls, s).numpy(), paired_kernel(x, z, ls, s).numpy(),
                               rtol=0, atol=1e-10)


def test_cross_kernel_gradient_matches_paired_kernel() -> None:
    x, z, ls, s = _inputs(2, n=5, m=4)
    grads = []
    for fn in (cross_kernel, paired_kernel):
        leaves = [t.clone().requires_grad_(True) for t in (x, z, ls, s)]
        fn(*leaves).sin().sum().backward()
        grads.append([t.grad for t in leaves])
    for g_fast, g_ref in zip(*grads):
        np.testing.assert_allclose(g_fast.numpy(), g_ref.numpy(), rtol=1e-8, atol=1e-10)


def _data_fit_inputs(n_factors: int = 2, n: int = 9, m: int = 6, seed: int = 0):
    x, z, ls, s = _inputs(n_factors, n=n, m=m, seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    w = torch.randn(m, generator=gen, dtype=torch.float64)
    a = torch.randn(m, m, generator=gen, dtype=torch.float64)
    M = a @ a.T / m - torch.eye(m, dtype=torch.float64)  # symmetric, indefinite like L^-T (S - I) L^-1
    r0 = torch.randn(n, generator=gen, dtype=torch.float64)
    return x, z, ls, s, w, M, r0


def _np_data_fit(x, z, ls, s, w, M, r0) -> float:
    k = s * _np_rbf(x, z, ls)
    e = r0 - k @ w
    return float(e @ e + np.einsum("ij,jk,ik->", k, M, k))


@pytest.mark.parametrize("n_factors", [1, 2, 3])
def test_data_fit_value_matches_numpy(n_factors: int) -> None:
    args = _data_fit_inputs(n_factors, seed=n_factors)
    expected = _np_data_fit(*(a.numpy() for a in args))
    assert float(data_fit(*args)) == pytest.approx(expected, rel=1e-12)
    ws = Workspace()
    assert float(data_fit(*args, workspace=ws)) == pytest.approx(expected, rel=1e-12)


def test_data_fit_gradients_match_autograd_and_finite_differences() -> None:
    args = _data_fit_inputs(2, n=11, m=5, seed=3)
    leaves = [a.clone().requires_grad_(True) for a in args]
    fused = torch.autograd.grad(data_fit(*leaves), leaves)
    x, z, ls, s, w, M, r0 = leaves
    k = paired_kernel(x, z, ls, s)
    e = r0 - k @ w
    reference = torch.autograd.grad((e * e).sum() + ((k @ M) * k).sum(), leaves)
    for name, g_fused, g_ref in zip("x z ls s w M r0".split(), fused, reference):
        np.testing.assert_allclose(g_fused.numpy(), g_ref.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)
    assert torch.autograd.gradcheck(data_fit, tuple(leaves), eps=1e-6, atol=1e-7, rtol=1e-6)


def test_data_fit_partial_gradients_and_repeated_backward() -> None:
    x, z, ls, s, w, M, r0 = _data_fit_inputs(2, seed=4)
    xg = x.clone().requires_grad_(True)
    out = data_fit(xg, z, ls, s, w, M, r0, Workspace())  # only x needs a gradient
    (first,) = torch.autograd.grad(out, xg, retain_graph=True)
    (second,) = torch.autograd.grad(out, xg)  # K M was overwritten by the first pass: recomputed
    np.testing.assert_allclose(first.numpy(), second.numpy(), rtol=1e-13, atol=1e-15)


def test_workspace_is_reused_and_never_shared_between_live_graphs() -> None:
    ws = Workspace()
    a1 = [t.clone().requires_grad_(True) for t in _data_fit_inputs(2, seed=5)]
    a2 = [t.clone().requires_grad_(True) for t in _data_fit_inputs(2, seed=6)]
    ref = [torch.autograd.grad(data_fit(*a), a) for a in (a1, a2)]
    # two forward passes before either backward: the second must not reuse the lent buffers
    out1, out2 = data_fit(*a1, workspace=ws), data_fit(*a2, workspace=ws)
    got2 = torch.autograd.grad(out2, a2)
    got1 = torch.autograd.grad(out1, a1)
    for got, exp in ((got1, ref[0]), (got2, ref[1])):
        for g, e in zip(got, exp):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-12, atol=1e-14)
    # after the backward passes the buffers are free again and reused (same storage)
    cpu = torch.device("cpu")
    first = ws.acquire(9, 6, torch.float64, cpu)
    assert ws.acquire(9, 6, torch.float64, cpu) is None  # lent out: a second forward must allocate its own
    ws.release()
    second = ws.acquire(4, 6, torch.float64, cpu)
    assert [tuple(b.shape) for b in first] == [(9, 6)] * 3
    assert [tuple(b.shape) for b in second] == [(4, 6)] * 3
    assert all(b.dtype == torch.float64 for b in first + second)
    ptrs = [b.data_ptr() for b in first]
    assert len(set(ptrs)) == 3  # three distinct blocks (K, K M, K diag(lambda))
    assert [b.data_ptr() for b in second] == ptrs  # fewer rows: views on the same three blocks
    ws.release()
    # a forward pass with no gradient needed gives the buffers straight back: the next acquire lends the
    # same three blocks again (none: they were kept lent out; other pointers: they were re-allocated)
    with torch.no_grad():
        data_fit(*_data_fit_inputs(2, seed=7), workspace=ws)
    third = ws.acquire(9, 6, torch.float64, cpu) or ()
    assert [b.data_ptr() for b in third] == ptrs
    ws.release()
    # another column count (a different m) cannot reuse them: fresh blocks of the new shape
    other = ws.acquire(9, 5, torch.float64, cpu)
    assert [tuple(b.shape) for b in other] == [(9, 5)] * 3 and other[0].data_ptr() not in ptrs


def _psi_inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    mean = torch.randn(R, generator=gen, dtype=torch.float64) * 0.5
    var = 0.1 + torch.rand(R, generator=gen, dtype=torch.float64) * 0.6
    z = torch.randn(5, R, generator=gen, dtype=torch.float64)
    ls = 0.7 + torch.rand(R, generator=gen, dtype=torch.float64)
    return mean, var, z, ls


def test_rbf_expectations_match_monte_carlo() -> None:
    mean, var, z, ls = _psi_inputs()
    psi1, psi2 = rbf_expectations(mean, var, z, ls)
    assert psi1.shape == (5,) and psi2.shape == (5, 5)

    rng = np.random.default_rng(123)
    n_samples = 400_000
    xs = mean.numpy() + np.sqrt(var.numpy()) * rng.standard_normal((n_samples, R))
    k = _np_rbf(xs, z.numpy(), ls.numpy())  # (n_samples, m), values in [0, 1]
    mc1 = k.mean(0)
    mc2 = k.T @ k / n_samples
    # Monte Carlo standard error <= 0.5 / sqrt(4e5) ~ 8e-4; 5e-3 is > 6 standard errors
    np.testing.assert_allclose(psi1.numpy(), mc1, atol=5e-3, rtol=0)
    np.testing.assert_allclose(psi2.numpy(), mc2, atol=5e-3, rtol=0)
    # and they are not trivially close to the plug-in kernel at the mean (the test can fail)
    plug_in = _np_rbf(mean.numpy()[None], z.numpy(), ls.numpy())[0]
    assert np.abs(plug_in - mc1).max() > 2e-2


def test_rbf_expectations_reduce_to_kernel_at_zero_variance() -> None:
    mean, _, z, ls = _psi_inputs(seed=2)
    psi1, psi2 = rbf_expectations(mean, torch.full_like(mean, 1e-14), z, ls)
    k = _np_rbf(mean.numpy()[None], z.numpy(), ls.numpy())[0]
    np.testing.assert_allclose(psi1.numpy(), k, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(psi2.numpy(), np.outer(k, k), rtol=1e-10, atol=1e-12)


def test_reused_workspace_makes_a_stale_second_backward_fail_loudly() -> None:
    ws = Workspace()
    a1 = [t.clone().requires_grad_(True) for t in _data_fit_inputs(2, seed=8)]
    a2 = [t.clone().requires_grad_(True) for t in _data_fit_inputs(2, seed=9)]
    out1 = data_fit(*a1, workspace=ws)
    torch.autograd.grad(out1, a1, retain_graph=True)  # gives the buffers back
    data_fit(*a2, workspace=ws)  # reuses (overwrites) them
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(out1, a1)


# -- the weighted data term ------------------------------------------------------------------------------

def _weighted_data_fit_inputs(n: int = 11, m: int = 5, seed: int = 3):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=gen, dtype=torch.float64)
    z = torch.randn(m, 4, generator=gen, dtype=torch.float64)
    ls = 0.6 + torch.rand(4, generator=gen, dtype=torch.float64)
    s = torch.tensor(1.3, dtype=torch.float64)
    w = torch.randn(m, generator=gen, dtype=torch.float64)
    a = torch.randn(m, m, generator=gen, dtype=torch.float64)
    big_m = a @ a.T / m - torch.eye(m, dtype=torch.float64)
    r0 = torch.randn(n, generator=gen, dtype=torch.float64)
    lam = torch.rand(n, generator=gen, dtype=torch.float64) * 2 + 0.1
    return x, z, ls, s, w, big_m, r0, lam


def test_weighted_data_fit_matches_autograd_numpy_and_finite_differences() -> None:
    args = _weighted_data_fit_inputs()
    leaves = [a.clone().requires_grad_(True) for a in args]
    x, z, ls, s, w, big_m, r0, lam = leaves
    fused = data_fit(x, z, ls, s, w, big_m, r0, Workspace(), weights=lam)
    k = paired_kernel(x, z, ls, s)
    e = r0 - k @ w
    reference = (lam * (e * e + ((k @ big_m) * k).sum(1))).sum()
    assert float(fused.detach()) == pytest.approx(float(reference.detach()), rel=1e-12)
    kn = k.detach().numpy()
    en = r0.detach().numpy() - kn @ w.detach().numpy()
    by_hand = (lam.detach().numpy() * (en ** 2 + np.einsum("ij,jk,ik->i", kn, big_m.detach().numpy(), kn))).sum()
    assert float(fused.detach()) == pytest.approx(by_hand, rel=1e-12)
    g_fused = torch.autograd.grad(fused, leaves)
    g_ref = torch.autograd.grad(reference, leaves)
    for name, a, b in zip("x z ls s w M r0 weights".split(), g_fused, g_ref):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)

    def fn(*t):
        return data_fit(*t[:7], weights=t[7])
    assert torch.autograd.gradcheck(fn, tuple(leaves), eps=1e-6, atol=1e-7, rtol=1e-6)


def test_unit_weights_equal_the_unweighted_data_term() -> None:
    x, z, ls, s, w, big_m, r0, _ = _weighted_data_fit_inputs(seed=5)
    ones = torch.ones(x.shape[0], dtype=torch.float64)
    assert float(data_fit(x, z, ls, s, w, big_m, r0, weights=ones)) == pytest.approx(
        float(data_fit(x, z, ls, s, w, big_m, r0)), rel=1e-13)


def test_rbf_mean_gradient_matches_autograd() -> None:
    """d/dx_n of k(x_n, Z) w (each row depends on its own x_n only: the gradient of the sum is row-wise)."""
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(7, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    z = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    ls = 0.6 + torch.rand(4, generator=gen, dtype=torch.float64)
    s, w = torch.tensor(1.7, dtype=torch.float64), torch.randn(5, generator=gen, dtype=torch.float64)
    (want,) = torch.autograd.grad((paired_kernel(x, z, ls, s) @ w).sum(), x)
    got = rbf_mean_gradient(cross_kernel(x.detach(), z, ls, s) * w, x.detach(), z, ls)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)
