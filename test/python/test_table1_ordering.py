"""Scaled-down run of scripts/table1_mse.py (COAT Table 1 ordering).

Checks the paper's main claim on a synthetic Adam trajectory: quantizing both
moments as E4M3 with Dynamic Range Expansion gives a smaller error of the
update direction m/sqrt(v) than plain E4M3 for both (docs/table1.md). Uses
~0.66 M parameters and 60 steps (a few seconds).
"""

import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

from coat import reference as ref  # noqa: E402

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built (ninja -C build coat_reference, "
                "or set COAT_REFERENCE_LIB)", allow_module_level=True)


def _load_script():
    path = os.path.join(REPO, "scripts", "table1_mse.py")
    spec = importlib.util.spec_from_file_location("table1_mse", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["table1_mse"] = mod
    spec.loader.exec_module(mod)
    return mod


T1 = _load_script()
PX, PE = T1.PX, T1.PE


def _small(profile, seed=0):
    cfg = T1.Config(vocab=512, d_ff=512, layers=1, steps=60, first_checkpoint=60, seed=seed,
                    **T1.PROFILES[profile])
    return T1.run(cfg, modes=("fixed", "reference"))


@pytest.fixture(scope="module", params=["narrow", "wide"])
def result(request):
    return _small(request.param)


def test_expansion_on_both_beats_plain_e4m3_fixed(result):
    """Main ordering of Table 1, full MSE, this project's default numerics."""
    T = result["tables"]["fixed"]
    assert T[PX, PX] < T[PE, PE], T1.format_table(T, "fixed")


def test_expansion_on_both_beats_plain_e4m3_reference_without_flush(result):
    """Same for the official kernel's numerics, leaving out coordinates whose
    non-zero v dequantizes to 0. In reference mode the partly zero-skipping
    group minimum can exceed the true minimum; a coordinate below it may then
    flush to 0 and its update becomes m/eps, which alone can dominate the full
    MSE (docs/table1.md), so the full-MSE ordering is not asserted there."""
    T = result["tables_no_flush"]["reference"]
    assert T[PX, PX] < T[PE, PE], T1.format_table(T, "reference, no flush")


def test_best_cell_is_expanded_e4m3_m_with_expanded_v(result):
    T = result["tables"]["fixed"]
    i, j = divmod(int(T.argmin()), 4)
    assert i == PX and j in (PX, T1.QX), T1.format_table(T, "fixed")
