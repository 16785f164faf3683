"""Errors and warnings: what callers may catch, and the finite-ratings check training and fold-in share."""
from __future__ import annotations

import numpy as np
import pytest

from mogp_surprise.core.errors import MWGPNumericalWarning, NotFittedError, NumericalError, check_finite_ratings


def test_not_fitted_is_caught_as_value_and_attribute_error_like_scikit_learns():
    assert issubclass(NotFittedError, ValueError) and issubclass(NotFittedError, AttributeError)
    assert issubclass(NumericalError, RuntimeError) and issubclass(MWGPNumericalWarning, UserWarning)


def test_finite_ratings_check_counts_the_bad_ones_and_names_the_first():
    check_finite_ratings(np.array([1.0, 5.0]))
    with pytest.raises(ValueError, match=r"^ratings must be finite; 2 are NaN/inf \(first at row 1: nan\)$"):
        check_finite_ratings(np.array([1.0, np.nan, np.inf]))
    with pytest.raises(ValueError, match=r"^`ratings` of user 7: ratings must be finite; 1 are NaN/inf \(first at "
                                         r"position 0: inf\)$"):
        check_finite_ratings(np.array([np.inf]), where="`ratings` of user 7: ", at="position")
