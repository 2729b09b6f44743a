"""bench/step_profile.py without a GPU: its rule table on kernel names of
every category (the names torch 2.x and our programs launch on an H100),
the busy time of overlapping intervals, the per-step summary of a made-up
kernel list, and the reading of Chrome traces in Kineto's format and in the
plain list torch builds without Kineto write."""

import gzip
import json
import os
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))

import step_profile as sp  # noqa: E402

# (kernel name, launching op, category, detail); None: any detail.
KERNELS = [
    # Our program kernels (coat.programs, scripts/compile_model.py), by family.
    ("coat_mlp_h1024_f2816_k14_linear_forward", None, "coat gemm", "linear_forward"),
    # The q|k|v GEMM with the rope in its epilogue (coat-fuse-rope).
    ("coat_norm_linear_h1024_o3072_rope32x64_k7_linear_forward_rope", None, "coat gemm",
     "linear_forward_rope"),
    ("coat_norm_linear_h1024_o3072_k11_linear_dgrad", None, "coat gemm", "linear_dgrad"),
    ("coat_linear_residual_i1024_h1024_k12_linear_wgrad", None, "coat gemm", "linear_wgrad"),
    ("coat_mlp_h1024_f2816_k4_quantize_per_group", None, "coat quantize", "quantize_per_group"),
    ("coat_mlp_h1024_f2816_k13_quantize_per_tensor_transpose", None, "coat quantize",
     "quantize_per_tensor_transpose"),
    ("coat_mlp_h1024_f2816_k0_absmax", None, "coat quantize", "absmax"),
    ("coat_mlp_h1024_f2816_k6_scale_from_maxima", None, "coat quantize", "scale_from_maxima"),
    ("coat_mlp_h1024_f2816_k0_absmax_scale", None, "coat quantize", "absmax_scale"),
    ("both_consumers_k2_max_of_group_scales", None, "coat quantize", "max_of_group_scales"),
    ("both_consumers_k3_requantize_per_tensor", None, "coat quantize", "requantize_per_tensor"),
    ("coat_mlp_h1024_f2816_k5_rmsnorm", None, "coat norms", "rmsnorm"),
    ("coat_mlp_h1024_f2816_k44_rmsnorm_grad_reduce", None, "coat norms",
     "rmsnorm_grad_reduce"),
    ("coat_layernorm_b_h1024_k2_layernorm_grad", None, "coat norms", "layernorm_grad"),
    ("coat_mlp_h1024_f2816_k16_silu", None, "coat flow", "silu"),
    ("coat_mlp_h1024_f2816_k30_swiglu_mul_grad", None, "coat flow", "swiglu_mul_grad"),
    ("coat_linear_residual_i1024_h1024_k8_residual_add", None, "coat flow", "residual_add"),
    ("coat_norm_linear_h1024_o3072_rope32x64_k8_rope", None, "coat flow", "rope"),
    ("coat_norm_linear_h1024_o3072_rope32x64_k9_rope_grad", None, "coat flow", "rope_grad"),
    # The kernel library (scripts/demo.sh): coat_<op>_...
    ("coat_adamw_f32_e4m3x_e4m3x_g128", None, "coat optimizer", "adamw_f32_e4m3x_e4m3x_g128"),
    ("coat_fp8_linear_fwd", None, "coat gemm", "fp8_linear_fwd"),
    ("coat_quantize_pt_bf16_e4m3_sbf16", None, "coat quantize", None),
    ("coat_dequantize_e4m3_g16_sbf16_bf16", None, "coat quantize", None),
    ("coat_gelu_e4m3_g16", None, "coat flow", None),
    ("rmsnorm_bwd_h1024_reduce", None, "coat norms", None),
    ("coat_something_new", None, "coat other", "something_new"),
    # torch's GEMMs.
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
     "execute_segment_k_off_kernel__5x_cublas", "aten::mm", "torch gemm", "aten::mm"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "aten::mm", "torch gemm", "aten::mm"),
    ("nvjet_qqtst_128x128_128x6_1x1_v_bz_TNN", "aten::_scaled_mm", "torch gemm",
     "aten::_scaled_mm"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>"
     "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8::Params)",
     "aten::addmm", "torch gemm", "aten::addmm"),
    ("void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, "
     "false, false>(cublasSplitKParams<float>, float const*)", "aten::mm", "torch gemm", None),
    ("some_new_gemm_name", "aten::bmm", "torch gemm", "aten::bmm"),
    ("unnamed_kernel_of_an_mm", "aten::mm", "torch gemm", "aten::mm"),
    # Attention (flash and memory-efficient kernels carry cutlass types).
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, "
     "true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
     "aten::_flash_attention_forward", "attention", "aten::_flash_attention_forward"),
    ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel"
     "<cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, false, 64, 64, 64, false>::Params)",
     None, "attention", None),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_"
     "kernel0_0", "aten::_cudnn_attention_forward", "attention", None),
    ("some_attention_helper", "aten::_scaled_dot_product_flash_attention", "attention", None),
    # torch's element-wise kernels, by the op that launched them.
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "at::detail::Array<char*, 3>)", "aten::add", "torch elementwise", "aten::add"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MaxOps<float>, "
     "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MaxOps<float>, "
     "unsigned int, float, 4>)", "aten::max", "torch elementwise", "aten::max"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
     None, "torch elementwise", "at::native::cunn_SoftMaxForward"),
    ("an_unknown_kernel_of_a_copy", "aten::copy_", "torch elementwise", "aten::copy_"),
    # Inductor's kernels, by kind.
    ("triton_poi_fused__to_copy_add_mul_0", "CompiledFunction", "triton", "poi _to_copy_add_mul"),
    ("triton_red_fused__to_copy_mean_pow_1", None, "triton", "red _to_copy_mean_pow"),
    ("triton_per_fused_add_mean_2", None, "triton", "per add_mean"),
    ("triton_poi_0", None, "triton", "poi"),
    # The optimizer (fused AdamW, clipping's foreach kernels).
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
     "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor"
     "<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, "
     "bool, double*, double*>(...)", "aten::_fused_adamw_", "torch optimizer", "aten::_fused_adamw_"),
    ("void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, float>(float const*, "
     "at::native::TensorListAddresses, int)", "aten::_foreach_norm", "torch optimizer", None),
    ("an_unknown_foreach_kernel", "aten::_foreach_mul_", "torch optimizer", None),
    # Collectives, copies.
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
     "nccl:all_reduce", "nccl", None),
    ("Memcpy HtoD (Pageable -> Device)", "aten::copy_", "memcpy/memset", None),
    ("Memset (Device)", None, "memcpy/memset", None),
    # Names no rule knows.
    ("weird_kernel", None, "other", "weird_kernel"),
    ("void my_ext::kernel<float>(float*)", "my_ext::op", "other", "my_ext::kernel"),
    # A program-like name whose op is not one of ours is not ours.
    ("some_lib_k3_frobnicate", None, "other", None),
]


@pytest.mark.parametrize("name,op,category,detail", KERNELS,
                         ids=[f"{c}:{n[:40]}" for n, _, c, _ in KERNELS])
def test_rule_table_sorts_each_kernel(name, op, category, detail):
    cat, det = sp.categorize(name, op)
    assert cat == category, (name, op, cat, det)
    if detail is not None:
        assert det == detail


def test_every_category_is_covered_and_listed():
    assert {c for _, _, c, _ in KERNELS} == set(sp.CATEGORIES)
    assert {cat for cat, _, _ in sp.RULES} | {"other"} == set(sp.CATEGORIES)
    assert all(field in ("coat", "name", "op") for _, field, _ in sp.RULES)


def test_coat_op_reads_program_and_library_names():
    assert sp.coat_op("coat_mlp_h1024_f2816_k44_rmsnorm_grad_reduce") == "rmsnorm_grad_reduce"
    assert sp.coat_op("coat_adamw_bf16_e4m3x_e4m3x_g128_sr") == "adamw_bf16_e4m3x_e4m3x_g128_sr"
    assert sp.coat_op("both_consumers_k7_silu") == "silu"
    assert sp.coat_op("some_lib_k3_frobnicate") is None
    assert sp.coat_op("triton_poi_fused_k1_add_0") is None  # triton rules come first anyway
    assert sp.coat_op("void coat_fake<float>(float*)") is None


def test_short_name_drops_templates_parameters_and_anonymous_namespaces():
    assert sp.short_name("void at::native::(anonymous namespace)::cunn_SoftMaxForward"
                         "<8, float>(float*, int)") == "at::native::cunn_SoftMaxForward"
    assert sp.short_name("plain_name") == "plain_name"
    assert len(sp.short_name("x" * 100, width=20)) == 20


@pytest.mark.parametrize("intervals,busy", [
    ([], 0.0),
    ([(0, 10)], 10.0),
    ([(0, 10), (20, 25)], 15.0),          # disjoint
    ([(0, 10), (5, 15)], 15.0),           # overlapping
    ([(0, 10), (2, 4), (3, 5)], 10.0),    # nested
    ([(5, 15), (0, 10), (10, 12)], 15.0),  # unsorted, touching
    ([(0, 10), (10, 10), (30, 30)], 10.0),  # empty intervals add nothing
    ([(0.5, 1.25), (1.0, 2.0)], 1.5),
])
def test_busy_time_is_the_union_of_intervals(intervals, busy):
    assert sp.busy_time(intervals) == pytest.approx(busy)


def test_summary_per_step():
    # Two steps; times in us. Two kernels overlap (another stream).
    acts = [
        ("coat_mlp_h1024_f2816_k14_linear_forward", 100, 0, 100, None),
        ("coat_mlp_h1024_f2816_k4_quantize_per_group", 50, 100, 150, None),
        ("void at::native::vectorized_elementwise_kernel<4>(int)", 30, 140, 170, "aten::mul"),
        ("void at::native::vectorized_elementwise_kernel<4>(int)", 10, 200, 210, "aten::add"),
        ("Memcpy HtoD (Pageable -> Device)", 20, 300, 320, "aten::copy_"),
        ("coat_mlp_h1024_f2816_k14_linear_forward", 100, 1000, 1100, None),
        ("coat_mlp_h1024_f2816_k4_quantize_per_group", 50, 1100, 1150, None),
        ("void at::native::vectorized_elementwise_kernel<4>(int)", 30, 1150, 1180, "aten::mul"),
        ("weird", 40, 1200, 1240),  # no op field at all
    ]
    s = sp.summarize(acts, steps=2, wall_ms=1.0)
    assert s["steps"] == 2
    assert s["kernels"] == 4.0  # 8 kernels, the copy not counted, over 2 steps
    assert s["gpu_ms"] == pytest.approx(0.430 / 2 * 1)  # 430 us over 2 steps
    # union: [0,170] 170 + [200,210] 10 + [300,320] 20 + [1000,1180] 180 + 40 = 420 us
    assert s["busy_ms"] == pytest.approx(0.210)
    assert s["busy_share"] == pytest.approx(0.21)
    assert list(s["categories"]) == ["coat gemm", "coat quantize", "torch elementwise",
                                     "memcpy/memset", "other"]  # CATEGORIES order
    assert s["categories"]["coat gemm"] == {"ms": 0.1, "count": 1.0,
                                            "top": [["linear_forward", 0.1]]}
    assert s["categories"]["torch elementwise"]["ms"] == pytest.approx(0.035)
    assert s["elementwise_ops"] == [["aten::mul", 0.03, 1.0], ["aten::add", 0.005, 0.5]]
    assert s["categories"]["other"]["top"] == [["weird", 0.02]]
    json.dumps(s)  # the record stores it as is


def test_traffic_per_kernel_splits_an_op_by_configuration():
    """Two GEMM kernels of one op (two shapes): each its own row, slowest
    first, their sums the op's."""
    fwd_a, fwd_b = ("coat_mlp_h1024_f2816_k11_linear_forward",
                    "coat_mlp_h1024_f2816_k16_linear_forward")
    acts = [(fwd_a, 100, 0, 100, None), (fwd_b, 300, 100, 400, None)]
    traffic = {fwd_a: {"op": "linear", "launches": 2.0, "bytes": 1e6, "flop": 2e11},
               fwd_b: {"op": "linear", "launches": 1.0, "bytes": 1e6, "flop": 3e11}}
    s = sp.summarize(acts, steps=1, traffic=traffic)
    op = s["traffic"]["coat gemm"]["ops"]["linear_forward"]
    assert list(op["by_kernel"]) == [fwd_b, fwd_a]  # 0.3 ms, then 0.1
    assert (op["launches"], op["flop"], op["ms"]) == (3.0, 5e11, 0.4)
    rows = {r[0]: r for r in sp.traffic_rows(s, peak_tflops=2000.0, by_kernel=True)}
    # 2e11 flop in 0.1 ms: 2000 TFLOP/s; 3e11 in 0.3 ms: 1000.
    assert rows[f"coat gemm: linear_forward: {fwd_a}"][8] == pytest.approx(100.0)
    assert rows[f"coat gemm: linear_forward: {fwd_b}"][8] == pytest.approx(50.0)
    assert rows["coat gemm: linear_forward"][8] == pytest.approx(62.5)


def test_traffic_per_category_over_the_time_of_the_counted_kernels():
    # Two steps; us. The GEMM and the quantize kernel were counted; the
    # rmsnorm was launched but not counted; a torch kernel has no traffic.
    gemm, quant = ("coat_mlp_h1024_f2816_k14_linear_forward",
                   "coat_mlp_h1024_f2816_k4_quantize_per_group")
    acts = [(gemm, 100, 0, 100, None), (quant, 50, 100, 150, None),
            ("coat_mlp_h1024_f2816_k5_rmsnorm", 20, 150, 170, None),
            ("void at::native::vectorized_elementwise_kernel<4>(int)", 30, 170, 200, "aten::mul"),
            (gemm, 300, 1000, 1300, None), (quant, 50, 1300, 1350, None)]
    traffic = {gemm: {"op": "linear", "launches": 1.0, "bytes": 1e6, "flop": 4e11},
               quant: {"op": "quantize", "launches": 1.0, "bytes": 1.5e8, "flop": 0}}
    s = sp.summarize(acts, steps=2, traffic=traffic)
    gemm_row = {"kernels": 1, "launches": 1.0, "bytes": 1e6, "flop": 4e11, "ms": 0.2}
    quant_row = {"kernels": 1, "launches": 1.0, "bytes": 1.5e8, "flop": 0.0, "ms": 0.05}
    assert s["traffic"] == {
        "coat gemm": dict(gemm_row, ops={"linear_forward": dict(
            gemm_row, by_kernel={gemm: gemm_row})}),
        "coat quantize": dict(quant_row, ops={"quantize_per_group": dict(
            quant_row, by_kernel={quant: quant_row})})}
    assert s["uncounted_ms"] == pytest.approx(0.01)  # the rmsnorm: 20 us over 2 steps
    rows = {r[0]: r for r in sp.traffic_rows(s, copy_tbps=3.0, peak_tflops=2000.0)}
    # 4e11 flop in 0.2 ms: 2000 TFLOP/s, the whole peak; 1e6 B in 0.2 ms: 0.005 TB/s.
    _, n, gb, tf, ms, tbps, pc, tfs, pp = rows["coat gemm"]
    assert (n, gb, tf, ms) == (1.0, 1e-3, 0.4, 0.2)
    assert tfs == pytest.approx(2000.0) and pp == pytest.approx(100.0)
    assert tbps == pytest.approx(0.005)
    # 1.5e8 B in 0.05 ms: 3 TB/s, the whole copy bandwidth; no FLOPs.
    _, n, gb, tf, ms, tbps, pc, tfs, pp = rows["coat quantize"]
    assert tbps == pytest.approx(3.0) and pc == pytest.approx(100.0)
    assert tf is None and tfs is None and pp is None
    # Per op: each category followed by its ops, "category: op".
    assert [r[0] for r in sp.traffic_rows(s, by_op=True)] == [
        "coat gemm", "coat gemm: linear_forward", "coat quantize",
        "coat quantize: quantize_per_group"]
    assert sp.traffic_rows(s, 3.0, by_op=True)[3][1:] == rows["coat quantize"][1:]
    # Per kernel: each op followed by its kernels, "category: op: kernel".
    assert [r[0] for r in sp.traffic_rows(s, by_kernel=True)] == [
        "coat gemm", "coat gemm: linear_forward", f"coat gemm: linear_forward: {gemm}",
        "coat quantize", "coat quantize: quantize_per_group",
        f"coat quantize: quantize_per_group: {quant}"]
    # Without a copy bandwidth there is no % of copy; the text says so.
    assert sp.traffic_rows(s)[1][6] is None
    text = sp.format_summary(s)
    assert "copy not measured" in text and "coat quantize" in text
    assert "  quantize_per_group" in text
    assert "not counted: 0.01 ms" in text
    assert "traffic" not in sp.summarize(acts, steps=2)  # only when given
    json.dumps(s)


def test_summary_without_wall_time_and_bad_steps():
    s = sp.summarize([("k", 1.0, 0.0, 1.0, None)], steps=1)
    assert s["wall_ms"] is None and s["busy_share"] is None
    with pytest.raises(ValueError):
        sp.summarize([], steps=0)
    assert sp.format_summary(sp.summarize([], steps=1))  # an empty window still prints


def kineto_trace():
    """What torch.profiler's export_chrome_trace writes with Kineto
    (libkineto's ChromeTraceLogger): CPU ops and their kernels share an
    `External id`; flows, runtime calls and GPU-side annotations are not
    activities."""
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0,
         "dur": 20.0, "args": {"External id": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 40.0,
         "dur": 5.0, "args": {"External id": 8}},
        {"ph": "X", "cat": "user_annotation", "name": "coat.layer", "pid": 1, "tid": 1,
         "ts": 50.0, "dur": 30.0, "args": {"External id": 9}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 12.0, "dur": 3.0, "args": {"External id": 7, "correlation": 100}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
         "pid": 0, "tid": 7, "ts": 20.5, "dur": 40.25,
         "args": {"External id": 7, "correlation": 100, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4>()",
         "pid": 0, "tid": 8, "ts": 60.0, "dur": 4.0, "args": {"External id": 8}},
        {"ph": "X", "cat": "kernel", "name": "coat_mlp_h1024_f2816_k5_rmsnorm", "pid": 0,
         "tid": 7, "ts": 70.0, "dur": 8.0, "args": {"External id": 9}},
        {"ph": "X", "cat": "kernel", "name": "coat_mlp_h1024_f2816_k16_silu", "pid": 0,
         "tid": 7, "ts": 80.0, "dur": 2.0, "args": {"correlation": 101}},  # not linked
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7,
         "ts": 90.0, "dur": 1.0, "args": {}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "coat.layer", "pid": 0, "tid": 7,
         "ts": 70.0, "dur": 12.0, "args": {}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 100, "pid": 1, "tid": 1, "ts": 12.0},
        {"ph": "i", "name": "Record Window End", "s": "g", "pid": "", "tid": "", "ts": 100.0},
    ]
    return {"schemaVersion": 1, "traceEvents": ev, "traceName": "t.json"}


def test_kineto_trace_gives_kernels_with_their_ops():
    acts = sp.activities_from_trace(kineto_trace(), "cuda")
    assert [(a.name[:12], a.op) for a in acts] == [
        ("nvjet_tst_12", "aten::mm"), ("void at::nat", "aten::add"),
        ("coat_mlp_h10", "coat.layer"), ("coat_mlp_h10", None), ("Memset (Devi", None)]
    assert acts[0].start == 20.5 and acts[0].end == pytest.approx(60.75)
    s = sp.summarize(acts, steps=1, wall_ms=0.1)
    assert s["kernels"] == 4
    assert set(s["categories"]) == {"torch gemm", "torch elementwise", "coat norms", "coat flow",
                                    "memcpy/memset"}
    assert s["categories"]["torch gemm"]["top"] == [["aten::mm", 0.0403]]
    # [20.5, 64] 43.5 (the element-wise kernel, on another stream, overlaps the
    # GEMM) + 8 + 2 + 1 us
    assert s["busy_ms"] == pytest.approx(0.0545)


def test_cpu_activities_are_ops_with_self_time():
    # The list torch builds without Kineto write: only CPU events, no `cat`.
    trace = [
        {"name": "aten::matmul", "ph": "X", "ts": 0, "dur": 100, "tid": 1, "pid": "CPU"},
        {"name": "aten::mm", "ph": "X", "ts": 10, "dur": 80, "tid": 1, "pid": "CPU"},
        {"name": "aten::resolve_conj", "ph": "X", "ts": 20, "dur": 0, "tid": 1, "pid": "CPU"},
        {"name": "aten::relu", "ph": "X", "ts": 100, "dur": 20, "tid": 1, "pid": "CPU"},
        {"name": "aten::clamp_min", "ph": "X", "ts": 100, "dur": 20, "tid": 1, "pid": "CPU"},
        {"name": "aten::add", "ph": "X", "ts": 5, "dur": 10, "tid": 2, "pid": "CPU"},
    ]
    acts = {a.name: a for a in sp.activities_from_trace(trace, "cpu")}
    assert acts["aten::matmul"].dur == 20 and acts["aten::mm"].dur == 80
    assert acts["aten::relu"].dur == 0 and acts["aten::clamp_min"].dur == 20
    assert acts["aten::add"].dur == 10 and acts["aten::add"].op == "aten::add"
    s = sp.summarize(list(acts.values()), steps=1)
    assert s["categories"]["torch gemm"]["ms"] == pytest.approx(0.1)
    assert s["busy_ms"] == pytest.approx(0.12)  # thread 2's op lies inside thread 1's


def test_load_trace_reads_gzip(tmp_path):
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(kineto_trace(), f)
    assert sp.load_trace(path)["traceName"] == "t.json"


def test_command_line_prints_the_summary(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(kineto_trace()))
    assert sp.main([str(path), "--steps", "1", "--wall-ms", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "4 kernels" in out and "torch gemm" in out and "aten::mm" in out
