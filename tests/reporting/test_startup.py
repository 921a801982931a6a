"""The views' Student-t factor, and what importing the command line costs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from robustfl.reporting.summaries import t975


@pytest.mark.parametrize(
    ("df", "table"),
    # two-sided 95 % critical values of Student's t, as printed in statistics tables (3 decimals)
    [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (29, 2.045), (120, 1.980)],
)
def test_t975_is_the_tabulated_quantile(df: int, table: float) -> None:
    assert t975(df) == pytest.approx(table, abs=5e-4)


def test_the_command_line_does_not_import_scipy_stats() -> None:
    """scipy.stats costs ~1 s to import; every command (``--help`` included) paid it before the
    views imported it on first use."""
    code = "import sys, robustfl.cli.main; assert 'scipy.stats' not in sys.modules, 'scipy.stats'"
    subprocess.run([sys.executable, "-c", code], check=True)
