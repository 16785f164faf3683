"""The core is torch + numpy only: importing it must not pull in the adapter-level dependencies."""
from __future__ import annotations

import subprocess
import sys

import pytest

FORBIDDEN = ("surprise", "sklearn", "pandas", "matplotlib")


@pytest.mark.parametrize("module", ["mogp_surprise.core", "mogp_surprise"])
def test_core_import_does_not_load_adapter_dependencies(module: str) -> None:
    code = (
        f"import {module}, sys\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "assert not bad, bad\n"
    )
    if module.endswith(".core"):  # sanity: the check sees what the import loaded
        code += "assert 'torch' in sys.modules and 'mogp_surprise.core.trainer' in sys.modules\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
