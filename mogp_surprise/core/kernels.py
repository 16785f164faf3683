"""RBF kernels with ARD lengthscales, the paired product kernel and its Gaussian expectations.

The MW-GP kernel is k((a, b), (a', b')) = s * k_A(a, a') * k_B(b, b') with unit-scale ARD RBF
factors. A product of ARD RBF kernels on disjoint blocks equals one ARD RBF kernel on the
concatenated input, so :func:`paired_kernel` evaluates it in a single pass over ``[a, b]``;
``tests/core/test_kernels.py`` checks the identity against the explicit product.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


def scaled_sqdist(x: Tensor, z: Tensor) -> Tensor:
    """Squared Euclidean distances between rows of ``x`` (n, d) and ``z`` (m, d) -> (n, m).

    Uses the matrix-product expansion (one GEMM) and clamps round-off negatives to zero.
    """
    x2 = (x * x).sum(-1, keepdim=True)
    z2 = (z * z).sum(-1)
    return (x2 + z2 - 2.0 * (x @ z.transpose(-1, -2))).clamp_min_(0.0)


def rbf(x: Tensor, z: Tensor, lengthscale: Tensor) -> Tensor:
    """Unit-scale ARD RBF kernel exp(-0.5 * sum_d (x_d - z_d)^2 / l_d^2), shape (n, m)."""
    return torch.exp(-0.5 * scaled_sqdist(x / lengthscale, z / lengthscale))


def paired_kernel(x: Tensor, z: Tensor, lengthscale: Tensor, outputscale: Tensor) -> Tensor:
    """Product kernel between concatenated factor embeddings.

    Parameters
    ----------
    x : Tensor of shape (n, F * r)
        Concatenated embeddings [a_i, b_j, ...] of n index tuples.
    z : Tensor of shape (m, F * r)
        Paired inducing points [z^A_l, z^B_l, ...].
    lengthscale : Tensor of shape (F * r,)
    outputscale : Tensor (scalar)

    Returns
    -------
    Tensor of shape (n, m)
        ``outputscale * prod_f k_f(x_f, z_f)``; with ``x = z`` this is K_mm = K^A_mm ⊙ K^B_mm.
    """
    return outputscale * rbf(x, z, lengthscale)


def _augmented_inputs(x: Tensor, z: Tensor, lengthscale: Tensor, outputscale: Tensor) -> tuple[Tensor, Tensor]:
    """``[x, -|x|^2/2, 1]`` and ``[z, 1, log s - |z|^2/2]`` (inputs divided by the lengthscales).

    Their product ``xa @ za.T`` is ``log k(x, z)`` in one GEMM.
    """
    xs = x / lengthscale
    zs = z / lengthscale
    xa = torch.cat([xs, -0.5 * (xs * xs).sum(-1, keepdim=True), torch.ones_like(xs[:, :1])], dim=-1)
    za = torch.cat([zs, torch.ones_like(zs[:, :1]),
                    (torch.log(outputscale) - 0.5 * (zs * zs).sum(-1)).unsqueeze(-1)], dim=-1)
    return xa, za


def cross_kernel(x: Tensor, z: Tensor, lengthscale: Tensor, outputscale: Tensor) -> Tensor:
    """Fast :func:`paired_kernel` for training: one augmented GEMM and one ``exp``.

    ``log k = log s - |x|^2/2 - |z|^2/2 + x.z`` (inputs divided by the lengthscales) is formed by a
    single matrix product of ``[x, -|x|^2/2, 1]`` and ``[z, 1, log s - |z|^2/2]``. Round-off can
    make a value exceed ``outputscale`` by a few ulps; K_mm is always built with
    :func:`paired_kernel`, which clamps distances.
    """
    xa, za = _augmented_inputs(x, z, lengthscale, outputscale)
    # a contiguous right-hand side: with a transposed view BLAS's result for a row was seen to depend on
    # the other rows of xa (float32), and predictions must not depend on their batch
    return torch.exp_(xa @ za.transpose(-1, -2).contiguous())


def rbf_mean_gradient(kw: Tensor, x: Tensor, z: Tensor, lengthscale: Tensor) -> Tensor:
    """d/dx of sum_l k(x, z_l) w_l = sum_l kw_l (z_l - x) / l^2 (ARD RBF kernel), from ``kw = k(x, z) * w``."""
    return (kw @ z - x * kw.sum(-1, keepdim=True)) / (lengthscale * lengthscale)


class RBFKernel:
    """The MW-GP kernel as one object: k((a, b), (a', b')) = s * k_A(a, a') * k_B(b, b'), unit-scale ARD RBF
    factors, evaluated as one ARD RBF on the concatenated inputs.

    Every use of the kernel goes through this object: the exact form (``__call__``, ``gram``), the fast
    training form (``cross``: one augmented GEMM and an ``exp``), the gradient of a kernel-weighted sum
    (``mean_gradient``, the delta method and the Laplace curvature) and its expectations under a Gaussian
    input (``expectations``: the closed-form cold start). ``block`` restricts it to some input dimensions
    (the known factors of a prediction). The fused training nodes (:func:`data_fit`,
    :func:`~.linalg.inducing_terms`) hold its hand-written gradients.
    """

    def __init__(self, lengthscale: Tensor, outputscale: Tensor) -> None:
        self.lengthscale = lengthscale
        self.outputscale = outputscale

    def __call__(self, x: Tensor, z: Tensor) -> Tensor:
        """k(x, z), (n, m), with clamped squared distances (exact to round-off)."""
        return paired_kernel(x, z, self.lengthscale, self.outputscale)

    def gram(self, z: Tensor) -> Tensor:
        """k(z, z): with the paired inducing inputs, K_mm = K^A_mm ⊙ K^B_mm."""
        return self(z, z)

    def cross(self, x: Tensor, z: Tensor) -> Tensor:
        """k(x, z) by one augmented GEMM and an ``exp`` (:func:`cross_kernel`)."""
        return cross_kernel(x, z, self.lengthscale, self.outputscale)

    def mean_gradient(self, kw: Tensor, x: Tensor, z: Tensor) -> Tensor:
        """d/dx of sum_l k(x, z_l) w_l from ``kw = k(x, z) * w`` (:func:`rbf_mean_gradient`)."""
        return rbf_mean_gradient(kw, x, z, self.lengthscale)

    def expectations(self, mean: Tensor, var: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """E[k(x, z_l)] / s and E[k(x, z_l) k(x, z_l')] / s^2 for x ~ N(mean, diag(var)) (:func:`rbf_expectations`)."""
        return rbf_expectations(mean, var, z, self.lengthscale)

    def block(self, dims: Tensor) -> "RBFKernel":
        """The kernel on the input dimensions ``dims`` only (same output scale)."""
        return RBFKernel(self.lengthscale[dims], self.outputscale)

    def data_fit(self, x: Tensor, z: Tensor, w: Tensor, M: Tensor, resid0: Tensor,
                 workspace: "Workspace | None" = None, weights: Tensor | None = None) -> Tensor:
        """The fused minibatch data term with this kernel (:func:`data_fit`)."""
        return data_fit(x, z, self.lengthscale, self.outputscale, w, M, resid0, workspace, weights)


class _DataFit(torch.autograd.Function):
    """Fused minibatch data term of the whitened SVGP: forward and backward by hand.

    Returns ``sum_n lambda_n [(r_n - k_n^T w)^2 + k_n^T M k_n]`` (``lambda_n = 1`` unless per-rating
    weights are given) where ``k_n`` is the row of the
    cross-covariance between input ``x_n`` and the inducing points (:func:`cross_kernel`) and
    ``r_n`` the residual of the mean function. Without weights the forward pass forms the Gram
    matrix K^T K (the quadratic term is <K^T K, M>, and K^T K is also its gradient in M) and the
    backward pass forms ``K M``; with weights the forward pass forms ``K M`` (each row's term is needed)
    and the backward pass K^T diag(lambda) K. The backward pass then overwrites ``K M`` in place with
    ``dlogK = dK * K`` (the gradient of the quadratic term in K is ``2 K M``) and pushes that through
    the augmented kernel GEMM with two thin GEMMs, so every rating costs two rows of m x m products
    (K M and K^T K), three thin products and a few passes over the B x m block; autograd's generic
    graph of the same expression makes about twice as many passes. Once differentiable; a repeated
    ``backward`` (``retain_graph=True``) forms ``K M`` again.

    (Measured and rejected: writing K into a ``[K | e]`` buffer so that one Gram product also
    yields ``K^T e`` and ``e^T e`` -- ``exp`` on the strided block and the 129-wide GEMMs cost more
    than the three vector passes they save.)
    """

    @staticmethod
    def forward(ctx, x, z, lengthscale, outputscale, w, M, resid0, weights, workspace):
        xa, za = _augmented_inputs(x, z, lengthscale, outputscale)
        buffers = None if workspace is None else workspace.acquire(x.shape[0], z.shape[0], x.dtype, x.device)
        if buffers is None:
            k = torch.exp_(xa @ za.transpose(-1, -2))
        else:
            k = torch.mm(xa, za.transpose(-1, -2), out=buffers[0]).exp_()
        err = torch.addmv(resid0, k, w, alpha=-1.0)
        if weights is None:
            # sum_n k_n^T M k_n = <K^T K, M>: the Gram matrix is also the gradient of M, and K M is formed
            # in the backward pass, where it is needed (saves a pass over two B x m blocks per step)
            gram = k.transpose(-1, -2) @ k
            value = torch.dot(err, err) + torch.dot(gram.reshape(-1), M.reshape(-1))
            per_row, km = None, None
        else:  # sum_n lambda_n (err_n^2 + k_n^T M k_n); the bracket is also d value / d lambda_n
            km = k @ M if buffers is None else torch.mm(k, M, out=buffers[1])
            per_row = torch.addcmul((km * k).sum(-1), err, err)
            value = torch.dot(weights, per_row)
            gram = None
        ctx.save_for_backward(k, err, xa, za, lengthscale, outputscale, w, M, weights, per_row, gram)
        ctx.km = km  # an internal buffer, overwritten by the first backward (no version counter)
        ctx.km_out = None if buffers is None else buffers[1]
        ctx.kw_out = None if buffers is None else buffers[2]
        ctx.workspace = workspace if buffers is not None else None
        if ctx.workspace is not None and not any(ctx.needs_input_grad[:8]):
            ctx.workspace.release()  # no backward will come
            ctx.workspace = None
        return value

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        k, err, xa, za, lengthscale, outputscale, w, M, weights, per_row, gram = ctx.saved_tensors
        need_x, need_z, need_ls, need_s, need_w, need_m, need_r, need_lam = ctx.needs_input_grad[:8]
        g = float(grad)
        dx = dz = dls = ds = dw = dm = dr = dlam = None
        # with weights lambda_n every row's gradient is scaled by lambda_n: werr = lambda * err
        werr = err if weights is None else err * weights
        if need_lam:
            dlam = per_row * g
        if need_w:
            dw = (k.transpose(-1, -2) @ werr) * (-2.0 * g)
        # K diag(lambda) (weighted): in a workspace buffer, used for the gradient of M and of log K
        kw = None if weights is None else torch.mul(k, weights.unsqueeze(-1), out=ctx.kw_out) \
            if ctx.kw_out is not None else k * weights.unsqueeze(-1)
        ctx.kw_out = None
        if need_m:
            dm = (gram if weights is None else k.transpose(-1, -2) @ kw) * g
        if need_r:
            dr = werr * (2.0 * g)
        if need_x or need_z or need_ls or need_s:
            d = xa.shape[-1] - 2
            # K M: from the forward pass (weighted), else formed here (and again after retain_graph=True)
            km = ctx.km
            if km is None:
                km = k @ M if ctx.km_out is None else torch.mm(k, M, out=ctx.km_out)
            ctx.km = ctx.km_out = None  # a repeated backward allocates its own K M (the workspace is back)
            # dK = 2g diag(lambda) (K M - err w^T); dlogK = dK * K, both in place in the K M buffer
            if weights is None:
                glog = km.addr_(err, w, beta=2.0 * g, alpha=-2.0 * g).mul_(k)
            else:
                glog = km.addr_(err, w, alpha=-1.0).mul_(kw).mul_(2.0 * g)
            dxa = glog @ za  # (B, d + 2)
            # (m, d + 2), formed as (xa^T glog)^T: 0.35 vs 0.52 ms as glog^T @ xa
            dza = torch.mm(xa.transpose(-1, -2), glog).transpose(-1, -2)
            xs, zs = xa[:, :d], za[:, :d]
            dxs = dxa[:, :d] - dxa[:, d:d + 1] * xs
            dzs = dza[:, :d] - dza[:, d + 1:d + 2] * zs
            if need_s:
                ds = dza[:, d + 1].sum() / outputscale
            if need_x:
                dx = dxs / lengthscale
            if need_z:
                dz = dzs / lengthscale
            if need_ls:
                dls = -((dxs * xs).sum(0) + (dzs * zs).sum(0)) / lengthscale
        if ctx.workspace is not None:
            ctx.workspace.release()
            ctx.workspace = None
        return dx, dz, dls, ds, dw, dm, dr, dlam, None


class Workspace:
    """Three reusable B x m buffers for :func:`data_fit`, kept across training steps.

    A fresh 4 MB block per step costs about 1,000 minor page faults with glibc's allocator (it
    hands large blocks back to the kernel); reusing the blocks (K, K M and, with per-rating weights,
    K diag(lambda)) cut the faults of a training
    step from ~1,600 to ~450 (batch 8192, m = 128; a fault costs a few microseconds here). The
    buffers are lent to one forward pass at a time and come back after its backward pass; a
    forward that finds them lent (a graph not yet differentiated) allocates fresh blocks, so
    results never depend on the workspace. Should an old graph be differentiated after its
    buffers were reused, torch's version counter raises an error.
    """

    def __init__(self) -> None:
        self._buffers: tuple[Tensor, ...] | None = None
        self._lent = False

    def acquire(self, rows: int, cols: int, dtype: torch.dtype,
                device: torch.device) -> tuple[Tensor, ...] | None:
        """Views of shape (rows, cols) on the three buffers, or ``None`` if they are lent out."""
        if self._lent:
            return None
        bufs = self._buffers
        if bufs is None or bufs[0].shape[0] < rows or bufs[0].shape[1] != cols or bufs[0].dtype != dtype \
                or bufs[0].device != device:
            bufs = self._buffers = tuple(torch.empty(rows, cols, dtype=dtype, device=device) for _ in range(3))
        self._lent = True
        return tuple(b[:rows] for b in bufs)

    def release(self) -> None:
        self._lent = False


def data_fit(x: Tensor, z: Tensor, lengthscale: Tensor, outputscale: Tensor, w: Tensor, M: Tensor,
             resid0: Tensor, workspace: Workspace | None = None, weights: Tensor | None = None) -> Tensor:
    """``sum_n lambda_n [(resid0_n - k_n^T w)^2 + k_n^T M k_n]`` with a fused hand-written gradient.

    ``k_n = outputscale * exp(-|x_n - z|^2 / (2 lengthscale^2))`` as in :func:`cross_kernel`.
    These sums are all the minibatch ELBO needs from the B x m cross-covariance. ``weights``
    (shape (B,), the expected inverse noise variance of each rating under a heteroscedastic
    likelihood) default to 1 for every rating; they are differentiable. Pass a
    :class:`Workspace` when calling it once per step in a loop to reuse the large blocks.
    """
    return _DataFit.apply(x, z, lengthscale, outputscale, w, M, resid0, weights, workspace)


def rbf_expectations(mean: Tensor, var: Tensor, z: Tensor, lengthscale: Tensor) -> tuple[Tensor, Tensor]:
    """Expectations of a unit-scale ARD RBF kernel under a diagonal Gaussian input.

    For x ~ N(mean, diag(var)) returns

    - psi1[l] = E[k(x, z_l)], shape (m,)
    - psi2[l, l'] = E[k(x, z_l) k(x, z_l')], shape (m, m)

    in closed form (the Psi statistics of the Bayesian GPLVM). Used to integrate out the
    embedding of a user or item never seen in training.
    """
    ls2 = lengthscale * lengthscale
    # psi1: prod_d (1 + v/l^2)^(-1/2) exp(-(mu - z)^2 / (2 (l^2 + v)))
    log_norm1 = -0.5 * torch.log1p(var / ls2).sum()
    psi1 = torch.exp(log_norm1 - 0.5 * (((mean - z) ** 2) / (ls2 + var)).sum(-1))
    # psi2: prod_d (1 + 2v/l^2)^(-1/2) exp(-(z - z')^2 / (4 l^2) - (mu - zbar)^2 / (l^2 + 2v))
    log_norm2 = -0.5 * torch.log1p(2.0 * var / ls2).sum()
    diff = z[:, None, :] - z[None, :, :]
    zbar = 0.5 * (z[:, None, :] + z[None, :, :])
    expo = -(diff ** 2 / (4.0 * ls2)).sum(-1) - (((mean - zbar) ** 2) / (ls2 + 2.0 * var)).sum(-1)
    psi2 = torch.exp(log_norm2 + expo)
    return psi1, psi2

