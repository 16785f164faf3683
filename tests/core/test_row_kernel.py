"""The compiled kernels of core/row_kernel.py as a caller sees them: numba's thread count left as it was."""
from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba", reason="numba is not installed (pip install -e '.[numba]'): its kernels are "
                                           "not tested")


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba has one thread here: a kernel cannot change "
                                                                "the count it runs on")
def test_the_kernels_leave_the_callers_numba_thread_count_as_it_was():
    """Each kernel runs on torch's thread count and restores numba's of the calling thread after it (a fit set it
    to torch's for good: the user's own numba code then ran on another count)."""
    from mogp_surprise.core import row_kernel

    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        table, rows = np.zeros((5, 3)), np.array([0, 3])
        row_kernel.add_into_rows(table, rows, np.ones((2, 3)), threads=2)
        crow, col, values = np.array([0, 1, 2]), np.array([1, 0]), np.ones(2)
        out = np.zeros((2, 3))
        row_kernel.csr_product(crow, col, values, np.arange(6.0).reshape(2, 3), out, threads=2)
        assert numba.get_num_threads() == 1
        assert table[[0, 3]].tolist() == [[1.0] * 3] * 2 and out.tolist() == [[3.0, 4.0, 5.0], [0.0, 1.0, 2.0]]
    finally:
        numba.set_num_threads(before)
