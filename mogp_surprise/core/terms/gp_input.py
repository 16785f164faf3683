"""The GP input of every level: an embedding, plus SVD++-style implicit feedback.

Each level of each factor has an embedding of width r (``latent_dim``), under the prior
N(0, 1 / ``embedding_reg``) (MAP). The GP input of a rating is the concatenation of its levels' inputs.
With implicit feedback (``implicit=True``, users and items only; Koren 2008) a user's and an item's
inputs are::

    x_u  = a_u + |N(u)|^{-1/2} sum_{j in N(u)} y_j        (N(u): the items the user rated)
    x'_j = b_j + |N(j)|^{-1/2} sum_{u in N(j)} x~_u       (N(j): the users who rated the item)

with implicit factors y (one row per item) and x~ (one row per user) under the same prior: a user with
few ratings is placed near users who rated the same items. The embeddings start from a PCA of the rating matrix (``init="pca"``; the residuals of
the closed-form biases when there are biases) or N(0, 0.5^2).
"""
from __future__ import annotations

from typing import Any

import torch

from ..initialization import INIT_SCALE, pca_embeddings
from .base import RatingParts, Rows, Table, Term, register_term

#: smallest variance of the population an unseen level's GP input is drawn from
INPUT_POPULATION_FLOOR = 1e-8


@register_term
class GPInput(Term):
    name = "gp_input"
    order = 0
    builtin = True

    @classmethod
    def from_config(cls, config: Any, n_levels: tuple[int, ...]) -> "GPInput":
        return cls(n_levels, {"latent_dim": int(config.latent_dim), "embedding_reg": float(config.embedding_reg),
                              "implicit": bool(config.implicit) and len(n_levels) >= 2})

    def tables(self) -> list[Table]:
        r, reg = self.options["latent_dim"], self.options["embedding_reg"]
        out = [Table(f"embedding_{f}", f, r, reg, laplace=True, population_floor=INPUT_POPULATION_FLOOR)
               for f in range(len(self.n_levels))]
        if self.options["implicit"]:  # implicit_0: one row per item, feeding the users; implicit_1 the reverse
            out += [Table(f"implicit_{side}", 1 - side, r, reg, feeds=f"embedding_{side}") for side in (0, 1)]
        return out

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        for f in range(len(self.n_levels)):
            parts.set_input(f, rows[f"embedding_{f}"])

    def pair_combine(self, index: tuple[int, ...], tables: dict, extras: Any, parts: Any) -> bool:
        for f in range(len(self.n_levels)):
            values, var = tables[f"embedding_{f}"]
            parts.set_input(f, Rows(values[index[f]], None if var is None else var[index[f]]))
        return True

    @torch.no_grad()
    def initialise(self, init: Any) -> None:
        for f in range(len(self.n_levels)):
            table = self.table(f"embedding_{f}")
            table.copy_(init.randn(table.shape) * INIT_SCALE)

    @torch.no_grad()
    def initialise_from_data(self, init: Any) -> None:
        if init.method == "pca" and len(self.n_levels) >= 2:
            users, items = pca_embeddings(init, self.options["latent_dim"])
            if users is not None:
                self.table("embedding_0")[:, :users.shape[1]] = users
                self.table("embedding_1")[:, :items.shape[1]] = items
