"""save/load, pickle and surprise.dump give identical predictions; file versions are checked."""
from __future__ import annotations

import pickle
import re
import warnings

import numpy as np
import pytest
import torch
from surprise import dump

from mogp_surprise import MWGP, MWGPRegressor
from mogp_surprise.adapters import persistence
from mogp_surprise.adapters.persistence import checksum
from tests.conftest import FAST, ON_CPU


@pytest.fixture(scope="module")
def surprise_model(synthetic_data):
    return MWGP(**FAST, **ON_CPU).fit(synthetic_data.build_full_trainset())  # loaded onto the CPU: compared bit for bit


@pytest.fixture(scope="module")
def sklearn_model(synthetic_df):
    return MWGPRegressor(**FAST, **ON_CPU).fit(synthetic_df[["user", "item"]], synthetic_df["rating"])


def _surprise_outputs(algo, testset):
    return [(p.est, p.details["var"]) for p in algo.test(testset)]


def test_surprise_save_load_pickle_dump_identical(surprise_model, tmp_path):
    testset = surprise_model.trainset.build_testset()[:300] + [("new-user", "i1", 3.0), ("u1", "new-item", 2.0)]
    ref = _surprise_outputs(surprise_model, testset)
    surprise_model.save(tmp_path / "m.pt")
    loaded = MWGP.load(tmp_path / "m.pt")
    assert _surprise_outputs(loaded, testset) == ref
    assert loaded._hyper_params() == surprise_model._hyper_params()
    assert loaded.chosen_params_ == surprise_model.chosen_params_ == {
        "n_epochs": len(surprise_model.loss_history_), "lr": surprise_model.lr,
        "mf_reg": surprise_model.posterior_.state.term("bilinear").term.options["mf_reg"]}  # (FAST: no search)
    assert loaded.trainset.global_mean == surprise_model.trainset.global_mean
    assert loaded.predict("u1", "i1").details == surprise_model.predict("u1", "i1").details
    assert _surprise_outputs(pickle.loads(pickle.dumps(surprise_model)), testset) == ref
    dump.dump(str(tmp_path / "d"), algo=surprise_model)
    assert _surprise_outputs(dump.load(str(tmp_path / "d"))[1], testset) == ref


def test_what_early_stopping_chose_is_saved(surprise_model, tmp_path):
    model = pickle.loads(pickle.dumps(surprise_model))
    model.chosen_params_ = {"n_epochs": 3, "lr": 0.0047, "mf_reg": 10.0}  # as early stopping may choose on small data
    model.save(tmp_path / "m.pt")
    assert MWGP.load(tmp_path / "m.pt").chosen_params_ == {"n_epochs": 3, "lr": 0.0047, "mf_reg": 10.0}
    del model.chosen_params_  # a model pickled by an earlier release: saved with what it was trained with
    model = pickle.loads(pickle.dumps(model))
    model.save(tmp_path / "old.pt")
    assert MWGP.load(tmp_path / "old.pt").chosen_params_ == {"n_epochs": len(model.loss_history_), "lr": model.lr,
                                                             "mf_reg": surprise_model.chosen_params_["mf_reg"]}


def test_sklearn_save_load_pickle_identical(sklearn_model, synthetic_df, tmp_path):
    X = synthetic_df[["user", "item"]].iloc[:300]
    ref = sklearn_model.predict_dist(X)
    sklearn_model.save(tmp_path / "r.pt")
    loaded = MWGPRegressor.load(tmp_path / "r.pt")
    for a, b in zip(ref, loaded.predict_dist(X)):
        np.testing.assert_array_equal(a, b)
    assert list(loaded.feature_names_in_) == ["user", "item"]
    assert loaded.get_params() == sklearn_model.get_params()
    for a, b in zip(ref, pickle.loads(pickle.dumps(sklearn_model)).predict_dist(X)):
        np.testing.assert_array_equal(a, b)


def test_file_holds_only_tensors_and_plain_values(sklearn_model, tmp_path):
    sklearn_model.save(tmp_path / "r.pt")
    payload = torch.load(tmp_path / "r.pt", weights_only=True)  # raises if any pickled object were inside
    assert payload["format"] == "mogp_surprise" and payload["format_version"] == persistence.FORMAT_VERSION
    assert payload["package_version"] and payload["estimator"] == "MWGPRegressor"


def test_model_moved_between_dtypes_and_devices_loads_on_cpu(sklearn_model, synthetic_df, tmp_path):
    X = synthetic_df[["user", "item"]].iloc[:100]
    ref_mean, ref_var = sklearn_model.predict_dist(X)
    sklearn_model.posterior_ = sklearn_model.posterior_.to(dtype=torch.float64)
    try:
        sklearn_model.save(tmp_path / "f64.pt")
    finally:
        sklearn_model.posterior_ = sklearn_model.posterior_.to(dtype=torch.float32)
    loaded = MWGPRegressor.load(tmp_path / "f64.pt", device="cpu")
    assert loaded.posterior_.dtype == torch.float64 and loaded.posterior_.device.type == "cpu"
    mean, var = loaded.predict_dist(X)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-5)
    np.testing.assert_allclose(var, ref_var, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_model_loads_on_cpu(synthetic_df, tmp_path):  # pragma: no cover - GPU only
    est = MWGPRegressor(**FAST, device="cuda").fit(synthetic_df[["user", "item"]], synthetic_df["rating"])
    est.save(tmp_path / "gpu.pt")
    loaded = MWGPRegressor.load(tmp_path / "gpu.pt")
    assert loaded.posterior_.device.type == "cpu"
    np.testing.assert_allclose(loaded.predict(synthetic_df[["user", "item"]]),
                               est.predict(synthetic_df[["user", "item"]]), rtol=1e-5)


@pytest.mark.parametrize("change, match", [
    ({"format_version": 99}, "Upgrade mogp_surprise"),
    ({"format_version": 0}, "cannot migrate"),
    ({"format_version": "1"}, "format_version"),
    ({"format": "other"}, "not a mogp_surprise model file"),
    ({"estimator": "MWGP"}, "load it with MWGP.load"),
])
def test_incompatible_files_give_clear_errors(sklearn_model, tmp_path, change, match):
    sklearn_model.save(tmp_path / "r.pt")
    payload = torch.load(tmp_path / "r.pt", weights_only=True)
    payload.update(change)
    payload["checksum"] = checksum(payload)  # as a file written so would carry
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=match):
        MWGPRegressor.load(tmp_path / "bad.pt")


def test_a_damaged_file_is_refused_and_an_older_file_without_a_checksum_loads(surprise_model, synthetic_data,
                                                                               tmp_path):
    """A flipped byte in a saved table loaded and served NaN variances (exit code 0 from the CLI)."""
    algo, testset = surprise_model, synthetic_data.build_full_trainset().build_testset()[:200]
    algo.save(tmp_path / "m.pt")
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    assert payload["checksum"] == checksum(payload)
    data = bytearray((tmp_path / "m.pt").read_bytes())
    table = payload["posterior"]["gp"]["w"].numpy().tobytes()
    at = bytes(data).find(table[:64])  # the GP's weights, stored uncompressed in the zip archive
    assert at > 0
    data[at:at + 8] = b"\xff" * 8
    (tmp_path / "bad.pt").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="is damaged: its contents do not match the checksum"):
        MWGP.load(tmp_path / "bad.pt")
    del payload["checksum"]  # as written before checksums: loaded as it is
    torch.save(payload, tmp_path / "old.pt")
    assert _surprise_outputs(MWGP.load(tmp_path / "old.pt"), testset) == _surprise_outputs(algo, testset)


def test_saving_to_a_folder_or_into_a_missing_folder_is_a_clear_error_and_a_failed_save_keeps_the_old_file(
        surprise_model, tmp_path, monkeypatch):
    algo = surprise_model
    with pytest.raises(ValueError, match="it is a folder; give a file name in it"):
        algo.save(tmp_path)
    with pytest.raises(FileNotFoundError, match="the folder .* does not exist"):
        algo.save(tmp_path / "nowhere" / "m.pt")
    algo.save(tmp_path / "m.pt")
    before = (tmp_path / "m.pt").read_bytes()

    def broken(obj, f):  # a write that fails half way (a full disk)
        with open(f, "wb") as out:
            out.write(b"half a model")
        raise RuntimeError("[enforce fail at inline_container.cc] file write failed")

    monkeypatch.setattr(persistence.torch, "save", broken)
    with pytest.raises(OSError, match="could not write the model to .*file write failed"):
        algo.save(tmp_path / "m.pt")
    assert (tmp_path / "m.pt").read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


def test_foreign_and_missing_files(tmp_path, surprise_model, recwarn):
    """One line saying what the file is instead, and no torch warning, for a text file, a pickle of the model
    (``pickle.dump``, ``surprise.dump``: read back with them), a torch file of other objects, a damaged zip."""
    filters = list(warnings.filters)
    (tmp_path / "junk.pt").write_bytes(b"not a model")
    (tmp_path / "torn.pt").write_bytes(b"PK\x03\x04 not a zip after all")
    pickle.dump(surprise_model, (tmp_path / "algo.pkl").open("wb"))
    dump.dump(str(tmp_path / "dumped"), algo=surprise_model)
    torch.save({"model": object()}, tmp_path / "objects.pt")
    for name, what in [("junk.pt", "not a zip archive, as `save` and checkpoints write"),
                       ("algo.pkl", "it is a pickle, as pickle.dump, surprise.dump.dump, joblib.dump or an old "
                                    "torch.save write: read it with the tool that wrote it, and only if you trust"),
                       ("dumped", "it is a pickle"), ("objects.pt", "a torch file holding objects other than tensors"),
                       ("torn.pt", r"a damaged or truncated archive: RuntimeError: PytorchStreamReader failed reading zip archive: [^.()]+\)$")]:
        with pytest.raises(ValueError, match="not a mogp_surprise model file") as err:
            MWGP.load(tmp_path / name)
        assert re.search(what, str(err.value)) and "\n" not in str(err.value) and "weights_only" not in str(err.value)
    assert not [w for w in recwarn if "torch" in str(w.filename)]
    assert warnings.filters == filters  # (warnings.catch_warnings is process-wide: never used around a load)
    with pytest.raises(FileNotFoundError):
        MWGP.load(tmp_path / "missing.pt")


def test_same_random_state_same_predictions_both_adapters(synthetic_data, synthetic_df):
    ts = synthetic_data.build_full_trainset()
    testset = ts.build_testset()[:200]
    assert _surprise_outputs(MWGP(**FAST, **ON_CPU).fit(ts), testset) == _surprise_outputs(MWGP(**FAST, **ON_CPU).fit(ts), testset)
    X, y = synthetic_df[["user", "item"]], synthetic_df["rating"]
    a = MWGPRegressor(**FAST, **ON_CPU).fit(X, y).predict(X.iloc[:200], return_std=True)
    b = MWGPRegressor(**FAST, **ON_CPU).fit(X, y).predict(X.iloc[:200], return_std=True)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = MWGPRegressor(**{**FAST, **ON_CPU, "random_state": 1}).fit(X, y).predict(X.iloc[:200])
    assert not np.array_equal(a[0], c)


def test_generator_random_state_is_saved_as_none(synthetic_df, tmp_path):
    est = MWGPRegressor(**{**FAST, "random_state": np.random.default_rng(0)})
    est.fit(synthetic_df[["user", "item"]], synthetic_df["rating"]).save(tmp_path / "g.pt")
    assert MWGPRegressor.load(tmp_path / "g.pt").random_state is None


def test_files_record_the_current_format_and_the_model_terms(sklearn_model, tmp_path):
    sklearn_model.save(tmp_path / "r.pt")
    payload = torch.load(tmp_path / "r.pt", weights_only=True)
    assert payload["format_version"] == persistence.FORMAT_VERSION == 2
    assert payload["posterior"]["format_version"] == 2
    assert [t["name"] for t in payload["posterior"]["terms"]] == ["gp_input", "bias", "bilinear", "noise_offset"]


def test_loading_onto_a_device_this_machine_lacks_is_a_clear_error(surprise_model, tmp_path):
    surprise_model.save(tmp_path / "m.pt")
    for device, message in (("tpu", "`device` must be one of"), (torch.device("meta"), "`device` must be one of")) + (
            () if torch.cuda.is_available() else (("cuda", "CUDA is not available"),)):
        with pytest.raises(ValueError, match=message):
            MWGP.load(tmp_path / "m.pt", device=device)



def test_ids_a_file_cannot_hold_are_refused_before_anything_is_written(synthetic_df, tmp_path):
    """fit takes any hashable id; a model file (tensors and plain values) does not: a time-bin column of
    Timestamps, datetime.date users. Before the check, save wrote a file that never loaded, replacing the good
    one."""
    import datetime

    import pandas as pd

    df = synthetic_df.iloc[:600].assign(period=pd.Timestamp("2020-01-01") + pd.to_timedelta(
        np.arange(600) % 3 * 30, unit="D"))
    est = MWGPRegressor(**{**FAST, "n_epochs": 1}).fit(df[["user", "item", "period"]], df["rating"])
    path = tmp_path / "ctx.pt"
    path.write_bytes(b"the file that was there")
    with pytest.raises(TypeError, match=r"cannot save a model whose period ids include Timestamp\('2020-01-01"
                                        r".*\(Timestamp\).*Nothing was written"):
        est.save(path)
    assert path.read_bytes() == b"the file that was there"
    days = df["user"].map(lambda u: datetime.date(2024, 1, 1) + datetime.timedelta(days=int(u.lstrip("u"))))
    dated = MWGPRegressor(**{**FAST, "n_epochs": 1}).fit(df[["user", "item"]].assign(user=days), df["rating"])
    dated.fold_in(datetime.date(2025, 5, 1), {df["item"].iloc[0]: 4})  # (fold-in refuses one in a savable model)
    with pytest.raises(TypeError, match=r"user ids include datetime.date\(2024, .*\) \(date\)"):
        dated.save(tmp_path / "m.pt")
    assert not (tmp_path / "m.pt").exists()


def test_item_names_keep_their_keys_through_a_file(surprise_model, tmp_path):
    import copy

    algo = copy.deepcopy(surprise_model)
    algo.item_names_ = {5: "Five", "7": "Seven", ("a", 1): "A1"}
    algo.save(tmp_path / "m.pt")
    assert MWGP.load(tmp_path / "m.pt").item_names_ == {5: "Five", "7": "Seven", ("a", 1): "A1"}


def test_ids_of_subclasses_or_with_numpy_parts_are_saved_as_plain_values_or_refused(surprise_model, tmp_path):
    """An IntEnum is an int the loader refuses (not folded in); a tuple id with a numpy part is saved as plain
    values, equal to it."""
    import copy
    import enum

    class Shop(enum.IntEnum):
        A = 1

    item = surprise_model.trainset.to_raw_iid(0)
    algo = copy.deepcopy(surprise_model)
    algo.fold_in(("shop", np.float64(1.5)), {item: 4})
    algo.save(tmp_path / "m.pt")
    loaded = MWGP.load(tmp_path / "m.pt")
    got, want = loaded.predict(("shop", 1.5), item), algo.predict(("shop", np.float64(1.5)), item)
    assert not got.details["unknown_user"] and (got.est, got.details["var"]) == (want.est, want.details["var"])
    with pytest.raises(TypeError, match=r"cannot fold in the user <Shop.A: 1> \(Shop\): a model file holds ids"):
        algo.fold_in(Shop.A, {item: 4})  # save would refuse it, and with it every user folded in
    algo.save(tmp_path / "m2.pt")
    assert MWGP.load(tmp_path / "m2.pt").predict(("shop", 1.5), item) == got


def test_chunk_size_set_after_fitting_or_loading_is_the_one_used(surprise_model, sklearn_model, synthetic_df,
                                                                 tmp_path, monkeypatch):
    """A prediction-time setting: lowering it on a loaded model bounds memory (it was frozen at fit)."""
    from mogp_surprise.core.posterior import MWGPPosterior

    seen = []
    original = MWGPPosterior.moments
    monkeypatch.setattr(MWGPPosterior, "moments", lambda self, *a, **k: seen.append(1) or original(self, *a, **k))
    surprise_model.save(tmp_path / "m.pt")
    algo = MWGP.load(tmp_path / "m.pt")
    testset = algo.trainset.build_testset()[:500]
    want = algo.predict_dist(testset)
    algo.chunk_size = 100
    seen.clear()
    got = algo.predict_dist(testset)
    assert len(seen) == 5 and all(np.array_equal(g, w) for g, w in zip(got, want))
    est = sklearn_model
    X = synthetic_df[["user", "item"]].iloc[:300]
    before = est.predict_dist(X)
    est.set_params(chunk_size=64)
    seen.clear()
    after = est.predict_dist(X)
    est.set_params(chunk_size=FAST.get("chunk_size", 65536))
    assert len(seen) == 5 and all(np.array_equal(a, b) for a, b in zip(after, before))
