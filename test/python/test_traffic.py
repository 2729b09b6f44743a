"""coat.traffic's accounting rules on made-up kernel specs (no compiled
kernels): the bytes of a launch's buffers, twice for the buffers a kernel
updates in place, 2mnk for a GEMM, and the nesting of counters. The
counting of real launches is in test_requantize_program.py (CPU twins and
GPU) and in the GPU step profile test of test_train_example.py."""

from types import SimpleNamespace

import numpy as np
import pytest

from coat import traffic


def spec(op, buffers, scalars=(), **config):
    arg = lambda name: SimpleNamespace(name=name)  # noqa: E731
    return SimpleNamespace(op=op, config=config, memrefs=tuple(map(arg, buffers)),
                           scalars=tuple(map(arg, scalars)))


def buf(n, dtype=np.float32):
    return np.zeros(n, dtype)


def test_plain_kernel_counts_each_buffer_once():
    s = spec("quantize", ["input", "codes", "scale"], ["rows", "cols"])
    assert traffic.launch_cost(s, [buf(64, np.uint16), buf(64, np.uint8), buf(4, np.uint16)],
                               [4, 16]) == (128 + 64 + 8, 0)


def test_gemm_flops_are_2mnk_whatever_the_scalar_order():
    s = spec("linear", ["a", "b", "out"], ["k", "m", "n"])
    nbytes, flop = traffic.launch_cost(s, [buf(6, np.uint8), buf(10, np.uint8), buf(15)],
                                       [2, 3, 5])
    assert (nbytes, flop) == (6 + 10 + 60, 2 * 3 * 5 * 2)


def test_optimizer_state_is_read_and_written():
    s = spec("adamw_step", ["param", "grad", "grad_scale", "master", "m_codes", "m_scale"])
    assert traffic.updated_in_place(s) == ("param", "master", "m_codes", "m_scale")
    sizes = [buf(8, np.uint16), buf(8, np.uint16), buf(1), buf(8), buf(8, np.uint8), buf(1)]
    # param 16 B, master 32, codes 8, scale 4 each twice; grad 16 and its scale 4 once.
    assert traffic.launch_cost(s, sizes, []) == (2 * (16 + 32 + 8 + 4) + 16 + 4, 0)


def test_in_place_kernel_writes_over_its_first_argument():
    s = spec("rope", ["x", "cos", "sin"], in_place=True)
    assert traffic.updated_in_place(s) == ("x",)
    assert traffic.launch_cost(s, [buf(32), buf(4), buf(4)], [])[0] == 2 * 128 + 16 + 16
    assert traffic.updated_in_place(spec("rope", ["x", "cos", "sin", "y"])) == ()


def test_counters_nest_and_restore():
    assert traffic.active is None
    with traffic.count_traffic() as outer:
        traffic.active.add("k", "quantize", 10, 0)
        with traffic.count_traffic() as inner:
            traffic.active.add("k", "quantize", 7, 0)
        traffic.active.add("g", "linear", 5, 100)
    assert traffic.active is None
    assert inner.kernels == {"k": ["quantize", 1, 7, 0]}
    assert outer.kernels == {"k": ["quantize", 1, 10, 0], "g": ["linear", 1, 5, 100]}
    assert outer.per_step(2) == {"g": {"op": "linear", "launches": 0.5, "bytes": 2.5,
                                       "flop": 50.0},
                                 "k": {"op": "quantize", "launches": 0.5, "bytes": 5.0,
                                       "flop": 0.0}}


def test_an_exception_inside_the_block_still_restores_the_counter():
    with pytest.raises(RuntimeError):
        with traffic.count_traffic():
            raise RuntimeError("boom")
    assert traffic.active is None
