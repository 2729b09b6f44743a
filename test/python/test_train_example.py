"""examples/train_llama.py and bench/train_compare.py on CPU tensors with the
tiny config (CPU twins of the compiled programs): every mode that runs here
trains a few steps, writes its record, and the comparison table reads it;
--profile profiles CPU ops there, --compile's failure is a record and an exit
status, and train_compare's profile and memory tables read made-up records.
On a GPU host, --graph is checked against eager steps of the 100m config
(whose layer programs scripts/demo.sh compiles), and --profile must find our
kernels and torch's in the trace. The GPU run is docs/training.md's."""

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()


ROOT = Path(__file__).resolve().parents[2]


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def example(cpu_cache):
    return load(ROOT / "examples" / "train_llama.py", "train_llama")


@pytest.fixture(scope="module")
def plain_example():
    """The example for bf16 runs and its pure parts (no kernels needed)."""
    return load(ROOT / "examples" / "train_llama.py", "train_llama_plain")


@pytest.fixture(scope="module")
def compare():
    return load(ROOT / "bench" / "train_compare.py", "train_compare")


@pytest.fixture(scope="module")
def gpu_example():
    """The example with the kernels it finds (the 100m layer programs of
    scripts/demo.sh); for the GPU tests, on hosts without coat-opt."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return load(ROOT / "examples" / "train_llama.py", "train_llama_gpu")


def test_corpus_split_is_by_file_and_stable(example):
    train, held = example.corpus()
    assert held.numel() > 10_000 and train.numel() > 10 * held.numel()
    train2, held2 = example.corpus()
    assert torch.equal(held, held2) and train.numel() == train2.numel()


def test_recompute_attention_inputs_reaches_every_converted_layer(example):
    """--recompute-attention-inputs sets the option on the layers
    coat.convert made (the tiny config's head size leaves RoPE to torch,
    so no projection is kept either way; the flag is still passed on)."""
    import coat.nn as cnn

    cfg = example.CONFIGS["tiny"]
    model, _, _ = example.build("coat", cfg, "cpu", 1e-3, None,
                                recompute_attention_inputs=True)
    layers = [m for m in model.modules() if isinstance(m, cnn.DecoderLayer)]
    assert len(layers) == cfg.layers
    assert all(m.recompute_attention_inputs and m.configs[0].name.endswith("_rc")
               for m in layers)
    args = example.parse_args(["--recompute-attention-inputs"])
    assert args.recompute_attention_inputs


def test_reuse_attention_output_reaches_every_converted_layer(example):
    """--reuse-attention-output sets the option on the layers coat.convert
    made: their attention-output programs are the _kc variants."""
    import coat.nn as cnn

    cfg = example.CONFIGS["tiny"]
    model, _, _ = example.build("coat", cfg, "cpu", 1e-3, None, reuse_attention_output=True)
    layers = [m for m in model.modules() if isinstance(m, cnn.DecoderLayer)]
    assert len(layers) == cfg.layers
    assert all(m.reuse_attention_output and m.configs[1].name.endswith("_kc")
               for m in layers)
    assert example.parse_args(["--reuse-attention-output"]).reuse_attention_output
    assert not example.parse_args([]).reuse_attention_output


@pytest.mark.parametrize("keep", [True, False])
def test_keep_gemm_operands_reaches_coat_convert(example, keep):
    """--keep-gemm-operands reaches coat.convert: every converted layer's
    attention input and MLP programs are the _kg variants, and the model's
    report says which was chosen."""
    import coat.nn as cnn

    cfg = example.CONFIGS["tiny"]
    model, _, _ = example.build("coat", cfg, "cpu", 1e-3, None, keep_gemm_operands=keep)
    layers = [m for m in model.modules() if isinstance(m, cnn.DecoderLayer)]
    assert len(layers) == cfg.layers
    for m in layers:
        assert m.keep_gemm_operands == keep
        assert [c.name.endswith("_kg") for c in m.configs] == [keep, False, keep]
    assert model.coat_report.gemm_operands.startswith(
        "kept from the forward" if keep else "derived again in the backward")
    assert f"keep_gemm_operands={keep}" in str(model.coat_report)
    assert example.parse_args(["--keep-gemm-operands"]).keep_gemm_operands
    assert not example.parse_args([]).keep_gemm_operands


@pytest.mark.parametrize("fused", [True, False])
def test_unfused_loss_flag_reaches_coat_convert(example, fused):
    """coat runs take the fused LM head and loss unless --unfused-loss (the
    A/B of a training comparison); the model's report says which."""
    cfg = example.CONFIGS["tiny"]
    model, _, _ = example.build("coat", cfg, "cpu", 1e-3, None, fused_loss=fused)
    assert model.coat_report.loss.startswith("fused" if fused else "unfused (fused_loss=False)")
    assert (model.coat_loss is not None) == fused
    assert example.parse_args(["--unfused-loss"]).unfused_loss
    assert not example.parse_args([]).unfused_loss


@pytest.mark.parametrize("mode", ["bf16", "coat"])
def test_example_trains_on_cpu(example, tmp_path, mode):
    log = tmp_path / f"{mode}.json"
    try:
        example.main(["--mode", mode, "--config", "tiny", "--device", "cpu", "--steps", "6",
                      "--batch", "2", "--seq", "32", "--eval-every", "3", "--eval-batches",
                      "1", "--log-every", "2", "--warmup-timing", "0", "--lr", "3e-3",
                      "--log", str(log)])
    except RuntimeError as e:
        if "FP8AdamW" in str(e) or "adamw" in str(e).lower():
            pytest.skip(f"no optimizer kernels: {e}")
        raise
    r = json.loads(log.read_text())
    assert r["mode"] == mode and len(r["train_loss"]) == 6
    assert all(v == v and v < 10 for v in r["train_loss"])
    assert [s for s, _ in r["held_out"]] == [3, 6]
    assert r["train_loss"][-1] < r["train_loss"][0]
    assert r["step_time_s"] > 0


@pytest.mark.parametrize("mode", ["bf16", "coat"])
def test_global_clipping_goes_to_fp8adamw_in_coat_mode(example, tmp_path, monkeypatch, mode):
    """Every step clips the global norm: coat through FP8AdamW.clip_grad_norm_
    (its step's kernels apply the factor), never torch's clip, which would
    rewrite the gradients; bf16 through torch's."""
    from coat.optim import FP8AdamW

    calls = {"fp8adamw": 0, "torch": 0}
    ours, theirs = FP8AdamW.clip_grad_norm_, torch.nn.utils.clip_grad_norm_

    def count(key, fn):
        def wrapped(*a, **kw):
            calls[key] += 1
            return fn(*a, **kw)
        return wrapped

    monkeypatch.setattr(FP8AdamW, "clip_grad_norm_", count("fp8adamw", ours))
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", count("torch", theirs))
    try:
        example.main(["--mode", mode, "--config", "tiny", "--device", "cpu", "--steps", "3",
                      "--batch", "2", "--seq", "32", "--eval-every", "0", "--log-every", "3",
                      "--warmup-timing", "0", "--log", str(tmp_path / "r.json")])
    except RuntimeError as e:
        if "FP8AdamW" in str(e) or "adamw" in str(e).lower():
            pytest.skip(f"no optimizer kernels: {e}")
        raise
    want = {"fp8adamw": 3, "torch": 0} if mode == "coat" else {"fp8adamw": 0, "torch": 3}
    assert calls == want
    assert json.loads((tmp_path / "r.json").read_text())["clip"] == "global 1.0"


def test_hf_example_clips_with_fp8adamw_where_the_trainer_lets_it(monkeypatch):
    """examples/train_hf.py turns the Trainer's clipping (torch's) off for
    FP8AdamW and clips with FP8AdamW.clip_grad_norm_ from a callback before
    each optimizer step; on a transformers without that callback event it
    leaves the Trainer's. (transformers faked: CI has none.)"""
    fake = ModuleType("transformers")

    class TrainerCallback:
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            pass

    fake.TrainerCallback = TrainerCallback
    monkeypatch.setitem(sys.modules, "transformers", fake)
    hf = load(ROOT / "examples" / "train_hf.py", "train_hf")

    class Opt:
        def __init__(self):
            self.calls = []

        def clip_grad_norm_(self, max_norm):
            self.calls.append(max_norm)
            return torch.tensor(2.5)

    opt = Opt()
    cb = hf.fused_clipping(opt, hf.CLIP_NORM)
    cb.on_pre_optimizer_step(None, None, None, optimizer=opt)
    cb.on_pre_optimizer_step(None, None, None, optimizer=opt)
    assert opt.calls == [1.0, 1.0] and [float(n) for n in cb.norms] == [2.5, 2.5]
    del TrainerCallback.on_pre_optimizer_step
    assert hf.fused_clipping(opt, 1.0) is None


def test_step_time_leaves_out_the_warm_up_inside_a_log_interval(plain_example, tmp_path,
                                                                  monkeypatch):
    """The first log interval spans the warm-up (where torch.compile
    compiles); only its steps after --warmup-timing are timed. A made-up
    clock: each warm-up step takes 100 s, each later one 1 s."""
    clock = [0.0]
    fetched = [0]
    real_batches = plain_example.batches

    def batches(*args):
        clock[0] += 100.0 if fetched[0] < 3 else 1.0
        fetched[0] += 1
        return real_batches(*args)

    monkeypatch.setattr(plain_example, "batches", batches)
    monkeypatch.setattr(plain_example, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    log = tmp_path / "bf16.json"
    plain_example.main(["--mode", "bf16", "--config", "tiny", "--device", "cpu", "--steps",
                        "8", "--batch", "1", "--seq", "16", "--eval-every", "0",
                        "--log-every", "5", "--warmup-timing", "3", "--log", str(log)])
    assert json.loads(log.read_text())["step_time_s"] == 1.0


def test_graph_needs_cuda(example, tmp_path):
    with pytest.raises(SystemExit, match="--graph needs --device cuda"):
        example.main(["--mode", "bf16", "--config", "tiny", "--device", "cpu", "--steps", "1",
                      "--batch", "1", "--seq", "16", "--eval-every", "0", "--graph"])


@pytest.mark.parametrize("mode", ["bf16", "coat"])
def test_graph_steps_match_eager_steps(gpu_example, tmp_path, mode):
    """Each replay must read the new batch, and the optimizer must step on
    that replay's gradients (FP8AdamW's own flat buffer, zeroed before each
    replay): the losses of a graphed run follow the eager run's.

    Both runs take SDPA's math backend: the fused attention backwards (flash,
    cuDNN) sum dQ with atomics, so two runs can differ in the last bits,
    which FP8 rounding at this learning rate grows to a percent within five
    steps."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    example = gpu_example
    args = ["--mode", mode, "--config", "100m", "--device", "cuda", "--steps", "5", "--batch",
            "2", "--seq", "128", "--warmup", "2", "--lr", "5e-3", "--eval-every", "0",
            "--log-every", "1",
            "--warmup-timing", "0"]
    logs = {}
    for graph in (False, True):
        logs[graph] = tmp_path / f"{mode}_{graph}.json"
        with sdpa_kernel(SDPBackend.MATH):
            example.main(args + ["--log", str(logs[graph])] + (["--graph"] if graph else []))
    eager, graphed = (json.loads(logs[g].read_text()) for g in (False, True))
    assert graphed["graph"] and not eager["graph"]
    assert len(graphed["train_loss"]) == 5
    for step, (a, b) in enumerate(zip(eager["train_loss"], graphed["train_loss"])):
        assert abs(a - b) <= 2e-3 * abs(a), f"step {step}: eager {a} graphed {b}"


def test_same_seed_same_data(example):
    gen_a, gen_b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    data = torch.arange(1000, dtype=torch.uint8)
    for _ in range(3):
        xa, ya = example.batches(data, 4, 16, gen_a)
        xb, yb = example.batches(data, 4, 16, gen_b)
        assert torch.equal(xa, xb) and torch.equal(ya[:, :-1], xa[:, 1:])


def test_compare_table_reports_ratios_to_bf16():
    compare = load(ROOT / "bench" / "train_compare.py", "train_compare")
    base = {"params": 1e8, "final_train_loss": 1.0, "final_held_out": 2.0,
            "peak_memory_bytes": 2 ** 31, "forward_retained_per_layer_U": 20.0,
            "step_time_s": 0.1, "tokens_per_s": 1000.0}
    ours = dict(base, final_held_out=2.02, peak_memory_bytes=2 ** 30, step_time_s=0.075,
                train_loss=[3.0, 2.5, 0.75])
    rows = compare.table({"bf16": base, "coat": ours}).splitlines()
    assert rows[3].startswith("| coat |")
    cells = [c.strip() for c in rows[3].split("|")]
    assert cells[4] == "0.7500" and cells[6] == "1.010" and cells[8] == "0.500" \
        and cells[11] == "0.750", cells
    assert [c.strip() for c in rows[2].split("|")][4] == "-"  # no per-step losses


TINY_CPU = ["--config", "tiny", "--device", "cpu", "--batch", "2", "--seq", "32",
            "--eval-batches", "1", "--lr", "3e-3"]


def run_profiled(example, tmp_path, mode):
    log = tmp_path / f"{mode}.json"
    trace = tmp_path / f"{mode}.trace.json.gz"
    rc = example.main(["--mode", mode, *TINY_CPU, "--steps", "8", "--eval-every", "4",
                       "--log-every", "2", "--warmup-timing", "1", "--profile", "2",
                       "--profile-trace", str(trace), "--log", str(log)])
    assert rc == 0
    return json.loads(log.read_text()), trace


def test_profile_on_cpu_records_ops_by_category(plain_example, tmp_path):
    r, trace = run_profiled(plain_example, tmp_path, "bf16")
    p = r["profile"]
    assert p["activity"] == "cpu" and p["steps"] == 2 and p["first_step"] == 6
    assert p["kernels"] > 0 and 0 < p["busy_ms"] <= p["gpu_ms"] + 1e-3
    assert p["wall_ms"] > 0 and 0 < p["busy_share"] and p["busy_share_of_step"] > 0
    assert p["categories"]["torch gemm"]["ms"] > 0
    assert any(op.startswith("aten::") for op, _, _ in p["elementwise_ops"])
    assert trace.exists() and p["trace"] == str(trace)
    # Steps 1-5 are timed, the last two profiled; both evaluations run.
    assert r["step_time_s"] > 0 and [s for s, _ in r["held_out"]] == [4, 8]
    assert len(r["train_loss"]) == 8 and "memory" not in r  # CUDA only


def test_profile_on_cpu_sees_the_coat_programs(example, tmp_path):
    try:
        r, _ = run_profiled(example, tmp_path, "coat")
    except RuntimeError as e:
        if "FP8AdamW" in str(e) or "adamw" in str(e).lower():
            pytest.skip(f"no optimizer kernels: {e}")
        raise
    assert r["profile"]["categories"] and r["profile"]["kernels"] > 0


@pytest.mark.parametrize("extra,message", [
    (["--profile", "4", "--eval-every", "4"], "--eval-every 0 or above 4"),
    (["--profile", "4", "--steps", "5", "--warmup-timing", "2"], "inside the timing warm-up"),
    (["--profile", "-1"], "N >= 1"),
])
def test_profile_window_is_checked_before_training(plain_example, extra, message):
    args = ["--mode", "bf16", *TINY_CPU, "--steps", "10", "--eval-every", "0", *extra]
    with pytest.raises(SystemExit, match=message):
        plain_example.main(args)


def test_profile_window_is_the_last_steps_before_an_evaluation(plain_example):
    def window(*argv):
        return plain_example.profile_window(plain_example.parse_args(list(argv)))

    # The last 5 steps; the evaluation after the last one runs after them.
    assert window("--steps", "100", "--profile", "5", "--eval-every", "20") == (95, 100)
    # An evaluation after step 99 would fall inside 97..101: the 5 before it.
    assert window("--steps", "102", "--profile", "5", "--eval-every", "20") == (95, 100)
    assert window("--steps", "102", "--profile", "5", "--eval-every", "0") == (97, 102)
    assert window() is None


def test_compile_failure_is_a_record_and_an_exit_status(plain_example, tmp_path, capsys):
    if hasattr(torch, "compile"):
        pytest.skip("this torch has torch.compile (its failures: test_compile_error_*)")
    log = tmp_path / "bf16-compiled.json"
    rc = plain_example.main(["--mode", "bf16", *TINY_CPU, "--steps", "2", "--eval-every", "0",
                             "--compile", "--log", str(log)])
    assert rc == plain_example.COMPILE_FAILED == 3
    r = json.loads(log.read_text())
    assert r["compile"] and r["error"]["phase"] == "compile"
    assert r["error"]["type"] == "CompileError" and "torch 2.0" in r["error"]["message"]
    err = capsys.readouterr().err
    assert "Traceback" in err and "bf16: torch.compile failed: CompileError" in err


def test_out_of_memory_is_a_record_and_an_exit_status(plain_example, tmp_path, capsys,
                                                      monkeypatch):
    """A run that runs out of GPU memory (here: the allocator's error raised
    by the first step, wrapped as torch.compile wraps run-time errors) is a
    record with phase "memory" and exit status 4, not a crash."""
    def no_memory(*args, **kwargs):
        try:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        except RuntimeError as e:
            raise ValueError("while running the compiled graph") from e

    monkeypatch.setattr(plain_example, "batches", no_memory)
    monkeypatch.setattr(plain_example.torch.cuda, "max_memory_allocated", lambda: 123)
    log = tmp_path / "bf16.json"
    rc = plain_example.main(["--mode", "bf16", *TINY_CPU, "--steps", "2", "--eval-every", "0",
                             "--log", str(log)])
    assert rc == plain_example.OUT_OF_MEMORY == 4
    r = json.loads(log.read_text())
    assert r["error"]["phase"] == "memory" and r["error"]["type"] == "ValueError"
    assert r["peak_memory_bytes"] == 123 and r["batch"] == 2 and not r["compile"]
    assert "bf16: out of memory: ValueError" in capsys.readouterr().err


def test_out_of_memory_recognises_the_allocator_error_only(plain_example):
    oom = plain_example.out_of_memory
    kind = getattr(torch.cuda, "OutOfMemoryError", None)
    if kind is not None:
        assert oom(kind("CUDA out of memory."))
    assert oom(RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"))
    try:
        try:
            raise RuntimeError("CUDA out of memory.")
        except RuntimeError:
            raise KeyError("while handling it")  # context, not cause
    except KeyError as e:
        assert oom(e)
    assert not oom(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not oom(ValueError("out of range"))


def test_compile_error_recognises_compile_failures_only(plain_example):
    ce = plain_example.compile_error
    assert ce(plain_example.CompileError("no"))
    assert not ce(RuntimeError("CUDA out of memory"))
    try:
        try:
            raise plain_example.CompileError("inner")
        except plain_example.CompileError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as e:
        assert ce(e)
    dynamo = pytest.importorskip("torch._dynamo.exc")
    assert ce(dynamo.Unsupported("graph break in a ctypes call"))


def test_graph_and_compile_do_not_go_together(plain_example):
    with pytest.raises(SystemExit, match="--graph and --compile"):
        plain_example.main(["--mode", "bf16", *TINY_CPU, "--steps", "1", "--eval-every", "0",
                            "--graph", "--compile"])


def test_compiled_modes_run_the_example_with_compile(compare):
    assert compare.mode_args("coat") == ["--mode", "coat"]
    assert compare.mode_args("bf16-compiled") == ["--mode", "bf16", "--compile"]
    assert compare.mode_args("coat-compiled") == ["--mode", "coat", "--compile"]


def test_a_compiled_mode_names_its_own_compile_mode(compare):
    assert compare.mode_args("coat-compiled@reduce-overhead") == [
        "--mode", "coat", "--compile", "--compile-mode", "reduce-overhead"]
    kinds = {"torchao": ["--torchao-optim", "adamw8bit"]}
    assert compare.mode_args("torchao@reduce-overhead", kinds) == [
        "--mode", "torchao", "--torchao-optim", "adamw8bit", "--compile-mode", "reduce-overhead"]
    with pytest.raises(ValueError, match="only a compiled run"):
        compare.mode_args("coat@reduce-overhead")
    with pytest.raises(ValueError, match="unknown torch.compile mode 'fast'"):
        compare.mode_args("bf16-compiled@fast")
    # Its own mode wins over the one every run gets; the others keep that.
    common = ["--config", "100m", "--compile-mode", "max-autotune-no-cudagraphs", "--steps", "5"]
    assert compare.passthrough_for("torchao@reduce-overhead", common) == [
        "--config", "100m", "--steps", "5"]
    assert compare.passthrough_for("torchao@default", ["--compile-mode=reduce-overhead"]) == []
    assert compare.passthrough_for("torchao", common) == common
    assert compare.label("torchao@reduce-overhead", {"compile_mode": "reduce-overhead"}) == \
        "torchao@reduce-overhead"
    assert compare.label("torchao", {"compile_mode": "reduce-overhead"}) == \
        "torchao (reduce-overhead)"


def test_step_in_backward_modes_and_options_of_one_kind(compare):
    assert compare.mode_args("coat-sib") == ["--mode", "coat", "--step-in-backward"]
    assert compare.mode_args("coat-sib-compiled") == ["--mode", "coat", "--step-in-backward",
                                                      "--compile"]
    kinds = {"coat": ["--step-in-backward", "--bucket-mb", "64"],
             "torchao": ["--torchao-optim", "adamw8bit"]}
    assert compare.mode_args("coat-sib", kinds) == ["--mode", "coat", "--step-in-backward",
                                                    "--bucket-mb", "64"]
    assert compare.mode_args("torchao", kinds) == ["--mode", "torchao", "--torchao-optim",
                                                   "adamw8bit"]
    assert compare.mode_args("bf16-compiled", kinds) == ["--mode", "bf16", "--compile"]
    kinds["bf16"] = kinds["torchao"]
    assert compare.mode_args("bf16-compiled", kinds) == ["--mode", "bf16", "--compile",
                                                         "--torchao-optim", "adamw8bit"]
    assert compare.label("bf16-compiled", {"torchao_optim": "adamw8bit"}) == \
        "bf16-compiled (AdamW8bit)"
    assert compare.mode_args("coat-persistent", kinds) == ["--mode", "coat",
                                                           "--persistent-grads", "--bucket-mb",
                                                           "64"]
    with pytest.raises(ValueError, match="only coat has --step-in-backward"):
        compare.mode_args("bf16-sib")
    with pytest.raises(ValueError, match="only coat has --persistent-grads"):
        compare.mode_args("torchao-persistent")
    with pytest.raises(ValueError, match="unknown mode"):
        compare.mode_args("fp8")


def test_a_master_mode_sets_its_own_parameter_dtype(compare):
    assert compare.mode_args("coat-master-compiled@reduce-overhead") == [
        "--mode", "coat", "--param-dtype", "bf16-master", "--compile",
        "--compile-mode", "reduce-overhead"]
    with pytest.raises(ValueError, match="only coat has --param-dtype bf16-master"):
        compare.mode_args("torchao-master")
    common = ["--config", "100m", "--param-dtype", "bf16", "--steps", "5"]
    assert compare.passthrough_for("coat-master-compiled", common) == [
        "--config", "100m", "--steps", "5"]
    assert compare.passthrough_for("coat-master", ["--param-dtype=bf16"]) == []
    assert compare.passthrough_for("coat-compiled", common) == common
    assert compare.label("coat-master-compiled", {"param_dtype": "bf16-master"}) == \
        "coat-master-compiled"
    assert compare.label("coat", {"step_in_backward": True, "param_dtype": "bf16"}) == \
        "coat (step in backward, bf16)"
    assert compare.label("coat-sib", {"step_in_backward": True, "param_dtype": "f32"}) == \
        "coat-sib"
    assert compare.label("coat", {"recompute_attention_inputs": True}) == \
        "coat (q/k/v recomputed)"
    assert compare.label("coat", {"keep_gemm_operands": True}) == "coat (GEMM operands kept)"


def test_seven_b_config_is_llama_2_7b():
    """The 7b config's parameter count is Llama-2-7B's (counted from the
    shapes; building it would take 27 GB here)."""
    ex = load(ROOT / "examples" / "train_llama.py", "train_llama_configs")

    def count(c):
        layer = (c.hidden * c.head_dim * (2 * c.heads + 2 * c.kv_heads)
                 + 3 * c.hidden * c.ffn + 2 * c.hidden)
        return 2 * c.vocab * c.hidden + c.layers * layer + c.hidden

    tiny = ex.CONFIGS["tiny"]
    assert count(tiny) == sum(p.numel() for p in ex.LlamaForCausalLM(tiny).parameters())
    assert count(ex.CONFIGS["7b"]) == 6_738_415_616


@pytest.mark.parametrize("extra,message", [
    (["--mode", "bf16", "--step-in-backward"], "FP8AdamW's"),
    (["--mode", "coat", "--step-in-backward", "--graph"], "do not go together"),
    (["--mode", "bf16", "--bucket-mb", "64"], "FP8AdamW's"),
    (["--mode", "coat", "--torchao-optim", "adamw8bit"], "for modes torchao and bf16"),
    (["--mode", "bf16", "--persistent-grads"], "FP8AdamW's"),
    (["--mode", "coat", "--persistent-grads", "--step-in-backward"], "do not go together"),
    (["--mode", "bf16", "--recompute-attention-inputs"], "mode coat"),
    (["--mode", "bf16", "--keep-gemm-operands"], "mode coat"),
    (["--mode", "bf16", "--reuse-attention-output"], "mode coat"),
    (["--mode", "coat", "--reuse-attention-output", "--keep-gemm-operands"],
     "do not go together"),
])
def test_memory_options_are_checked_before_training(plain_example, extra, message):
    with pytest.raises(SystemExit, match=message):
        plain_example.main([*TINY_CPU, "--steps", "1", "--eval-every", "0", *extra])


def test_master_weights_are_coat_only(example):
    with pytest.raises(SystemExit, match="bf16-master"):
        example.main(["--mode", "bf16", *TINY_CPU, "--steps", "1", "--param-dtype",
                      "bf16-master"])


@pytest.mark.parametrize("mode", ["bf16", "torchao"])
def test_stochastic_bf16_needs_an_optimizer_that_rounds_stochastically(plain_example, mode):
    # (torchao's plain AdamW rounds to nearest; it is refused before torchao
    # is imported, so this runs without it.)
    with pytest.raises(SystemExit, match="bf16-sr needs an optimizer"):
        plain_example.main(["--mode", mode, *TINY_CPU, "--steps", "1", "--param-dtype",
                            "bf16-sr"])


def test_bf16_baseline_takes_torchaos_adamw8bit(example):
    # The 7B shape's baselines share torchao's 8-bit optimizer.
    pytest.importorskip("torchao")
    _, opt, _ = example.build("bf16", example.CONFIGS["tiny"], "cpu", 1e-3, None,
                              torchao_optim="adamw8bit")
    assert type(opt) is example.torchao_adamw8bit()


def test_stochastic_bf16_builds_fp8adamw_rounding_parameters(example):
    cfg = example.CONFIGS["tiny"]
    _, opt, _ = example.build("coat", cfg, "cpu", 1e-3, None, param_dtype="bf16-sr")
    assert opt.rounding.params and not opt.rounding.moments
    assert all(p.dtype == torch.bfloat16 for g in opt.param_groups for p in g["params"])
    _, opt, _ = example.build("coat", cfg, "cpu", 1e-3, None, param_dtype="bf16")
    assert not opt.rounding.params


def test_bucket_mb_must_be_positive(plain_example):
    with pytest.raises(SystemExit):
        plain_example.parse_args(["--bucket-mb", "0"])
    assert plain_example.parse_args(["--bucket-mb", "none"]).bucket_mb is None
    assert plain_example.parse_args([]).bucket_mb == "default"


@pytest.mark.parametrize("dtype", ["f32", "bf16", "bf16-master", "bf16-sr"])
def test_step_in_backward_trains_on_cpu(example, tmp_path, dtype):
    log = tmp_path / "coat.json"
    try:
        example.main(["--mode", "coat", *TINY_CPU, "--steps", "6", "--eval-every", "0",
                      "--log-every", "2", "--warmup-timing", "0", "--step-in-backward",
                      "--param-dtype", dtype, "--bucket-mb", "0.02", "--log", str(log)])
    except RuntimeError as e:
        if "FP8AdamW" in str(e) or "adamw" in str(e).lower():
            pytest.skip(f"no optimizer kernels: {e}")
        raise
    r = json.loads(log.read_text())
    assert r["step_in_backward"] and r["clip"] == "per-bucket 1.0"
    assert r["param_dtype"] == dtype and r["bucket_mb"] == 0.02 and r["optimizer_buckets"] > 2
    assert all(v == v and v < 10 for v in r["train_loss"])
    assert r["train_loss"][-1] < r["train_loss"][0]


def fake_profile(busy, wall, cats, ew=()):
    return {"steps": 5, "kernels": 1234.0, "gpu_ms": busy * 1.1, "busy_ms": busy,
            "wall_ms": wall, "busy_share": busy / wall, "activity": "cuda",
            "categories": {c: {"ms": ms, "count": 1.0, "top": [[c + "-k", ms]]}
                           for c, ms in cats.items()},
            "elementwise_ops": [list(e) for e in ew]}


def test_profile_table_has_a_column_per_category_present(compare):
    bf16 = {"params": 1e8, "step_time_s": 0.050, "graph": False,
            "profile": fake_profile(45.0, 60.0, {"torch gemm": 30.0, "attention": 5.0,
                                                 "torch elementwise": 10.0},
                                    [("aten::mul", 4.0, 96), ("aten::add", 2.5, 64)])}
    bf16["profile"]["busy_share_of_step"] = 0.9
    coat = {"params": 1e8, "step_time_s": 0.055, "graph": False,
            "profile": fake_profile(30.0, 80.0, {"coat gemm": 20.0, "coat quantize": 6.0,
                                                 "attention": 5.0, "other": 0.5})}
    text = compare.profile_table({"bf16": bf16, "coat-compiled": coat, "torchao": {"x": 1}})
    rows = [[c.strip() for c in row.strip("|").split("|")] for row in text.splitlines()]
    assert rows[0] == ["mode", "step ms", "profiled wall ms", "GPU busy ms", "busy % of step",
                       "busy % of wall", "kernels/step", "coat gemm ms", "coat quantize ms",
                       "torch gemm ms", "attention ms", "torch elementwise ms", "other ms"]
    assert rows[2] == ["bf16", "50.0", "60.0", "45.0", "90%", "75%", "1234", "-", "-",
                       "30.00", "5.00", "10.00", "-"]
    assert rows[3][:7] == ["coat-compiled", "55.0", "80.0", "30.0", "-", "38%", "1234"]
    assert rows[3][7:] == ["20.00", "6.00", "-", "5.00", "-", "0.50"]
    assert len(rows) == 4  # a record without a profile has no row
    details = compare.detail_lines({"bf16": bf16, "coat": coat})
    assert "- bf16: torch elementwise by op: aten::mul 4.00, aten::add 2.50" in details
    assert "  other: other-k 0.50" in details
    assert compare.profile_table({"bf16": {"params": 1}}) == ""


def test_traffic_table_reads_the_counted_bytes(compare):
    coat = {"params": 1e8, "step_time_s": 0.055, "graph": False,
            "profile": fake_profile(30.0, 80.0, {"coat gemm": 20.0, "coat quantize": 6.0})}
    gemm = {"kernels": 3, "launches": 30.0, "bytes": 2e9, "flop": 19.79e12, "ms": 20.0}
    absmax = {"kernels": 1, "launches": 10.0, "bytes": 3e9, "flop": 0.0, "ms": 1.0}
    transpose = {"kernels": 1, "launches": 30.0, "bytes": 6e9, "flop": 0.0, "ms": 5.0}
    coat["profile"].update(copy_tbps=3.0, traffic={
        "coat gemm": dict(gemm, ops={"linear_forward": gemm}),
        "coat quantize": {"kernels": 2, "launches": 40.0, "bytes": 9e9, "flop": 0.0,
                          "ms": 6.0, "ops": {"quantize_per_tensor_transpose": transpose,
                                             "absmax": absmax}}})
    text = compare.traffic_table({"coat": coat, "bf16": {"params": 1, "profile": {}}})
    rows = [[c.strip() for c in row.strip("|").split("|")] for row in text.splitlines()]
    assert rows[0] == ["mode", "category", "launches/step", "GB/step", "TFLOP/step", "ms/step",
                       "TB/s", "% of copy", "TFLOP/s", "% of FP8 peak", "copy TB/s"]
    # 19.79 TFLOP in 20 ms: 989.5 TFLOP/s, half the FP8 peak; 9 GB in 6 ms: 1.5 TB/s.
    assert rows[2] == ["coat", "coat gemm", "30", "2.00", "19.79", "20.00", "0.10", "3.3",
                       "990", "50.0", "3.00"]
    assert rows[3] == ["coat", "coat gemm: linear_forward"] + rows[2][2:]
    assert rows[4] == ["coat", "coat quantize", "40", "9.00", "-", "6.00", "1.50", "50.0",
                       "-", "-", "3.00"]
    # Its ops in the order recorded: 6 GB in 5 ms (1.2 TB/s), 3 GB in 1 ms (3 TB/s).
    assert rows[5][1:8] == ["coat quantize: quantize_per_tensor_transpose", "30", "6.00", "-",
                            "5.00", "1.20", "40.0"]
    assert rows[6][1:8] == ["coat quantize: absmax", "10", "3.00", "-", "1.00", "3.00",
                            "100.0"]
    assert len(rows) == 7
    assert compare.traffic_table({"bf16": {"params": 1}}) == ""


def test_gemm_kernel_table_gives_each_compiled_shape_its_rate(compare):
    fast, slow = {"kernels": 1, "launches": 20.0, "bytes": 1e9, "flop": 19.79e12, "ms": 10.0}, \
        {"kernels": 1, "launches": 10.0, "bytes": 1e9, "flop": 9.9e12, "ms": 10.0}
    op = {"kernels": 2, "launches": 30.0, "bytes": 2e9, "flop": 29.69e12, "ms": 20.0,
          "by_kernel": {"prog_k1_linear_dgrad": fast, "prog_k2_linear_dgrad": slow}}
    quant = {"kernels": 1, "launches": 1.0, "bytes": 1e9, "flop": 0.0, "ms": 1.0}
    coat = {"params": 1e8, "step_time_s": 0.05, "graph": False,
            "profile": fake_profile(30.0, 80.0, {"coat gemm": 20.0})}
    coat["profile"].update(copy_tbps=3.0, traffic={
        "coat gemm": dict(op, ops={"linear_dgrad": op}),
        "coat quantize": dict(quant, ops={"absmax": dict(quant, by_kernel={"q": quant})})})
    text = compare.gemm_kernel_table({"coat": coat, "bf16": {"params": 1, "profile": {}}})
    rows = [[c.strip() for c in row.strip("|").split("|")] for row in text.splitlines()]
    assert rows[0] == ["mode", "GEMM kernel", "op", "launches/step", "TFLOP/step", "ms/step",
                       "TFLOP/s", "% of FP8 peak"]
    # 19.79 TFLOP in 10 ms: 1979 TFLOP/s, the peak; half of it in the same time.
    assert rows[2] == ["coat", "prog_k1_linear_dgrad", "linear_dgrad", "20", "19.79", "10.00",
                       "1979", "100.0"]
    assert rows[3][1:] == ["prog_k2_linear_dgrad", "linear_dgrad", "10", "9.90", "10.00",
                           "990", "50.0"]
    assert len(rows) == 4  # no other category's kernels
    assert compare.gemm_kernel_table({"bf16": {"params": 1}}) == ""
    assert "| GEMM kernel |" in compare.profile_report({"coat": dict(coat, config="x")})


def test_profile_report_heads_the_tables(compare):
    r = {"config": "100m", "batch": 16, "seq": 1024, "device": "NVIDIA H100", "torch": "2.11",
         "step_time_s": 0.05, "profile": fake_profile(40.0, 60.0, {"torch gemm": 30.0})}
    failed = {"config": "100m", "profile_error": "JSONDecodeError: bad trace"}
    text = compare.profile_report({"bf16": r, "coat": failed})
    assert text.startswith("Profile: 100m, 16x1024 tokens a step, NVIDIA H100, torch 2.11; "
                           "ms per step over the last 5 steps of each run.")
    assert "| bf16 | 50.0 |" in text
    assert "- coat: the profile failed: JSONDecodeError: bad trace" in text


def test_a_failed_profile_leaves_the_run_standing(plain_example, tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "bench"))
    import step_profile

    def broken(*args, **kwargs):
        raise ValueError("no trace")

    monkeypatch.setattr(step_profile, "summarize", broken)  # after the profiler has stopped
    log = tmp_path / "bf16.json"
    assert plain_example.main(["--mode", "bf16", *TINY_CPU, "--steps", "4", "--eval-every", "0",
                               "--warmup-timing", "1", "--log-every", "1", "--profile", "1",
                               "--log", str(log)]) == 0
    r = json.loads(log.read_text())
    assert "profile" not in r and r["profile_error"] == "ValueError: no trace"
    assert len(r["train_loss"]) == 4 and r["step_time_s"] > 0


def test_memory_table_reads_the_memory_view(compare):
    g = 2 ** 30
    bf16 = {"peak_memory_bytes": 9 * g, "memory": {
        "step": 3, "between_steps_bytes": 2 * g, "after_forward_bytes": 6 * g,
        "after_backward_bytes": 3 * g, "after_optimizer_bytes": 2.5 * g,
        "step_peak_bytes": 8 * g}}
    graph = {"graph": True, "peak_memory_bytes": 5 * g, "memory": {
        "step": 3, "between_steps_bytes": g, "after_backward_bytes": 2 * g,
        "after_optimizer_bytes": g, "step_peak_bytes": 4 * g}}
    rows = compare.memory_table({"bf16": bf16, "coat": graph}).splitlines()
    assert rows[0].startswith("| mode | step | between steps GiB | after forward GiB |")
    assert rows[2] == "| bf16 | 3 | 2.00 | 6.00 | 3.00 | 2.50 | 8.00 | 9.00 |"
    assert rows[3] == "| coat (graph) | 3 | 1.00 | - | 2.00 | 1.00 | 4.00 | 5.00 |"
    assert len(rows) == 4
    sib = dict(bf16, step_in_backward=True)
    text = compare.memory_table({"coat-sib": sib})
    assert "| coat-sib | 3 |" in text and "after the optimizer step too" in text


def test_run_modes_reports_failed_runs_with_their_reason(compare, tmp_path, monkeypatch):
    """A compile failure's record names it; a crash without a record is its
    exit status; a stale record of an earlier run is not read."""
    (tmp_path / "coat.json").write_text(json.dumps({"final_train_loss": 1.0}))  # stale
    calls = []

    def fake_run(cmd):
        calls.append(cmd)
        log = Path(cmd[cmd.index("--log") + 1])
        if "--compile" in cmd:
            log.write_text(json.dumps({"mode": "coat", "compile": True, "error": {
                "phase": "compile", "type": "Unsupported", "message": "ctypes call"}}))
            return SimpleNamespace(returncode=3)
        if cmd[cmd.index("--mode") + 1] == "coat":
            return SimpleNamespace(returncode=1)
        log.write_text(json.dumps({"mode": "bf16", "final_train_loss": 1.0}))
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(compare.subprocess, "run", fake_run)
    records, failed = compare.run_modes(["bf16", "coat", "coat-compiled"], tmp_path,
                                        ["--steps", "3"], profile=4, traces=True)
    assert list(records) == ["bf16"]
    assert failed == {"coat": "failed (exit 1)",
                      "coat-compiled": "compile failed: Unsupported: ctypes call"}
    assert calls[2][calls[2].index("--profile") + 1] == "4"
    assert calls[2][-1].endswith("coat-compiled.trace.json.gz")


def test_anchor_ratios_are_those_of_the_targets(compare):
    rec = lambda ms, gib: {"step_time_s": ms / 1e3, "peak_memory_bytes": gib * 2**30}  # noqa: E731
    records = {"bf16": rec(300, 50), "bf16-compiled@reduce-overhead": rec(200, 40),
               "torchao": rec(190, 30), "coat-master-compiled": rec(171, 18),
               "coat": {"peak_memory_bytes": 15 * 2**30}}
    lines = compare.anchor_ratios(records).splitlines()
    assert lines[0] == ("- coat-master-compiled: step 0.855x bf16-compiled@reduce-overhead, "
                        "0.900x torchao; peak 0.450x bf16-compiled@reduce-overhead, "
                        "0.600x torchao")
    assert lines[1] == "- coat: peak 0.375x bf16-compiled@reduce-overhead, 0.500x torchao"
    assert compare.anchor_ratios({"bf16": rec(1, 1), "coat": rec(1, 1)}) == ""


def test_batches_report_the_largest_that_fits(compare, tmp_path, monkeypatch, capsys):
    """--batches runs every mode at each size; a run out of memory is a cell
    of the fit table, and the largest batch that ran is per mode."""
    def fake_run(cmd):
        log = Path(cmd[cmd.index("--log") + 1])
        mode, batch = cmd[cmd.index("--mode") + 1], int(cmd[cmd.index("--batch") + 1])
        if batch > (8 if mode == "coat" else 4):
            log.write_text(json.dumps({"mode": mode, "error": {
                "phase": "memory", "type": "OutOfMemoryError", "message": "CUDA out of memory"}}))
            return SimpleNamespace(returncode=4)
        log.write_text(json.dumps({
            "mode": mode, "config": "7b", "batch": batch, "seq": 2048, "params": 6.7e9,
            "device": "NVIDIA H100", "final_train_loss": 5.0, "train_loss": [6.0, 5.0],
            "held_out": [], "step_time_s": 0.1 * batch, "peak_memory_bytes": batch * 2**30}))
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(compare.subprocess, "run", fake_run)
    monkeypatch.setattr(compare, "plot", lambda *a: None)
    monkeypatch.setattr(sys, "argv", ["train_compare.py", "--modes", "torchao", "coat",
                                      "--batches", "8", "4", "16", "--out", str(tmp_path),
                                      "--config", "7b"])
    assert compare.main() == 0
    text = capsys.readouterr().out
    rows = [[c.strip() for c in row.strip("|").split("|")] for row in text.splitlines()
            if row.startswith("| ")]
    fit = rows[rows.index(["mode", "batch 4", "batch 8", "batch 16", "largest that ran"]):]
    assert fit[1] == ["torchao", "400.0 ms, 4.00 GiB", "out of memory", "out of memory", "4"]
    assert fit[2] == ["coat", "400.0 ms, 4.00 GiB", "800.0 ms, 8.00 GiB", "out of memory", "8"]
    assert (tmp_path / "fit.md").exists() and (tmp_path / "b8" / "table.md").exists()
    monkeypatch.setattr(sys, "argv", ["train_compare.py", "--batches", "8", "--batch", "4",
                                      "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        compare.main()
    assert "--batches and --batch do not go together" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["train_compare.py", "--batches", "8", "0",
                                      "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        compare.main()
    assert "--batches takes positive batch sizes" in capsys.readouterr().err
    # Without --batches, --batch passes through to train_llama.py as it is.
    calls = []
    monkeypatch.setattr(compare.subprocess, "run",
                        lambda cmd: calls.append(cmd) or fake_run(cmd))
    monkeypatch.setattr(sys, "argv", ["train_compare.py", "--modes", "coat", "--batch", "4",
                                      "--out", str(tmp_path / "one")])
    assert compare.main() == 0
    assert calls[0][calls[0].index("--batch") + 1] == "4"


@pytest.mark.parametrize("mode,ours", [("bf16", False), ("coat", True)])
def test_profile_finds_the_kernels_on_gpu(gpu_example, tmp_path, mode, ours):
    """The trace holds our kernels (launched through the driver API) and
    torch's, sorted into their categories; the memory view is taken."""
    log = tmp_path / f"{mode}.json"
    gpu_example.main(["--mode", mode, "--config", "100m", "--device", "cuda", "--steps", "6",
                      "--batch", "2", "--seq", "128", "--eval-every", "0", "--log-every", "1",
                      "--warmup-timing", "2", "--memory-step", "1", "--profile", "2",
                      "--log", str(log)])
    r = json.loads(log.read_text())
    p = r["profile"]
    assert p["activity"] == "cuda" and "warning" not in p and p["kernels"] > 0
    # (both rounded to 0.1 us in the record)
    assert 0 < p["busy_ms"] <= p["wall_ms"] and p["busy_ms"] <= p["gpu_ms"] + 1e-3
    cats = p["categories"]
    assert "attention" in cats and "torch elementwise" in cats
    if ours:
        assert {"coat gemm", "coat quantize", "coat norms", "coat flow",
                "coat optimizer"} <= set(cats)
        # Every family's launches were counted and found in the trace: the
        # counted kernels' time is the category's, and nothing ran faster
        # than twice the copy bandwidth (bytes counted per launch are a floor).
        t = p["traffic"]
        assert p["uncounted_ms"] == 0 and p["copy_tbps"] > 0.5
        for cat in ("coat gemm", "coat quantize", "coat norms", "coat flow", "coat optimizer"):
            assert t[cat]["launches"] > 0 and t[cat]["bytes"] > 0
            assert t[cat]["ms"] == pytest.approx(cats[cat]["ms"], abs=2e-3)
            assert t[cat]["bytes"] / t[cat]["ms"] / 1e9 < 2 * p["copy_tbps"]
        assert t["coat gemm"]["flop"] > 0 and t["coat quantize"]["flop"] == 0
    else:
        assert "torch gemm" in cats and "torch optimizer" in cats
        assert not any(c.startswith("coat") for c in cats)
        assert "traffic" not in p
    m = r["memory"]
    assert m["step"] == 1
    assert m["between_steps_bytes"] < m["after_forward_bytes"] <= m["step_peak_bytes"]
    assert r["peak_memory_bytes"] >= m["step_peak_bytes"]


def test_step_in_backward_memory_view_on_gpu(gpu_example, tmp_path):
    """The 100m config's memory view, stepping after and inside the
    backward: no gradient is held between steps either way; stepping in the
    backward, none is left after the backward and the step's peak is lower
    by most of the (f32) gradient."""
    runs = {}
    for sib in (False, True):
        log = tmp_path / f"coat_{sib}.json"
        gpu_example.main(["--mode", "coat", "--config", "100m", "--device", "cuda", "--steps",
                          "3", "--batch", "2", "--seq", "128", "--eval-every", "0",
                          "--log-every", "1", "--warmup-timing", "0", "--memory-step", "1",
                          "--bucket-mb", "32", "--log", str(log)]
                         + (["--step-in-backward"] if sib else []))
        runs[sib] = json.loads(log.read_text())
    grads = 4 * runs[False]["params"]  # f32 gradients
    after, inside = runs[False]["memory"], runs[True]["memory"]
    print({k: {m: v / 2**20 for m, v in r["memory"].items() if m != "step"}
           for k, r in runs.items()})
    assert runs[True]["step_in_backward"] and runs[True]["optimizer_buckets"] > 10
    assert abs(after["between_steps_bytes"] - inside["between_steps_bytes"]) < 0.05 * grads
    assert after["after_backward_bytes"] - after["between_steps_bytes"] > 0.9 * grads
    assert inside["after_backward_bytes"] - inside["between_steps_bytes"] < 0.1 * grads
    assert inside["step_peak_bytes"] < after["step_peak_bytes"] - 0.5 * grads


def test_compile_mode_reaches_torch_compile(plain_example, monkeypatch):
    seen = []

    def fake_compile(model, **kwargs):
        seen.append(kwargs)
        return model
    monkeypatch.setattr(plain_example.torch, "compile", fake_compile, raising=False)
    model = torch.nn.Linear(2, 2)
    assert plain_example.compiled(model) is model
    assert plain_example.compiled(model, "reduce-overhead") is model
    assert seen == [{}, {"mode": "reduce-overhead"}]


def test_compile_mode_must_be_one_of_torch_compiles(plain_example, capsys):
    with pytest.raises(SystemExit):
        plain_example.main(["--mode", "bf16", *TINY_CPU, "--steps", "1", "--eval-every", "0",
                            "--compile", "--compile-mode", "fastest"])
    assert "invalid choice: 'fastest'" in capsys.readouterr().err


def test_eager_runs_ignore_the_compile_mode(plain_example, tmp_path):
    log = tmp_path / "bf16.json"
    plain_example.main(["--mode", "bf16", *TINY_CPU, "--steps", "1", "--eval-every", "0",
                        "--compile-mode", "reduce-overhead", "--log", str(log)])
    r = json.loads(log.read_text())
    assert not r["compile"] and "compile_mode" not in r
