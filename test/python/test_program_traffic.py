"""A program's launch costs without running it (Program.launch_costs, from
the launch plans and the values' types) against what coat.traffic counts of
a run (the buffers each launch was given): the decoder layer's three
programs of a small config, forward and backward, at token counts that do
and do not fill a 16-row group, launch for launch. Both sides share only
traffic.cost's rules (tested on their own in test_traffic.py)."""

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

from coat import artifacts, programs  # noqa: E402
from coat.traffic import count_traffic  # noqa: E402

LAYER = (128, 256, 4, 2)  # hidden, ffn, heads, kv_heads: RoPE in the first program


def inputs(program, rows):
    g = torch.Generator().manual_seed(rows)
    env = {}
    for vid, _, _ in program.inputs:
        t = program.values[vid]
        x = torch.randn(*t.shape_for(rows), generator=g)
        env[vid] = x.to(torch.bfloat16 if t.dtype == "bf16" else torch.float32)
    return env


@pytest.mark.parametrize("rows", [32, 48])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_static_costs_are_the_counted_ones(cpu_cache, index, rows):
    cfg = programs.decoder_layer_configs(*LAYER)[index]
    program = artifacts.program(cfg)
    env = inputs(program, rows)
    with count_traffic() as counted:
        program.run(env, "forward")
        program.run(env, "backward")
    static = program.launch_costs(rows, "forward") + program.launch_costs(rows, "backward")
    assert len(static) == sum(n for _, n, _, _ in counted.kernels.values())
    summed = {}
    for name, op, nbytes, flop in static:
        k = summed.setdefault(name, [op, 0, 0, 0])
        k[1] += 1
        k[2] += nbytes
        k[3] += flop
    assert summed == counted.kernels
    # Each forward GEMM's FLOPs are 2 x rows x the elements of a weight.
    weights = {program.values[v].shape for v, role, _ in program.inputs if role == "weight"}
    per_weight = {2 * rows * a * b for a, b in (w for w in weights if len(w) == 2)}
    forward = [f for _, op, _, f in program.launch_costs(rows, "forward") if op == "linear"]
    assert forward and set(forward) <= per_weight
    assert sorted(program.launch_costs(rows)) == sorted(
        program.launch_costs(rows, "forward") + program.launch_costs(rows, "backward")
        + program.launch_costs(rows, "recompute"))


def test_costs_command_prints_each_program_and_phase(cpu_cache, capsys):
    from coat import cli

    cfg = programs.decoder_layer_configs(*LAYER)[2]
    program = artifacts.program(cfg)
    assert cli.main(["costs", program.module.manifest.directory, "--tokens", "32", "--copy-tbps", "2",
                     "--peak-tflops", "1000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "32 tokens; ceilings: copy 2.00 TB/s, FP8 1000 TFLOP/s"
    rows = {tuple(ln.split()[:2]): ln.split()[2:] for ln in lines[2:]}
    costs = program.launch_costs(32, "backward")
    launches, gb, tflop, ideal = rows[(program.name, "backward")]
    assert int(launches) == len(costs)
    assert float(gb) == pytest.approx(sum(c[2] for c in costs) / 1e9, abs=1e-3)
    # Each launch at whichever ceiling bounds it.
    want = sum(max(b / 2.0, f / 1000.0) for _, _, b, f in costs) / 1e9
    assert float(ideal) == pytest.approx(want, abs=1e-3)


def test_costs_by_op_sums_every_program_per_op(cpu_cache, capsys):
    from coat import cli

    progs = [artifacts.program(cfg) for cfg in programs.decoder_layer_configs(*LAYER)]
    dirs = [p.module.manifest.directory for p in progs]
    assert cli.main(["costs", *dirs, "--tokens", "32", "--by-op"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[2:]}
    costs = [c for p in progs for c in p.launch_costs(32)]
    assert sum(int(r[0]) for r in rows.values()) == len(costs)
    # The GEMMs split by what they do; their FLOPs are all of the layer's.
    assert {"linear_forward", "linear_dgrad", "linear_wgrad"} <= set(rows)
    gemm_flop = sum(float(rows[k][2]) for k in rows if k.startswith("linear_"))
    assert gemm_flop == pytest.approx(sum(c[3] for c in costs) / 1e12, abs=3e-3)
    ideal = [float(r[3]) for r in rows.values()]
    assert ideal == sorted(ideal, reverse=True)


def test_costs_command_names_what_is_missing(tmp_path, capsys):
    from coat import cli

    assert cli.main(["costs", str(tmp_path), "--tokens", "8"]) == 1
    assert "no manifest.json" in capsys.readouterr().err
    assert cli.main(["costs", str(tmp_path), "--tokens", "0"]) == 1
    assert "--tokens must be at least 1" in capsys.readouterr().err
