"""safe_cholesky (jitter escalation, NumericalError with advice) and the hand-differentiated inducing terms."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPNumericalWarning, MWGPPosterior, NumericalError
from tests.core._modules import module
from mogp_surprise.core.kernels import paired_kernel
from mogp_surprise.core.linalg import MAX_JITTER_STEPS, safe_cholesky


def _with_eigenvalues(eigs: list[float], seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(len(eigs), len(eigs), generator=gen, dtype=torch.float64))
    a = q @ torch.diag(torch.tensor(eigs, dtype=torch.float64)) @ q.T
    return 0.5 * (a + a.T)


def _numerical_warnings(record) -> list[warnings.WarningMessage]:
    return [w for w in record if issubclass(w.category, MWGPNumericalWarning)]


def test_positive_definite_needs_no_escalation() -> None:
    a = _with_eigenvalues([3.0, 1.0, 0.5, 0.2])
    with warnings.catch_warnings():
        warnings.simplefilter("error", MWGPNumericalWarning)
        chol = safe_cholesky(a, 1e-6)
    np.testing.assert_allclose((chol @ chol.T).numpy(), (a + 1e-6 * torch.eye(4, dtype=a.dtype)).numpy(),
                               rtol=1e-12, atol=1e-12)
    assert torch.equal(chol, torch.tril(chol))


def test_jitter_escalates_with_warnings_then_succeeds() -> None:
    # smallest eigenvalue -5e-10: jitter 1e-12, 1e-11, 1e-10 cannot fix it, 1e-9 can
    a = _with_eigenvalues([2.0, 1.0, 0.5, -5e-10])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        chol = safe_cholesky(a, 1e-12, what="my matrix")
    warned = _numerical_warnings(record)
    assert len(warned) == MAX_JITTER_STEPS == 3
    messages = [str(w.message) for w in warned]
    assert all("my matrix" in msg for msg in messages)
    assert "jitter=1.0e-12" in messages[0] and "jitter=1.0e-11" in messages[0]
    assert "jitter=1.0e-09" in messages[-1]
    np.testing.assert_allclose((chol @ chol.T).numpy(), (a + 1e-9 * torch.eye(4, dtype=a.dtype)).numpy(),
                               atol=1e-12)


def test_strongly_indefinite_matrix_raises_numerical_error_with_advice() -> None:
    a = _with_eigenvalues([1.0, 1.0, -1.0])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(NumericalError) as info:
            safe_cholesky(a, 1e-6)
    assert len(_numerical_warnings(record)) == MAX_JITTER_STEPS
    msg = str(info.value)
    assert "K_mm" in msg
    assert "jitter=1.0e-03" in msg  # the last jitter tried
    assert "Increase `jitter`" in msg and "float64" in msg


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_matrix_raises_numerical_error_without_retrying(bad: float) -> None:
    a = torch.eye(3, dtype=torch.float64)
    a[1, 2] = a[2, 1] = bad
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(NumericalError, match="NaN or inf") as info:
            safe_cholesky(a, 1e-6)
    assert not _numerical_warnings(record)
    assert "`lr`" in str(info.value)  # says what to change


def _degenerate_module(monkeypatch):
    """A float64 module whose K_mm is exactly the all-ones matrix (singular).

    Duplicate-free random inducing points, but a huge lengthscale makes every kernel value
    exp(-~1e-20) == 1.0 exactly, and the outputscale is patched to exactly 1.0.
    """
    gen = torch.Generator().manual_seed(0)
    mod = module((3, 3), 2, 4).double()
    with torch.no_grad():
        mod.gp.inducing.copy_(torch.randn(4, 4, generator=gen, dtype=torch.float64))
    monkeypatch.setattr(mod.gp, "lengthscale", lambda: torch.full((4,), 1e10, dtype=torch.float64))
    monkeypatch.setattr(mod.gp, "outputscale", lambda: torch.tensor(1.0, dtype=torch.float64))
    return mod


def test_singular_kmm_in_model_warns_and_recovers(monkeypatch) -> None:
    mod = _degenerate_module(monkeypatch)
    # 1 + 1e-16 == 1 in float64: the first attempt factorises an exactly singular matrix;
    # by jitter 1e-13 the matrix is safely positive definite
    with pytest.warns(MWGPNumericalWarning, match="K_mm"):
        terms = mod.gp.whitened_terms(1e-16)
    assert torch.isfinite(terms.M).all() and torch.isfinite(terms.w).all()
    with pytest.warns(MWGPNumericalWarning, match="K_mm"):
        post = MWGPPosterior.from_module(mod, rating_mean=0.0, rating_std=1.0, jitter=1e-16)
    mean, var = post.predict(np.array([[0, 1], [2, 2]]))
    assert np.isfinite(mean).all() and np.isfinite(var).all()


def test_singular_kmm_in_model_with_hopeless_jitter_raises(monkeypatch) -> None:
    mod = _degenerate_module(monkeypatch)
    # 1e-20 * 10^3 = 1e-17 is still below half an ulp of 1.0: every attempt sees the singular matrix
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(NumericalError, match="reduce `n_inducing`"):
            mod.gp.whitened_terms(1e-20)
    assert len(_numerical_warnings(record)) == MAX_JITTER_STEPS


def _autograd_inducing_terms(z, ls, s, q_mean, q_sqrt, jitter):
    m = z.shape[0]
    eye = torch.eye(m, dtype=z.dtype)
    kmm = paired_kernel(z, z, ls, s)
    chol = torch.linalg.cholesky(kmm + jitter * eye)
    p = torch.linalg.solve_triangular(chol, eye, upper=False)
    l_s = torch.tril(q_sqrt)
    g = p.T @ l_s
    kl = 0.5 * ((l_s ** 2).sum() + (q_mean ** 2).sum() - m - torch.log(torch.diagonal(l_s) ** 2).sum())
    return p.T @ q_mean, g @ g.T - p.T @ p, kl


def test_inducing_terms_value_and_gradient_match_autograd_and_finite_differences() -> None:
    from mogp_surprise.core.linalg import inducing_terms

    gen = torch.Generator().manual_seed(3)
    m, d = 6, 4
    z = torch.randn(m, d, generator=gen, dtype=torch.float64, requires_grad=True)
    ls = (0.7 + torch.rand(d, generator=gen, dtype=torch.float64)).requires_grad_(True)
    s = torch.tensor(1.3, dtype=torch.float64, requires_grad=True)
    q_mean = torch.randn(m, generator=gen, dtype=torch.float64, requires_grad=True)
    q_sqrt = (0.3 * torch.randn(m, m, generator=gen, dtype=torch.float64)
              + torch.eye(m, dtype=torch.float64)).requires_grad_(True)
    weights_m = torch.randn(m, m, generator=gen, dtype=torch.float64)  # not symmetric: a general dM
    weights_w = torch.randn(m, generator=gen, dtype=torch.float64)
    leaves = (z, ls, s, q_mean, q_sqrt)

    def objective(fn):
        w, M, kl = fn(*leaves, 1e-6)
        return (M * weights_m).sum() + (w * weights_w).sum() + 0.7 * kl, (w, M, kl)

    ours, values = objective(inducing_terms)
    ref, ref_values = objective(_autograd_inducing_terms)
    for got, exp in zip(values, ref_values):
        np.testing.assert_allclose(got.detach().numpy(), exp.detach().numpy(), rtol=1e-12, atol=1e-12)
    for name, g1, g2 in zip("z ls s q_mean q_sqrt".split(), torch.autograd.grad(ours, leaves),
                            torch.autograd.grad(ref, leaves)):
        np.testing.assert_allclose(g1.numpy(), g2.numpy(), rtol=1e-9, atol=1e-11, err_msg=name)
    assert torch.autograd.gradcheck(lambda *a: inducing_terms(*a, 1e-6), leaves)
