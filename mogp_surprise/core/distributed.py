"""Data-parallel training on ``torch.distributed``: one model, N processes, gradients summed every step.

Every process (rank) holds the same training ratings and draws the same random numbers (one global
seed), so all ranks agree on the initial state (broadcast from rank 0 all the same, in case two
machines' linear algebra differ in the last bit), on the order of every epoch and on the global
minibatch of every step. Rank ``r`` of ``W`` computes the gradient of its shard of that minibatch,
the ratings ``r, r + W, r + 2W, ...`` of it, and the shards' gradients are summed
(:meth:`DataParallel.all_reduce_gradients`). The minibatch ELBO is split so that the sum is the
one-process gradient of the whole minibatch (:func:`.objective.elbo` with ``batch_size`` = the
global minibatch and ``share`` = 1 / W on the terms that do not depend on the ratings), so a step
on W ranks equals one step of one process up to the order of floating-point additions.

What travels per step. Dense parameters (inducing points, q(v), kernel and noise parameters) are
flattened into one buffer and all-reduced. A per-user or per-item table is never sent whole: every
rank knows the global minibatch, hence the rows whose gradient involves a rating of it (the users
and items of the minibatch); only those rows are all-reduced. (The implicit-feedback tables are
all-reduced whole: every step's forward pass multiplies them whole by the who-rated-what graph
anyway.) Every other row's gradient comes from the
terms that do not depend on the ratings alone (e.g. the noise offsets' KL), which are identical on
every rank and enter each with weight 1 / W: they are multiplied by W locally.

A rank that dies makes the others' next collective fail (gloo and NCCL report the closed
connection), and a rank that hangs makes them time out after the process group's ``timeout``:
either way the survivors raise :class:`DistributedError` instead of waiting forever.
"""
from __future__ import annotations

import datetime
import numbers
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .rows import distinct_rows

#: seconds a collective waits for the other ranks before the run is declared broken (``MOGP_DIST_TIMEOUT``)
DEFAULT_TIMEOUT_S = 300.0


class DistributedError(RuntimeError):
    """Another training process stopped, hung or disagrees; the message says which rank saw what."""


def launched_by_torchrun() -> bool:
    """Whether the environment of ``torchrun`` (or of any ``env://`` launcher) asks for more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_from_env(device: torch.device | str = "cpu", timeout_s: float | None = None) -> "DataParallel":
    """Join the process group described by ``torchrun``'s environment (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``): ``nccl`` for a CUDA device, ``gloo`` otherwise.

    ``timeout_s`` (default: ``$MOGP_DIST_TIMEOUT`` or 300 s) bounds how long a rank waits for the others.
    """
    import torch.distributed as dist

    if not dist.is_available():
        raise DistributedError("this PyTorch build has no torch.distributed support")
    device = torch.device(device)
    if timeout_s is None:
        timeout_s = float(os.environ.get("MOGP_DIST_TIMEOUT", DEFAULT_TIMEOUT_S))
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            local_rank, gpus = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
            if local_rank >= gpus:
                raise DistributedError(f"this process has LOCAL_RANK={local_rank} but its machine has {gpus} "
                                       f"CUDA device(s): nccl needs one GPU per process (torchrun "
                                       f"--nproc-per-node {gpus}), or train on the CPU with gloo (device='cpu')")
            torch.cuda.set_device(local_rank)
        try:
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
        except (RuntimeError, ValueError) as exc:
            raise DistributedError(f"could not join the process group ({backend}, "
                                   f"MASTER_ADDR={os.environ.get('MASTER_ADDR')!r}, "
                                   f"MASTER_PORT={os.environ.get('MASTER_PORT')!r}): {exc}") from exc
    return DataParallel.from_process_group()


def shutdown() -> None:
    """Leave the process group (no-op without one).

    Not after a :class:`DistributedError`: a broken group cannot be torn down cleanly (gloo aborts the
    process while tearing it down, even at interpreter exit), so report the error and leave with
    ``os._exit`` as the command line does.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@dataclass(frozen=True)
class DataParallel:
    """This process's place in a data-parallel run (the default process group must be initialised)."""

    rank: int
    world_size: int
    #: where the collectives' tensors must live: "cuda" for nccl, "cpu" for gloo
    device: str = "cpu"

    @classmethod
    def from_process_group(cls) -> "DataParallel":
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError("data-parallel training needs an initialised torch.distributed process group: launch "
                             "with torchrun (which sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and call "
                             "torch.distributed.init_process_group() or mogp_surprise.core.distributed.init_from_env()")
        return cls(dist.get_rank(), dist.get_world_size(), "cuda" if dist.get_backend() == "nccl" else "cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, rows: slice) -> slice:
        """This rank's ratings of the global minibatch ``rows`` (every W-th, starting at the rank)."""
        return slice(rows.start + self.rank, rows.stop, self.world_size)

    # -- collectives, each turning a failure into a DistributedError --------------------------------
    def _collective(self, what: str, fn, tensor: Tensor, *args) -> Tensor:  # fn works in place
        moved = tensor.to(self.device)
        try:
            fn(moved, *args)
        except RuntimeError as exc:  # DistBackendError and gloo/NCCL errors are RuntimeErrors
            raise DistributedError(
                f"rank {self.rank} of {self.world_size}: {what} failed; another training process stopped, hung "
                f"or cannot be reached ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}). "
                "The run is aborted; restart it (with --resume to continue from the last checkpoint)") from exc
        return moved.to(tensor.device)

    def all_reduce(self, tensor: Tensor, what: str = "summing gradients", op: str = "sum") -> Tensor:
        """``tensor`` summed (or maximised) over the ranks (a new tensor where it had to change device)."""
        import torch.distributed as dist

        return self._collective(what, dist.all_reduce, tensor, getattr(dist.ReduceOp, op.upper()))

    def broadcast(self, tensor: Tensor, what: str = "sharing the initial state") -> Tensor:
        """Rank 0's ``tensor`` (a new tensor where it had to change device)."""
        import torch.distributed as dist

        return self._collective(what, dist.broadcast, tensor, 0)

    def check_same_data(self, index: Tensor, y: Tensor, n_levels: tuple[int, ...], seed: Any = 0) -> None:
        """Raise :class:`DistributedError` unless every rank holds the same training data (same number of
        ratings and levels, same sums of ratings and of indices) and the same ``seed`` (``random_state``, which
        must be an int: ``ValueError`` before any exchange otherwise)."""
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise ValueError("data-parallel training needs `random_state` set to an int, the same on every process "
                             f"(it seeds the initialisation and the order of the ratings); got {seed!r}")
        weights = torch.arange(1, index.shape[1] + 1, dtype=torch.float64)
        fingerprint = torch.tensor([float(index.shape[0]), *map(float, n_levels), float(y.double().sum()),
                                    float((index.double() * weights).sum()), float(seed % 2 ** 52)],
                                   dtype=torch.float64)
        high = self.all_reduce(fingerprint.clone(), "comparing the training data", op="max")
        low = self.all_reduce(-fingerprint, "comparing the training data", op="max").neg_()
        if not torch.equal(high[-1:], low[-1:]):
            raise DistributedError(f"rank {self.rank}: the ranks were given different `random_state` ({seed} here); "
                                   "every rank must use the same one")
        if not torch.equal(high, low):
            raise DistributedError(
                f"rank {self.rank}: the ranks hold different training data ({int(index.shape[0]):,} ratings "
                f"here, levels {tuple(n_levels)}); every rank must read the same ratings")

    @torch.no_grad()
    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Give every rank rank 0's parameters (one buffer)."""
        params = list(module.parameters())
        flat = self.broadcast(torch.cat([p.reshape(-1) for p in params]))
        _unflatten(flat, params, lambda p, chunk: p.copy_(chunk))

    @torch.no_grad()
    def all_reduce_gradients(self, module: torch.nn.Module, touched: dict[int, Tensor], extra: Tensor) -> Tensor:
        """Sum the ranks' gradients (see the module docstring) and ``extra`` (a scalar: the loss); return
        the sum of ``extra``.

        ``touched``: for each per-level table (by ``id``), the sorted rows whose gradient involves a
        rating of the global minibatch; every other parameter is all-reduced whole.
        """
        row_sparse = getattr(module, "sparse_rows", False)  # the tables' gradients are row-sparse
        trained = [p for p in module.parameters() if p.requires_grad]  # (not the views of a packed table)
        dense = [p for p in trained if id(p) not in touched]
        tables = [p for p in trained if id(p) in touched]
        for p in dense if row_sparse else trained:  # an empty shard leaves gradients unset
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        blocks = [extra.reshape(1).to(module.dtype)] + [p.grad.reshape(-1) for p in dense]
        for p in tables:
            rows = touched[id(p)]
            if row_sparse:
                block = torch.zeros((rows.numel(), *p.shape[1:]), dtype=p.dtype, device=p.device)
                if p.grad is not None:
                    g = p.grad.coalesce()
                    block.index_add_(0, torch.searchsorted(rows, g.indices()[0]), g.values())
            else:
                block = p.grad.index_select(0, rows)
            blocks.append(block.reshape(-1))
        flat = self.all_reduce(torch.cat(blocks))
        offset = 1 + sum(p.numel() for p in dense)
        _unflatten(flat[1:offset], dense, lambda p, chunk: p.grad.copy_(chunk))
        for p in tables:
            rows = touched[id(p)]
            size = rows.numel() * int(np.prod(p.shape[1:], dtype=np.int64))
            block = flat[offset:offset + size].reshape(rows.numel(), *p.shape[1:])
            offset += size
            if not rows.numel() and p.grad is None:  # a table with no gradient this step (accumulated elsewhere)
                continue
            if row_sparse:
                p.grad = torch.sparse_coo_tensor(rows.unsqueeze(0), block, p.shape, is_coalesced=True,
                                                 check_invariants=False)
            else:  # rows outside the minibatch: the rank-independent terms, weighted 1 / W on each rank
                p.grad.mul_(self.world_size)
                p.grad.index_copy_(0, rows, block)
        return flat[0]


    def all_reduce_implicit(self, gradient: Tensor) -> Tensor:
        """The accumulated gradient of one feeding table's implicit sums (core/implicit.py), summed over the ranks
        (rows no step of the run touched since the last update are zero on every rank: only the others travel)."""
        rows = torch.nonzero(gradient.abs().sum(1) > 0).squeeze(1)
        rows = self.all_reduce(torch.zeros(gradient.shape[0], dtype=torch.uint8, device=gradient.device).index_fill_(
            0, rows, 1), "sharing the rows of the implicit-feedback gradient", op="max").nonzero().squeeze(1)
        out = torch.zeros_like(gradient)
        out[rows] = self.all_reduce(gradient.index_select(0, rows))
        return out


def _unflatten(flat: Tensor, params: list[Tensor], put) -> None:
    offset = 0
    for p in params:
        put(p, flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


def touched_rows(module, index: Tensor) -> dict[int, Tensor]:
    """For each term table of ``module`` (an :class:`~.model.MWGPModule`) that a minibatch reads by its own
    levels, those levels (sorted) for the global minibatch ``index``.

    The implicit-feedback tables are not listed (so they are all-reduced whole): every step's
    forward pass already multiplies them whole by the who-rated-what graph.
    """
    rows = [distinct_rows(index[:, f])[0] for f in range(module.n_factors)]  # the model's one way to find them
    out = {id(table): rows[spec.factor] for _, spec, table in module.tables() if spec.feeds is None}
    out.update({id(pack): rows[f] for f, (pack, _) in module.packed_tables().items()})
    if module.implicit.accumulating:  # row-sparse: the implicit-feedback tables get no gradient per step
        out.update({id(table): rows[0][:0] for _, spec, table in module.tables() if spec.feeds is not None})
        out.update({id(pack): rows[0][:0] for _, pack, _ in module.packed_feeders()})
    return out
