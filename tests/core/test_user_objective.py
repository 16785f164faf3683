"""The per-user fold-in objective (mogp_surprise.core.user_objective): its fixed per-user data, start and
Laplace variances against the trained module's own quantities. The objective's value and gradient against
the training ELBO are checked through ``fold_in_objective`` in ``test_foldin.py``."""
from __future__ import annotations

import numpy as np
import torch

from mogp_surprise.core.foldin import fold_in
from mogp_surprise.core.kernels import paired_kernel
from mogp_surprise.core.objective import noise_moments
from mogp_surprise.core.user_objective import FoldInContext
from tests.core.test_foldin import ITEMS, R, USER, _implicit_mf, _random_model


def _user_index() -> torch.Tensor:
    return torch.stack([torch.full((len(ITEMS),), USER), torch.as_tensor(ITEMS)], 1)


def test_population_fold_in_variance_and_start_of_the_bilinear_factor() -> None:
    """The folded user's factor variance is 1 / (1 / mf_var + sum_j q~_j^2 / sigma^2) (homoscedastic: lambda =
    1 / sigma^2), computed here from the posterior's tables; a known user's fold-in starts from their trained
    factor (raw part: p~_u minus the implicit sum)."""
    mod, post = _random_model(False, True, True, mf_rank=2)
    user = fold_in(post, ITEMS, np.linspace(1.0, 5.0, len(ITEMS)))
    q = post.mf_factors[1][torch.as_tensor(ITEMS)].double()
    want = 1.0 / (1.0 / post.mf_var[0] + (q * q).sum(0) / post.noise)
    np.testing.assert_allclose(user.mf_factor_var, want.numpy(), rtol=1e-10)
    ctx = FoldInContext(post)
    data = ctx.user_data(ITEMS, np.zeros(len(ITEMS)))
    theta = ctx.start(data, USER)
    np.testing.assert_allclose(theta[R + 3:].numpy(), (post.mf_factors[0][USER].double()
                                                       - torch.as_tensor(_implicit_mf(post, ITEMS))).numpy(), rtol=1e-12)
    np.testing.assert_allclose(ctx.start(data, None)[R + 3:].numpy(),
                               (post.mf_mean[0] - torch.as_tensor(_implicit_mf(post, ITEMS))).numpy(), rtol=1e-12)


def test_kernel_rows_and_noise_moments_are_those_of_the_trained_module() -> None:
    """At the trained user's own GP input and q(s), the context's kernel rows k_j (from the items' fixed
    half) and (E log sigma_j^2, lambda_j) equal the module's for the same (user, item) tuples."""
    mod, post = _random_model(True, True, True, mf_rank=2)
    ctx = FoldInContext(post, prior="model")
    data = ctx.user_data(ITEMS, np.zeros(len(ITEMS)))
    index = _user_index()
    with torch.no_grad():
        x = mod.input_tables()[0][0][USER]
        kk, mean, _ = ctx.moments(data, x)
        want = paired_kernel(mod.features(index), mod.inducing, mod.lengthscale(), mod.outputscale())
        np.testing.assert_allclose(kk.numpy(), want.numpy(), rtol=1e-10, atol=1e-14)
        got = ctx.noise(data, mod.noise_offset_mean[0][USER], mod.noise_offset_logvar[0][USER])
        for a, b in zip(got, noise_moments(mod, index)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10)
    assert np.ptp(mean.numpy()) > 0  # E_q[f_j] varies over the items: the check is not trivial


def test_start_and_split_agree_on_the_parameter_layout() -> None:
    """(a, b, mu, log v, p) from ``start``: the prior mean, or a known user's fitted values (raw parts)."""
    mod, post = _random_model(True, True, True, mf_rank=2)
    ctx = FoldInContext(post)
    data = ctx.user_data(ITEMS, np.zeros(len(ITEMS)))
    a, b, mu, logvar, p = ctx.split(ctx.start(data, None))
    np.testing.assert_allclose((a + data.implicit).numpy(), post.emb_mean[0].double().numpy(), rtol=1e-12)
    assert float(b) == float(post.bias_mean[0]) and float(mu) == float(post.foldin["user_noise_population"][0])
    assert float(logvar) == float(torch.log(post.foldin["user_noise_population"][1].double()))
    a, b, mu, logvar, p = ctx.split(ctx.start(data, USER))
    np.testing.assert_allclose((a + data.implicit).numpy(), post.embeddings[0][USER].numpy(), rtol=1e-12)
    assert float(b) == float(post.biases[0][USER]) and float(mu) == float(post.foldin["noise_offset_mean"][0][USER])
    assert float(logvar) == float(post.foldin["noise_offset_logvar"][0][USER])
    assert p.shape == (2,) and a.shape == (R,)
