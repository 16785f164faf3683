"""Fold-in's L-BFGS (numpy) takes torch.optim.LBFGS's steps: the same iterations and evaluations, the same point."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core.lbfgs import _cubic_min, minimize

RNG = np.random.default_rng(0)
_A = RNG.normal(size=(30, 30))
_Q, _B = torch.tensor(_A @ _A.T + np.eye(30)), torch.tensor(RNG.normal(size=30))
_X, _Y = torch.tensor(RNG.normal(size=(200, 20))), torch.tensor((RNG.random(200) < 0.5).astype(float))


def _rosenbrock(p):
    return (100 * (p[1:] - p[:-1] ** 2) ** 2 + (1 - p[:-1]) ** 2).sum()


def _quadratic(p):
    return 0.5 * p @ _Q @ p - _B @ p


def _logistic(p):
    z = _X @ p
    return (torch.nn.functional.softplus(z) - _Y * z).sum() + 0.01 * (p ** 2).sum()


def _by_torch(fun, x0, max_iter, tol_grad, tol_change, history):
    p = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([p], lr=1.0, max_iter=max_iter, tolerance_grad=tol_grad, tolerance_change=tol_change,
                            history_size=history, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = fun(p)
        loss.backward()
        return loss
    opt.step(closure)
    return p.detach().numpy(), opt.state[p]["n_iter"], opt.state[p]["func_evals"]


def _value_and_gradient(fun):
    def run(x):
        p = torch.from_numpy(x).requires_grad_(True)
        loss = fun(p)
        return float(loss.detach()), torch.autograd.grad(loss, p)[0].numpy()
    return run


@pytest.mark.parametrize("fun, x0", [(_rosenbrock, np.array([-1.2, 1.0])), (_rosenbrock, RNG.normal(size=10)),
                                     (_quadratic, np.zeros(30)), (_logistic, np.zeros(20))],
                         ids=["rosenbrock-2", "rosenbrock-10", "quadratic", "logistic"])
@pytest.mark.parametrize("max_iter, tol_grad, tol_change, history",
                         [(100, 1e-2, 1e-16, 20), (100, 1e-7, 1e-9, 20), (7, 1e-9, 1e-16, 3)])
def test_the_steps_of_torchs_lbfgs(fun, x0, max_iter, tol_grad, tol_change, history):
    x, n_iter, n_eval = _by_torch(fun, x0, max_iter, tol_grad, tol_change, history)
    found = minimize(_value_and_gradient(fun), x0, max_iter, tol_grad, tol_change, history)
    assert (found.n_iter, found.n_eval) == (n_iter, n_eval)
    np.testing.assert_allclose(found.x, x, rtol=0, atol=1e-9)
    assert found.value == pytest.approx(float(fun(torch.from_numpy(found.x))), rel=1e-12)


def test_a_minimum_at_the_start_takes_no_step():
    found = minimize(_value_and_gradient(_quadratic), np.linalg.solve(_Q.numpy(), _B.numpy()), tol_grad=1e-6)
    assert (found.n_iter, found.n_eval) == (0, 1)


def test_the_rosenbrock_minimum_is_found():
    found = minimize(_value_and_gradient(_rosenbrock), np.array([-1.2, 1.0]), tol_grad=1e-9, tol_change=1e-16)
    np.testing.assert_allclose(found.x, [1.0, 1.0], atol=1e-6)


def test_the_cubic_step_of_a_cubic_is_its_minimiser():
    # f(t) = (t - 1)^3 - 3 (t - 1) + 2 has its local minimum at t = 2
    f, g = (lambda t: (t - 1) ** 3 - 3 * (t - 1) + 2), (lambda t: 3 * (t - 1) ** 2 - 3)
    assert _cubic_min(0.5, f(0.5), g(0.5), 3.0, f(3.0), g(3.0)) == pytest.approx(2.0)
    assert _cubic_min(3.0, f(3.0), g(3.0), 0.5, f(0.5), g(0.5)) == pytest.approx(2.0)
    assert _cubic_min(0.5, f(0.5), g(0.5), 3.0, f(3.0), g(3.0), bounds=(0.5, 1.5)) == 1.5  # clipped to the bounds
    assert _cubic_min(1.0, 0.0, 1.0, 1.0, 0.0, 1.0) == 1.0  # one point twice: the middle of the bounds
