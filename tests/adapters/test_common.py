"""What both adapters share: hyper-parameters, the one id path (IdEncoder, encode_ids), fold-in ratings, trainsets."""
from __future__ import annotations

import inspect
import warnings

import numpy as np
import pandas as pd
import pytest

from mogp_surprise.adapters._users import check_fold_ratings
from mogp_surprise.adapters._common import (HyperParamsMixin, IdEncoder, check_id_column,
                                            encode_ids, id_twin, inner_or_unknown, trainset_arrays)
from mogp_surprise.core.config import MWGPConfig
from mogp_surprise.datasets import to_surprise_dataset


def test_hyper_parameters_are_the_config_fields_stored_unchanged():
    signature = inspect.signature(HyperParamsMixin.__init__)
    assert [p for p in signature.parameters if p != "self"] == list(MWGPConfig.names())
    assert all(p.default == MWGPConfig.defaults()[name] for name, p in signature.parameters.items() if name != "self")
    obj = HyperParamsMixin(n_inducing=-3)  # stored unchanged; validated when a config is built (in fit)
    assert obj.n_inducing == -3 and obj.latent_dim == MWGPConfig.defaults()["latent_dim"]
    with pytest.raises(ValueError, match="n_inducing"):
        obj._config()
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['n_inducng'\]"):
        HyperParamsMixin(n_inducng=3)
    from mogp_surprise import MWGP, MWGPRegressor

    for cls in (MWGP, MWGPRegressor):  # the class called, not the mixin, and how to pass them
        with pytest.raises(TypeError, match=rf"^{cls.__name__} takes its hyper-parameters by name, e.g. "
                                            rf"{cls.__name__}\(latent_dim=8\); got 1 positional argument\(s\): "
                                            r"\(3,\)$"):
            cls(3)


def test_id_encoder_matches_by_value_and_type_in_order_of_appearance():
    encoder, codes = IdEncoder.fit("user", np.array([196, "196", "a", 196, ("t", 1)], dtype=object))
    assert codes.tolist() == [0, 1, 2, 0, 3] and encoder.n_levels == 4
    assert encoder.transform(np.array(["a", 196, "b", "196", 197], dtype=object)).tolist() == [2, 0, -1, 1, -1]
    assert 196 in encoder and "196" in encoder and "197" not in encoder
    # a saved list of classes gives the same encoder
    again = IdEncoder("user", encoder.classes_.tolist())
    assert again.transform(np.array(["196", "a"], dtype=object)).tolist() == [1, 2]
    ints, _ = IdEncoder.fit("item", np.array([5, 3, 5]))
    assert ints.transform(np.array([3, 4])).tolist() == [1, -1]
    # plain lists (Surprise testsets, recommend_many) keep every id's own type: 1 is not "1", a tuple is one id
    mixed = IdEncoder("user", [1, "a", 2, ("t", 1)])
    assert mixed.transform([1, "a", 2, ("t", 1), "1", 3]).tolist() == [0, 1, 2, 3, -1, -1]
    assert mixed.transform([2]).tolist() == [2] and mixed.transform(["a"]).tolist() == [1]  # whatever else is asked
    assert IdEncoder("user", [7, 2**70]).transform([2**70, 7]).tolist() == [1, 0]  # ints beyond int64


@pytest.mark.parametrize("ids, added", [([5, 3], 7), ([5, 3], "x"), (["a", "b"], "c"), (["a", "b"], 7),
                                        ([5, "a"], 9), ([5, "a"], ("t", 1)), ([5, 3], 2**70), ([5, 3], True)])
def test_an_id_added_by_a_fold_in_is_encoded_as_one_fitted_with_it(ids, added):
    """``with_id`` (a folded-in user) gives the encoder of the ids with the new one last, without rebuilding its
    maps id by id: the same classes, dtype and codes for a few ids (dict lookups) and for many (the index)."""
    before = IdEncoder("user", ids)
    before.lookup(ids[0])  # the lookup table is built, then copied
    after = before.with_id(added)
    expected = IdEncoder("user", [*ids, added])
    assert after.classes_.tolist() == [*ids, added] and after.classes_.dtype == expected.classes_.dtype
    asks = [*ids, added, "zz", 99]
    assert [after.transform([a]).tolist() for a in asks] == [expected.transform([a]).tolist() for a in asks]
    assert after.transform(asks * 20).tolist() == expected.transform(asks * 20).tolist() == [0, 1, 2, -1, -1] * 20
    assert before.n_levels == 2 and before.lookup(added) is None and before.transform(asks * 20)[2] == -1


@pytest.mark.parametrize("ids, asked", [(list(pd.to_datetime(["2020-01-01", "2020-01-02"])), "2020-01-02"),
                                        (list(pd.period_range("2020-01", periods=2, freq="M")), "2020-02"),
                                        ([5, "a"], "b"), ([5, 7], 8), (["a", "b"], "c")])
def test_one_id_is_encoded_as_in_a_long_list(ids, asked):
    """A few ids take dict lookups, and an unseen str or int skips the index: the code of each id is the one it
    gets among many (the index), also where the index parses strings (times, periods)."""
    encoder = IdEncoder("user", ids)
    assert encoder.transform([asked]).tolist() == encoder.transform([asked] * 20).tolist()[:1]


def test_a_few_ids_are_looked_up_as_the_index_finds_them(monkeypatch):
    """Lists of a few ids (one user's recommend, fold-in, ask) take dict lookups: the same codes as the index
    for known ids, and for ids equal to a known one with another type (1.0, True, numpy ints) or unseen."""
    from mogp_surprise.adapters import _common

    encoder = IdEncoder("user", [1, "a", 2, ("t", 1), 2**70])
    asks = [[1], ["a"], [("t", 1)], [2**70], [1.0], [True], [np.int64(2)], ["1"], [3], [1, "a", 2], [2, 1.0], []]
    fast = [encoder.transform(ask).tolist() for ask in asks]
    monkeypatch.setattr(_common, "FEW_IDS", -1)  # the index alone
    assert fast == [encoder.transform(ask).tolist() for ask in asks]
    assert fast[:4] == [[0], [1], [3], [4]] and fast[7:9] == [[-1], [-1]]


@pytest.mark.parametrize("value, twin", [("196", 196), (196, "196"), (" 7 ", 7), ("-4", -4), (np.int64(3), "3"),
                                         (3.0, "3"), (3.5, None), ("abc", None), (True, 1), (None, None),
                                         ("--5", None), ("-", None), ("5-", None)])
def test_id_twin_is_the_same_id_spelt_with_the_other_type(value, twin):
    assert id_twin(value) == twin and type(id_twin(value)) is type(twin)


def test_check_id_column_names_missing_ids_and_warns_on_mixed_spellings():
    with pytest.raises(ValueError, match=r"id column 'user' must not contain NaN/inf; found 1 \(first at row 2\)"):
        check_id_column("user", np.array([1.0, 2.0, np.nan]))
    with pytest.raises(ValueError, match=r"'item' must not contain None/NaN; found 1 \(first at row 1: None\)"):
        check_id_column("item", np.array(["a", None], dtype=object))
    with pytest.warns(UserWarning, match="holds both 196 and '196'"):
        check_id_column("user", np.array([196, "196", "x"], dtype=object))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_id_column("user", np.array([196, "197", "x"], dtype=object))  # mixed types, no twin: fine


def test_encode_ids_warns_once_per_owner_and_factor():
    class Owner:
        pass

    encoder, _ = IdEncoder.fit("user", np.array(["196", "7"], dtype=object))
    owner = Owner()
    with pytest.warns(UserWarning, match=r"user id 196 \(int\) is not in the training data, but '196' \(str\) is"):
        assert encode_ids(owner, encoder, np.array([196, "7"], dtype=object)).tolist() == [-1, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert encode_ids(owner, encoder, np.array([196], dtype=object)).tolist() == [-1]  # once per owner
        assert encode_ids(Owner(), encoder, np.array(["nobody"], dtype=object)).tolist() == [-1]  # no twin
    with pytest.warns(UserWarning, match="user id 7"):
        encode_ids(Owner(), encoder, np.array([7], dtype=object))  # another fitted model warns again


def test_check_fold_ratings_accepts_dicts_and_pairs_and_names_every_problem():
    def encode(raw):
        return np.array([{"a": 0, "b": 1, "c": 2}.get(x, -1) for x in raw], dtype=np.int64)

    items, values = check_fold_ratings({"b": 4, "a": 2.5}, encode, (1, 5))
    assert items.tolist() == [1, 0] and values.tolist() == [4.0, 2.5]
    items, values = check_fold_ratings([("c", 1)], encode, None)
    assert items.tolist() == [2] and values.dtype == np.float64
    empty = check_fold_ratings({}, encode, (1, 5))
    assert empty[0].shape == empty[1].shape == (0,)
    for bad, match in [("ab", "must be a dict"), ([("a", 1, 2)], "entry 0 is"), ({"a": "4"}, "must be a number"),
                       ({"a": True}, "must be a number"), ({"a": np.nan}, "must be finite"),
                       ({"a": 6}, r"must lie in the rating scale \[1, 5\]; got 1 outside it: \[\('a', 6.0\)\]"),
                       ({"z": 3}, r"not in the training data: \['z'\]"),
                       ([("a", 3), ("a", 4)], r"rates item\(s\) \['a'\] more than once")]:
        with pytest.raises(ValueError, match=match):
            check_fold_ratings(bad, encode, (1, 5))


def test_inner_or_unknown_reads_surprises_unknown_marker():
    assert inner_or_unknown("UKN__42") == -1 and inner_or_unknown(7) == 7 and inner_or_unknown("3") == 3


def test_trainset_arrays_hold_every_rating_with_inner_ids():
    df = pd.DataFrame({"user": ["a", "a", "b", "c"], "item": ["x", "y", "x", "z"], "rating": [1.0, 2.0, 3.5, 4.0]})
    trainset = to_surprise_dataset(df, rating_scale=(1, 5)).build_full_trainset()
    index, ratings = trainset_arrays(trainset)
    assert index.dtype == np.int64 and index.shape == (4, 2)
    assert sorted(zip(index[:, 0], index[:, 1], ratings)) == sorted(trainset.all_ratings())
