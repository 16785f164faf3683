"""Properties users rely on, over generated small rating sets (Hypothesis): any scale, id type, shape and
a few hyper-parameters. Failures Hypothesis found and shrank are kept as regular tests in
``tests/test_regimes.py``."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="property tests need hypothesis (the test extra)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from surprise import Dataset, Reader  # noqa: E402

from mogp_surprise import MWGP  # noqa: E402

SCALES = [(1.0, 5.0), (0.5, 5.0), (-10.0, 10.0), (0.0, 1.0), (20.0, 100.0)]


@st.composite
def rating_sets(draw):
    scale = draw(st.sampled_from(SCALES))
    n_users = draw(st.integers(1, 7))
    n_items = draw(st.integers(1, 7))
    cells = draw(st.lists(st.tuples(st.integers(0, n_users - 1), st.integers(0, n_items - 1)),
                          min_size=2, max_size=40, unique=True))
    low, high = scale
    discrete = draw(st.booleans())
    values = draw(st.lists(st.sampled_from([low, high, (low + high) / 2]) if discrete else
                           st.floats(low, high, allow_nan=False), min_size=len(cells), max_size=len(cells)))
    ids = draw(st.sampled_from(["str", "int"]))
    users = [u if ids == "int" else f"u{u}" for u, _ in cells]
    items = [100 + i if ids == "int" else f"i{i}" for _, i in cells]
    frame = pd.DataFrame({"user": users, "item": items, "rating": values})
    options = draw(st.fixed_dictionaries({
        "noise": st.sampled_from(["heteroscedastic", "homoscedastic"]),
        "implicit": st.booleans(),
        "mf_rank": st.sampled_from([0, 2]),
        "early_stopping": st.sampled_from(["auto", False]),
    }))
    return frame, scale, options


def _fit(frame, scale, options):
    data = Dataset.load_from_df(frame, Reader(rating_scale=scale))
    trainset = data.build_full_trainset()
    return trainset, MWGP(n_epochs=3, n_inducing=8, latent_dim=2, batch_size=16, random_state=0,
                          **options).fit(trainset)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rating_sets())
def test_any_small_rating_set(tmp_path_factory, case):
    frame, scale, options = case
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainset, algo = _fit(frame, scale, options)
    reasons = [str(w.message) for w in caught]
    # valid data warn only for a reason: fewer ratings than inducing points
    assert all(r.startswith(f"n_inducing=8 exceeds the number of training ratings ({len(frame)})") for r in reasons), \
        reasons
    low, high = scale
    pairs = [(u, i, r) for u, i, r in frame.itertuples(index=False, name=None)]
    unseen_user = "nobody" if isinstance(pairs[0][0], str) else -5
    pairs.append((unseen_user, pairs[0][1], low))  # and a cold-start pair
    tested = algo.test(pairs)
    mean, var = algo.predict_dist(pairs)
    assert np.all(np.isfinite(mean)) and np.all(var > 0)
    for (u, i, _), batched, m, v in zip(pairs, tested, mean, var):
        assert low <= batched.est <= high
        one = algo.predict(u, i)
        assert one.est == pytest.approx(batched.est, rel=1e-5, abs=1e-5 * (high - low))
        assert one.details["var"] == pytest.approx(v, rel=2e-2)
        assert batched.details["var"] == v
        assert batched.est == pytest.approx(min(max(m, low), high), rel=1e-12, abs=1e-12)
    # deterministic for a seed
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="n_inducing=8 exceeds")
        _, again = _fit(frame, scale, options)
    np.testing.assert_array_equal(again.predict_dist(pairs)[0], mean)
    # save / load: the same predictions
    path = tmp_path_factory.mktemp("model") / "m.pt"
    algo.save(path)
    loaded = MWGP.load(path)
    np.testing.assert_array_equal(loaded.predict_dist(pairs)[0], mean)
    np.testing.assert_array_equal(loaded.predict_dist(pairs)[1], var)


def test_one_rating_is_refused_with_a_clear_error():
    frame = pd.DataFrame({"user": ["u0"], "item": ["i0"], "rating": [3.0]})
    with pytest.raises(ValueError, match="at least 2 ratings to fit, got 1"):
        _fit(frame, (1.0, 5.0), {})
