"""A loaded MWGP's trainset: Surprise's Trainset of the saved ratings, its Python lists built only when read."""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
from surprise import BaselineOnly, Dataset, Reader, Trainset

from mogp_surprise import MWGP
from mogp_surprise.adapters._trainset import (SavedTrainset, ratings_per_item, saved_trainset, user_ratings,
                                              with_user_ratings)
from tests.conftest import FAST, ON_CPU


@pytest.fixture(scope="module")
def fitted(synthetic_data):
    return MWGP(**FAST, **ON_CPU).fit(synthetic_data.build_full_trainset())


@pytest.fixture(scope="module")
def model_file(fitted, tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "m.pt"
    fitted.save(path)
    return path


def _surprise_view(ts: Trainset) -> tuple:
    # an item's raters in user order (Surprise's own lists follow the data file; a saved model holds user by user)
    return (dict(ts.ur), {i: sorted(r) for i, r in ts.ir.items()}, ts.n_users, ts.n_items, ts.n_ratings,
            ts.rating_scale, ts._raw2inner_id_users, ts._raw2inner_id_items,
            [ts.to_raw_uid(u) for u in ts.all_users()], list(ts.all_ratings()))


def test_loaded_trainset_is_the_fitted_one(fitted, model_file):
    loaded = MWGP.load(model_file).trainset
    assert isinstance(loaded, SavedTrainset)
    assert _surprise_view(loaded) == _surprise_view(fitted.trainset)
    assert loaded.global_mean == fitted.trainset.global_mean
    assert loaded.build_testset() == fitted.trainset.build_testset()
    assert [loaded.knows_user(u) for u in (0, 5, 10 ** 6)] == [True, True, False]


def test_a_surprise_algorithm_fits_on_it_as_on_the_original(fitted, model_file):
    loaded = MWGP.load(model_file).trainset
    pairs = [("u1", "i1"), ("u3", "i7"), ("nobody", "i2")]
    ref = BaselineOnly(verbose=False).fit(fitted.trainset)
    got = BaselineOnly(verbose=False).fit(loaded)
    assert [got.predict(u, i).est for u, i in pairs] == [ref.predict(u, i).est for u, i in pairs]


def test_serving_a_loaded_model_builds_no_lists(model_file):
    model = MWGP.load(model_file)
    model.predict("u1", "i1")
    model.test([("u1", "i1", 3.0), ("u2", "i3", 4.0)])
    model.recommend("u1", n=3)
    model.recommend("u1", n=3, ratings={"i2": 5.0})  # what-if
    model.ask("u2", n=2)
    model.fold_in("u1", {"i2": 1.0})  # stored: a known user's
    model.fold_in("new", {"i2": 1.0, "i3": 4.0})  # and a new one's
    model.recommend("new", n=3)
    model.save(model_file.with_name("again.pt"))
    ts = model.trainset
    assert isinstance(ts, SavedTrainset) and ts.__dict__["_ur"] is None and ts.__dict__["_ir"] is None
    # and the lists, when read, hold the stored ratings
    assert ts.ur[ts.to_inner_uid("new")] == [(ts.to_inner_iid("i2"), 1.0), (ts.to_inner_iid("i3"), 4.0)]
    assert MWGP.load(model_file.with_name("again.pt")).recommend("new", n=3).equals(model.recommend("new", n=3))


@pytest.mark.parametrize("built", [False, True])
def test_stored_users_change_the_rows_and_lists_as_in_a_plain_trainset(fitted, model_file, built):
    loaded = MWGP.load(model_file).trainset
    plain = fitted.trainset
    if built:
        loaded.ur, loaded.ir  # noqa: B018 (read: the lists exist before the change)
    i1, i2, i5 = (plain.to_inner_iid(i) for i in ("i1", "i2", "i5"))
    new_row = plain.n_users
    ours, ref = loaded, plain
    for uid, row, items, values in (("u4", plain.to_inner_uid("u4"), [i2, i5, i1], [4.0, 1.5, 3.0]),
                                    ("newcomer", new_row, [i5], [2.0]), ("u0", 0, [], []),
                                    ("newcomer", new_row, [i1, i2], [5.0, 1.0]), ("u4", plain.to_inner_uid("u4"), [i1],
                                                                                  [2.5])):
        items, values = np.array(items, dtype=np.int64), np.array(values)
        ours, ref = with_user_ratings(ours, uid, row, items, values), with_user_ratings(ref, uid, row, items, values)
        assert isinstance(ours, SavedTrainset) and type(ref) is Trainset
        assert (ours.__dict__["_ur"] is not None) == built
        for u in range(ref.n_users):  # what serving reads, before any list is built
            got, want = user_ratings(ours, u), user_ratings(ref, u)
            assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
        np.testing.assert_array_equal(ratings_per_item(ours), ratings_per_item(ref))
        assert ours.global_mean == pytest.approx(ref.global_mean, rel=1e-12)
        assert _surprise_view(pickle.loads(pickle.dumps(ours))) == _surprise_view(ref)  # (lists built from the rows)
    assert _surprise_view(ours) == _surprise_view(ref)
    assert _surprise_view(loaded) == _surprise_view(plain)  # the callers' trainsets unchanged
    assert loaded.changed == {} and loaded.n_users == plain.n_users


def test_pickles_carry_the_rows_not_the_lists(model_file):
    ts = MWGP.load(model_file).trainset
    lean = len(pickle.dumps(ts))
    ts.ur, ts.ir  # noqa: B018
    again = pickle.loads(pickle.dumps(ts))
    assert len(pickle.dumps(ts)) == lean and again.__dict__["_ur"] is None
    assert _surprise_view(again) == _surprise_view(ts)


def test_unsorted_saved_ratings_keep_each_users_order():
    # files written by any release hold the ratings user by user; another order still gives the same lists
    index = np.array([[1, 0], [0, 2], [1, 1], [0, 0]])
    ts = saved_trainset(["a", "b"], ["x", "y", "z"], index, np.array([1.0, 2.0, 3.0, 4.0]), (1.0, 5.0))
    assert ts.ur == {0: [(2, 2.0), (0, 4.0)], 1: [(0, 1.0), (1, 3.0)]}
    assert ts.ir == {0: [(0, 4.0), (1, 1.0)], 1: [(1, 3.0)], 2: [(0, 2.0)]}
    frame = pd.DataFrame({"u": ["b", "a", "b", "a"], "i": ["x", "z", "y", "x"], "r": [1, 2, 3, 4.0]})
    ref = Dataset.load_from_df(frame, Reader(rating_scale=(1, 5))).build_full_trainset()
    assert ts.global_mean == ref.global_mean
