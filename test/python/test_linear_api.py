"""coat.linear.scaled_mm's argument checks, which run before any kernel is
looked up (no GPU needed)."""

import pytest

torch = pytest.importorskip("torch")
from coat.linear import scaled_mm  # noqa: E402


def test_rejects_non_fp8_operands():
    a = torch.zeros(4, 16)
    with pytest.raises(ValueError, match="float8_e4m3fn or float8_e5m2"):
        scaled_mm(a, torch.zeros(8, 16).t(), torch.ones(1), torch.ones(1))


def test_rejects_bad_shapes_and_layouts():
    one = torch.ones(1)
    with pytest.raises(ValueError, match="2-D"):
        scaled_mm(torch.zeros(16), torch.zeros(16, 8), one, one)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        scaled_mm(torch.zeros(4, 16), torch.zeros(8, 32).t(), one, one)
    with pytest.raises(ValueError, match="column-major"):
        scaled_mm(torch.zeros(4, 16), torch.zeros(16, 8), one, one)
    with pytest.raises(ValueError, match="multiple of 16"):
        scaled_mm(torch.zeros(4, 8), torch.zeros(8, 8).t(), one, one)
