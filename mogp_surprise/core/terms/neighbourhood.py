"""What the user rated among the item's most similar items: Koren's global neighbourhood model (2008) as a term.

    r_ui += |R(i; u)|^(-1/2) sum_{j in R(i; u)} (e_uj w_{i,k(j)} + c_{i,k(j)})

- The item's neighbours are its K (``NEIGHBOURS``) most similar items, j = its k(j)-th. The similarity is the
  cosine of the items' residual vectors over all users (0 where a user did not rate the item: the sum over the
  common raters, each norm over the item's own raters), shrunk by n / (n + ``SHRINK``), n the number of common
  raters.
- R(i; u) holds the neighbours of i that u rated.
- e_uj is the residual of u's rating of j after the biases' closed-form start. That start is empirical Bayes,
  as the bias term starts (:meth:`~.bias.Bias.initialise_from_data`). It is fixed before training.
- w and c are item tables of width K (``weight``, ``offset``), trained with the rest under the prior
  N(0, 1 / ``PRIOR``). Their diagonal Laplace variances enter a known pair's predictive variance,
  |R|^-1 sum_{j in R} (e_uj^2 v_w + v_c).

On by default for (user, item) data from 50,000 ratings up to ratings x items = 2^32, below 200,000 ratings (early
stopping) only where the ratings fill 1/32 of the users x items (``neighbourhood="auto"``, see
:meth:`~mogp_surprise.core.config.MWGPConfig.for_data`); ``neighbourhood=True`` / ``False`` switches it on or off at
any size.

Measured on the recorded 5 folds (``docs/model.md``), against the model without it:

- ML-1M: RMSE 0.8289 -> 0.8243, NLL 1.1954 -> 1.1889, 90 % coverage 0.891 -> 0.892 (12 epochs with it, 20 without);
- ML-100K: 0.8810 -> 0.8784, NLL 1.2579 -> 1.2561.

A rating's pair inputs (e_uj and whether u rated j, for i's K neighbours) are looked up in the training
ratings, kept with the model. The fitted extras hold:

- ``graph_keys``: user * n_items + item, sorted;
- ``graph_residuals``: the residuals of those keys;
- ``neighbours``: (items, K), with -1 for no neighbour;
- ``item_bias`` and ``user_shrink``: a new user's residuals.

A folded-in user's answers become the user's row of a graph: appended users' rows form a graph of their own
(``added_keys``, ``added_residuals``), so that serving a new user does not copy the training graph; a replaced
user's row goes into the training graph. Their residuals come from the item biases and a user bias shrunk as in
the start.

Cost. The similarity is formed before training (:mod:`~mogp_surprise.core.similarity`): dense float32 products
where the ratings fill the (users x items) matrix to at least 1 / 32 (ML-100K, ML-1M), else (items x users) sparse
products in blocks of items, about (ratings x items) multiply-adds. Memory: the training ratings once more, plus
2 K floats per item. In training, the residuals of every training rating's K neighbours are formed once per fit (one
float each, NaN where the user did not rate the neighbour) and a step reads the rows of its ratings. Pairs of one
known user (a catalogue, fold-in's answers, a top-N list) read the user's row spread over a dense vector of the
items: with numba in one compiled call (:func:`~..serving_kernel.user_near`), else in torch where they have as many
neighbours as a sixteenth of the items; any other pair looks its K neighbours up by binary search in the sorted
keys. One pair served alone takes its part from one compiled call (:meth:`Neighbourhood.pair_part`), and a user's
whole catalogue too (:meth:`Neighbourhood.catalogue_part`: the items that have the user's rated items as
neighbours, through the neighbours' inverse).
"""
from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

from ..optim import serving_kernel
from ..similarity import item_neighbours, neighbour_residuals
from .base import RatingParts, Rows, Table, Term, register_term
from .bias import Bias, _variances

#: neighbours per item, their tables' prior precision, and the shrinkage of the similarity by common raters
#: (measured on one ML-1M split: K 30 / 50 / 100 at prior 100: 0.8231 / 0.8235 / 0.8246; prior 30 / 100 / 300 at
#: K 50: 0.8252 / 0.8235 / 0.8252; docs/history.md)
NEIGHBOURS, PRIOR, SHRINK = 30, 100.0, 100.0
#: pairs of one user read the user's row of the graph as a dense vector of the items where they have at least
#: 1 / ONE_USER_ROW as many neighbours as there are items (a catalogue, a folded-in user's answers), else search
ONE_USER_ROW = 16


@register_term
class Neighbourhood(Term):
    name = "neighbourhood"
    builtin = True
    order = 40
    reads_pairs = True
    mean_only = True

    @classmethod
    def from_config(cls, config: Any, n_levels: tuple[int, ...]) -> "Neighbourhood | None":
        # on with neighbourhood=True, or named in extra_terms (how it was switched on before it was built in);
        # "auto" is made concrete from the data by the trainer (MWGPConfig.for_data), so "auto" here is off
        switched_on = isinstance(config.neighbourhood, (bool, np.bool_)) and bool(config.neighbourhood)
        if not switched_on and cls.name not in config.extra_terms:
            return None
        if len(n_levels) != 2:
            raise ValueError(f"the neighbourhood term needs a (user, item) model; this one has {len(n_levels)} "
                             "factors")
        return cls(n_levels, {"neighbours": max(min(NEIGHBOURS, n_levels[1] - 1), 1), "prior": PRIOR,
                              "shrink": SHRINK})

    def tables(self) -> list[Table]:
        k, prior = int(self.options["neighbours"]), float(self.options["prior"])
        return [Table("weight", 1, k, prior, laplace=True), Table("offset", 1, k, prior, laplace=True)]

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        near, rated = rows["near_residual"].value, rows["near_rated"].value
        weight, offset = rows["weight"], rows["offset"]
        count = rated.sum(-1)
        norm = (count + (count == 0)) ** -0.5  # no neighbour rated: the sums are 0
        var = None
        if weight.var is not None and offset.var is not None:  # their Laplace variances (independent entries)
            var = norm * norm * ((near * near * weight.var).sum(-1) + (rated * offset.var).sum(-1))
        parts.add_mean(norm * ((near * weight.value).sum(-1) + (rated * offset.value).sum(-1)), var)

    # -- before training: the residual graph and the neighbours ------------------------------------------------
    @torch.no_grad()
    def initialise_from_data(self, init: Any) -> None:
        """The graph and the neighbours (module docstring), and the positions of each training rating's
        neighbours in the graph (a step reads its inputs there). Formed once per training data of a fit:
        early stopping's runs share them (``init.shared``). Non-persistent buffers: they move with the module
        and a resumed fit forms them again."""
        key = (self.name, tuple(self.options.items()), _fingerprint(init.index, init.y))
        formed = init.shared.get(key)
        if formed is None:
            formed = init.shared[key] = self._formed(init)
        for name, value in formed.items():
            value = value.to(init.device)
            if name in self._buffers:
                setattr(self, name, value)
            else:
                self.register_buffer(name, value, persistent=False)

    def _formed(self, init: Any) -> dict[str, Tensor]:
        index, dtype = init.index, torch.float64
        n_users, n_items = self.n_levels
        bias = Bias(self.n_levels, {"bias_reg": "auto"}).to(device=init.device, dtype=dtype)
        bias.initialise_from_data(replace(init, dtype=dtype))
        b_user, b_item = bias.table("bias_0").detach(), bias.table("bias_1").detach()
        y = init.y.to(dtype)
        residual = y - b_user[index[:, 0]] - b_item[index[:, 1]]
        # a new user's bias is shrunk as the start shrinks the users': by s2 / t2 (bias._variances)
        toward_user = y - b_item[index[:, 1]]
        counts = torch.bincount(index[:, 0], minlength=n_users).to(dtype)
        sums = torch.zeros(n_users, dtype=dtype, device=init.device).index_add_(0, index[:, 0], toward_user)
        within, spread = _variances(toward_user, sums, counts, index[:, 0])
        keys, order = torch.sort(index[:, 0] * n_items + index[:, 1])
        neighbours = item_neighbours(index, residual, self.n_levels, int(self.options["neighbours"]),
                                     float(self.options["shrink"]))
        ordered = residual[order].to(init.dtype)
        return {"graph_keys": keys, "graph_residuals": ordered, "neighbours": neighbours,
                "item_bias": b_item, "user_shrink": torch.tensor([within / spread], dtype=dtype),
                "training_near": neighbour_residuals(index, neighbours, keys, order, ordered, n_items)}

    def fitted_extras(self) -> dict[str, Tensor]:
        return {name: self._buffers[name] for name in EXTRAS if name in self._buffers}

    # -- a rating's pair inputs ------------------------------------------------------------------------------
    def pair_rows(self, index: Any, extras: dict[str, Any], rows: Tensor | None = None) -> dict[str, Rows]:
        near = self._buffers.get("training_near") if rows is not None else None
        if near is not None:  # training ratings: their neighbours' residuals, formed before training (NaN: not rated)
            values = near.index_select(0, rows)  # (a new tensor: its NaN become 0 in place)
            rated = (values == values).to(values.dtype)  # (NaN is the one value unequal to itself)
            return {"near_rated": Rows(rated), "near_residual": Rows(values.nan_to_num_(0.0))}
        return _near(index[:, 0], index[:, 1], extras["neighbours"], _graphs(extras), self.n_levels[1])

    def pair_part(self, index: tuple[int, ...], tables: dict[str, tuple[np.ndarray, np.ndarray | None]],
                  extras: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray | None] | None:
        """One pair's part in one compiled call (:func:`~..serving_kernel.pair_neighbourhood`; numba), where
        :meth:`pair_rows` and :meth:`combine` take some thirty numpy calls (ML-1M ``predict``, one process, A/B: 84 ->
        51 us; 42 us without the term). None without numba."""
        part = self._pair_moments(index, tables, extras)
        if part is None:
            return None
        dtype = tables["weight"][0].dtype
        return np.array((part[0],), dtype=dtype), None if part[1] is None else np.array((part[1],), dtype=dtype)

    def pair_combine(self, index: tuple[int, ...], tables: dict, extras: Any, parts: Any) -> bool:
        part = self._pair_moments(index, tables, extras)
        if part is not None:
            parts.add_mean(*part)
        return part is not None

    def _pair_moments(self, index: tuple[int, ...], tables: dict, extras: dict) -> tuple[float, float | None] | None:
        kernel = serving_kernel("pair_neighbourhood")
        if kernel is None:
            return None
        user, item = index
        (weight, weight_var), (offset, offset_var) = tables["weight"], tables["offset"]
        with_var = weight_var is not None and offset_var is not None
        if user < 0 or item < 0:  # no pair inputs: nothing added
            return 0.0, 0.0 if with_var else None
        added = extras.get("added_keys")  # (the arrays as they are, not through _kernel_graphs: 0.5 of a 22 us call)
        mean, var = kernel(extras["graph_keys"], extras["graph_residuals"], _NO_KEYS if added is None else added,
                           _NO_VALUES if added is None else extras["added_residuals"], extras["neighbours"], weight,
                           offset, weight_var if with_var else _NO_ROWS, offset_var if with_var else _NO_ROWS, user,
                           item, self.n_levels[1])
        return mean, var if with_var else None

    def catalogue_part(self, user: int, rows: dict[str, Rows], extras: dict[str, Any], variance: bool
                       ) -> tuple[Tensor, Tensor | None] | None:
        """A known user's part with every item in one compiled call (:func:`~..serving_kernel.user_neighbourhood`:
        over the user's ratings and the items that have them as neighbours, where :meth:`pair_rows` and
        :meth:`combine` form every item's K neighbours: ML-1M's catalogue, medians over 300 users, the means 0.79 ->
        0.08 ms, with the variances 0.93 -> 0.13 ms). None without numba or off the CPU."""
        kernel, neighbours = serving_kernel("user_neighbourhood"), extras["neighbours"]
        if kernel is None or neighbours.device.type != "cpu":
            return None
        weight, offset = rows["weight"], rows["offset"]
        with_var = variance and weight.var is not None and offset.var is not None
        start, slots = _inverse_neighbours(neighbours)
        mean, var = np.empty(self.n_levels[1]), np.empty(self.n_levels[1] if with_var else 0)
        kernel(*_kernel_graphs(_graphs(extras)), neighbours.numpy(), start, slots, weight.value.detach().numpy(),
               offset.value.detach().numpy(), weight.var.detach().numpy() if with_var else _NO_ROWS,
               offset.var.detach().numpy() if with_var else _NO_ROWS, user, mean, var)
        dtype = weight.value.dtype
        return torch.from_numpy(mean).to(dtype), torch.from_numpy(var).to(dtype) if with_var else None

    def user_pair_rows(self, items: Tensor, answers: tuple[Tensor, Tensor], extras: dict[str, Tensor]
                       ) -> dict[str, Rows]:
        rated, y = answers
        keys, residuals = self._user_graph(rated, y, extras, 0)
        return _near(torch.zeros_like(items), items, extras["neighbours"],
                     [(keys, residuals.to(extras["graph_residuals"].dtype))], self.n_levels[1])

    def _user_graph(self, rated: Tensor, y: Tensor, extras: dict[str, Tensor], row: int) -> tuple[Tensor, Tensor]:
        """One user's graph entries (keys in ``row``, residuals) from the user's answers."""
        toward_user = y.to(torch.float64) - extras["item_bias"][rated].to(torch.float64)
        b_user = toward_user.sum() / (rated.numel() + float(extras["user_shrink"][0])) if rated.numel() else 0.0
        keys, order = torch.sort(row * self.n_levels[1] + rated)
        return keys, (toward_user - b_user)[order]

    def extras_with_users(self, extras: dict[str, Tensor], answers: list[tuple[np.ndarray, np.ndarray] | None],
                          rows: np.ndarray | None, n_users: int) -> dict[str, Tensor]:
        """Appended users' graph rows go to a graph of their own (``added_keys``, ``added_residuals``), so that
        serving a new user does not copy the training graph (ML-1M: 1.6 ms a request); replaced users' rows are
        spliced into the one graph: a user's keys are one stretch of the sorted keys, so the stretch is cut out and
        the new row, sorted, put in its place (the same graph as sorting every key again, without the sort of a
        million keys: ML-1M, a known user's 3 new ratings and their list 82-97 -> 20-25 ms)."""
        keys, residuals = extras["graph_keys"], extras["graph_residuals"]
        rows_of = {}  # place -> that user's new (sorted keys, residuals)
        places = np.arange(n_users, n_users + len(answers)) if rows is None else np.asarray(rows)
        for place, given in zip(places, answers):
            if given is not None:
                rated = torch.as_tensor(np.asarray(given[0], dtype=np.int64), device=keys.device)
                y = torch.as_tensor(np.asarray(given[1], dtype=np.float64), device=keys.device)
                k, r = self._user_graph(rated, y, extras, int(place))
                rows_of[int(place)] = (k, r.to(residuals.dtype))
        if rows is None:  # appended users come after every known one, each sorted: their graph stays sorted
            new = [rows_of[int(p)] for p in places if int(p) in rows_of]
            return {**extras, "added_keys": torch.cat([extras.get("added_keys", keys[:0])] + [k for k, _ in new]),
                    "added_residuals": torch.cat([extras.get("added_residuals", residuals[:0])] + [r for _, r in new])}
        if "added_keys" in extras:  # the appended users' graph joins the one graph: appended after every user of
            # the one graph (whose users were all known when they were appended), their keys come after its keys
            keys, residuals = torch.cat([keys, extras["added_keys"]]), torch.cat([residuals, extras["added_residuals"]])
        n_items = self.n_levels[1]
        order = np.sort(places)
        bounds = torch.searchsorted(keys, torch.as_tensor(np.stack([order, order + 1], 1) * n_items,
                                                          device=keys.device)).tolist()
        key_parts, residual_parts, done = [], [], 0
        for place, (low, high) in zip(order.tolist(), bounds):
            key_parts.append(keys[done:low])
            residual_parts.append(residuals[done:low])
            if place in rows_of:
                key_parts.append(rows_of[place][0])
                residual_parts.append(rows_of[place][1])
            done = high
        key_parts.append(keys[done:])
        residual_parts.append(residuals[done:])
        rest = {k: v for k, v in extras.items() if k not in ("added_keys", "added_residuals")}
        return {**rest, "graph_keys": torch.cat(key_parts), "graph_residuals": torch.cat(residual_parts)}


#: the fitted extras saved with the model (module docstring)
EXTRAS = ("graph_keys", "graph_residuals", "neighbours", "item_bias", "user_shrink")


#: no appended users' graph, no Laplace variances (the kernel's arguments)
_NO_KEYS, _NO_VALUES, _NO_ROWS = np.empty(0, dtype=np.int64), np.empty(0), np.empty((0, 0))


#: each neighbours table's inverse (:func:`_inverse_neighbours`), while the table lives
_INVERSES: "WeakIdKeyDictionary" = WeakIdKeyDictionary()


def _inverse_neighbours(neighbours: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Which items have item j as a neighbour, as CSR: ``slots[start[j]:start[j + 1]]`` = i * K + k where
    ``neighbours[i, k] == j``, in increasing order (formed once per table, about 1 ms on ML-1M)."""
    found = _INVERSES.get(neighbours)
    if found is None:
        flat = neighbours.detach().cpu().numpy().reshape(-1)
        slots = np.nonzero(flat >= 0)[0]
        slots = slots[np.argsort(flat[slots], kind="stable")]
        start = np.zeros(neighbours.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(flat[slots], minlength=neighbours.shape[0]), out=start[1:])
        found = _INVERSES[neighbours] = (start, slots.astype(np.int64))
    return found


def _graphs(extras: dict[str, Any]) -> list[tuple[Any, Any]]:
    """The graphs a pair's inputs are looked up in: the training graph (with any replaced users' rows), and the
    appended users' graph where users were appended (their rows are in no other)."""
    graphs = [(extras["graph_keys"], extras["graph_residuals"])]
    if "added_keys" in extras:
        graphs.append((extras["added_keys"], extras["added_residuals"]))
    return graphs


def _kernel_graphs(graphs: list[tuple[Tensor, Tensor]]) -> tuple[np.ndarray, ...]:
    """The training graph's and the appended users' graph's keys and residuals as the compiled kernels take them:
    numpy views, an empty graph where no user was appended."""
    (keys, residuals), added = graphs[0], graphs[1] if len(graphs) > 1 else (_NO_KEYS, _NO_VALUES)
    return keys.numpy(), residuals.numpy(), np.asarray(added[0]), np.asarray(added[1])


def _fingerprint(index: Tensor, y: Tensor) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(index.detach().cpu().numpy().tobytes())
    digest.update(y.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def _near(users: Any, items: Any, neighbours: Any, graphs: list[tuple[Any, Any]], n_items: int) -> dict[str, Rows]:
    """The pair inputs of (user, item) pairs: for each of the item's neighbours, the user's residual of it and
    whether the user rated it (0 for an unseen user or item, and where the item has no such neighbour).
    ``graphs``: (sorted keys, residuals) graphs of disjoint users (:func:`_graphs`)."""
    dtype = graphs[0][1].dtype
    if isinstance(graphs[0][0], np.ndarray):  # the one-pair serving path
        users, items = np.asarray(users), np.asarray(items)
        nb = neighbours[np.maximum(items, 0)]
        query = np.maximum(users, 0)[:, None] * n_items + nb
        valid = (nb >= 0) & ((users >= 0) & (items >= 0))[:, None]
        near, hit = np.zeros(query.shape, dtype), np.zeros(query.shape, bool)
        for keys, residuals in graphs:
            if keys.size:
                pos = np.minimum(np.searchsorted(keys, query), keys.size - 1)
                found = (keys[pos] == query) & valid
                near, hit = np.where(found, residuals[pos], near), hit | found
        return {"near_residual": Rows(near.astype(dtype, copy=False)), "near_rated": Rows(hit.astype(dtype))}
    kernel = serving_kernel("user_near") if neighbours.device.type == "cpu" else None
    if kernel is not None and users.numel() and bool((users == users[0]).all()) and int(users[0]) >= 0:
        # one known user's pairs (a catalogue, fold-in's answers, a top-N list): one compiled call
        shape = (items.shape[0], neighbours.shape[1])
        near, hit = torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)
        kernel(*_kernel_graphs(graphs), neighbours.numpy(), int(users[0]), items.numpy(), near.numpy(), hit.numpy())
        return {"near_residual": Rows(near), "near_rated": Rows(hit)}
    known = (users >= 0) & (items >= 0)
    nb = neighbours[items.clamp_min(0)]
    zeros = torch.zeros(nb.shape, dtype=dtype, device=nb.device)
    if all(keys.numel() == 0 for keys, _ in graphs) or not bool(known.any()):  # e.g. a pattern of unseen levels
        return {"near_residual": Rows(zeros), "near_rated": Rows(zeros)}
    if nb.numel() * ONE_USER_ROW >= n_items and bool((users == users[0]).all()):
        return _near_one_user(int(users[0]), known, nb, graphs, n_items)
    query = (users.clamp_min(0)[:, None] * n_items + nb).contiguous()
    valid = (nb >= 0) & known[:, None]
    near, hit = zeros, torch.zeros(nb.shape, dtype=torch.bool, device=nb.device)
    for keys, residuals in graphs:
        if keys.numel():
            pos = torch.searchsorted(keys, query).clamp_max(keys.numel() - 1)
            found = (keys[pos] == query) & valid
            near, hit = torch.where(found, residuals[pos], near), hit | found
    return {"near_residual": Rows(near), "near_rated": Rows(hit.to(dtype))}


def _near_one_user(user: int, known: Tensor, nb: Tensor, graphs: list[tuple[Tensor, Tensor]], n_items: int
                   ) -> dict[str, Rows]:
    """:func:`_near` for pairs of one known user (``recommend``'s catalogue, fold-in's answers): the user's row of
    the graph spread over a dense vector of the items, read at the neighbours, in place of a binary search of
    every neighbour in the whole graph (ML-1M catalogue: 3,706 x 30 searches in 10^6 keys: 3.9 against 6.6 ms
    for ``recommend``). The same values: a pair rated more than once reads its first place in the keys, as the
    search does."""
    dtype, device = graphs[0][1].dtype, nb.device
    value = torch.zeros(n_items + 1, dtype=dtype, device=device)  # the last entry: no neighbour
    rated = torch.zeros_like(value)
    for keys, residuals in graphs:  # the user's row is in one of them
        bounds = torch.tensor([user * n_items, (user + 1) * n_items], dtype=keys.dtype, device=keys.device)
        start, stop = (int(b) for b in torch.searchsorted(keys, bounds))
        if stop > start:
            row = keys[start:stop] - user * n_items
            first = torch.ones_like(row, dtype=torch.bool)
            first[1:] = row[1:] != row[:-1]  # keys are sorted: a repeated pair's places are adjacent
            value[row[first]] = residuals[start:stop][first].to(dtype)
            rated[row[first]] = 1.0
    near, hit = value[nb], rated[nb]  # no neighbour (-1) reads the last entry, a 0
    if not bool(known.all()):  # e.g. an unseen item
        near, hit = near * known[:, None], hit * known[:, None]
    return {"near_residual": Rows(near), "near_rated": Rows(hit)}
