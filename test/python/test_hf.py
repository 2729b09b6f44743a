"""coat.convert on Hugging Face models built from tiny configs (random
weights, nothing downloaded; fixtures/hf_tiny_configs.json): per family, the
converted model against the unconverted one on identical inputs, its
state_dict and save_pretrained/from_pretrained round trips, filter_fn and the
report, gradient checkpointing, the KV cache, the Trainer, and the families
and features refused with errors naming them. GPT-NeoX comes with either
residual (gpt_neox: parallel, gpt_neox_sequential) and partial rotary;
OLMo-1 without and with clip_qkv (olmo, olmo_clip); GPT-2 (gpt2: Conv1D
projections, gelu_new, absolute positions; its non-default attention-scale
options are refused).

Needs transformers (5.x) and torch >= 2; on a Hopper GPU the programs come
from $COAT_KERNELS (compile them where LLVM is: scripts/compile_model.py
--hf-config test/python/fixtures/hf_tiny_configs.json --out DIR), on the CPU
they are compiled into a temporary cache and run as CPU twins.

Tolerances: the loss within 2% of the unconverted model's. Gradients are
judged against what FP8 allows: the same model with only its decoder
layers' GEMMs emulated in FP8 (fp8_emulation.py: per-tensor E4M3 operands,
E5M2 output gradients, the torchao float8 recipe; an independent plain-torch
model of the numerics) gives each parameter's gradient a cosine similarity
against the unconverted model's, its floor. A converted gradient's error
may be at most 1.5x the emulation's (1 - cos, about half the squared
relative error, at most 2.25x the floor's, plus 1e-3), never below 0.95;
the median likewise. At random initialisation the attention's q and k
gradients (Qwen3's and OLMo2's QK-norm weights too) pass through a
near-uniform softmax, a small difference of large terms that any
perturbation of the forward moves: the emulation puts them at 0.966-0.985,
below the 0.99 that holds elsewhere (forward FP8 alone, gradients
unquantized, already gives Llama's 0.986; 8x more tokens changes nothing).
The converted layers, which also keep the activations between GEMMs in FP8,
measure (CPU twins, 2026-12-07) error ratios 1.19-1.85 against the floor
(1 - cos), gradient cosines down to 0.959 (OLMo-1 with clip_qkv, q
projection; its floor 0.966). A miswired gradient is near 0.
"""

import copy
import inspect
import json
import os

import pytest

from conftest import FIXTURES, torch_or_skip

torch = torch_or_skip()
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 0):
    pytest.skip("transformers' models need torch >= 2", allow_module_level=True)

import coat  # noqa: E402
from coat import artifacts  # noqa: E402
from coat.hf import UnsupportedLayer, inspect_layer, spec_from_config  # noqa: E402
from coat.hf.layer import DecoderLayer as HFDecoderLayer  # noqa: E402
from coat.hf.layer import GPT2DecoderLayer, GPTNeoXDecoderLayer  # noqa: E402
from coat.hf.layer import layer_programs  # noqa: E402

with open(os.path.join(FIXTURES, "hf_tiny_configs.json")) as f:
    CONFIGS = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
FAMILIES = sorted(CONFIGS)
LOSS_TOL = 0.02
GRAD_COSINE = 0.99
#: A converted gradient's 1 - cosine at most this times its FP8 floor's,
#: plus FLOOR_SLACK (1.5x the emulation's relative error).
FLOOR_ERROR_RATIO, FLOOR_SLACK = 2.25, 1e-3
#: No gradient below this, whatever the floor.
GRAD_COSINE_MIN = 0.95


def device():
    if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0):
        return "cuda"
    return "cpu"


@pytest.fixture(autouse=True)
def kernels(request):
    """On the CPU the programs compile into a fresh cache (needs coat-opt)."""
    if device() == "cpu":
        request.getfixturevalue("cpu_cache")


def hf_config(family, attn="sdpa", **overrides):
    kw = dict(CONFIGS[family])
    model_type = kw.pop("model_type")
    kw.update(overrides)
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    cfg._attn_implementation = attn
    return cfg


def decoder_layers(model):
    """model.layers, gpt_neox.layers, transformer.h: the base model's
    (base_model_prefix)."""
    base = model.base_model
    return base.h if hasattr(base, "h") else base.layers


def programs_or_skip(spec):
    try:
        for c in layer_programs(spec):
            artifacts.program(c)
    except artifacts.ArtifactNotFound as e:
        pytest.skip(str(e))


def build(family, seed=0, programs=True, attn="sdpa", **overrides):
    """The tiny model of ``family`` (attention implementation ``attn``); with
    ``programs``, skips unless its layers' programs are compiled (or can
    be)."""
    torch.manual_seed(seed)
    cfg = hf_config(family, attn, **overrides)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(device())
    if programs:
        programs_or_skip(spec_from_config(cfg))
    return model


def tokens(model, batch=2, seq=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (batch, seq), generator=g).to(device())


def loss_and_grads(model, ids, **kw):
    model.zero_grad(set_to_none=True)
    with torch.autocast(device(), torch.bfloat16):
        loss = model(input_ids=ids, labels=ids, **kw).loss
    loss.backward()
    return loss.detach().float(), {n: p.grad.detach().float().clone()
                                   for n, p in model.named_parameters() if p.grad is not None}


def cosine(a, b):
    return torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()


def fp8_floor(model, ids, want, layers=None):
    """Each parameter's gradient cosine against ``want`` (``model``'s own)
    when the GEMMs of ``layers`` (default: every decoder layer) are FP8
    (fp8_emulation.py), on a copy."""
    from fp8_emulation import emulate_fp8_linears

    emulated = copy.deepcopy(model)
    chosen = decoder_layers(emulated)
    assert emulate_fp8_linears([chosen[i] for i in (layers or range(len(chosen)))])
    _, got = loss_and_grads(emulated, ids)
    return {n: cosine(g, want[n]) for n, g in got.items()}


def unconverted(model, ids, layers=None):
    """The unconverted model's loss and gradients, and their FP8 floor."""
    loss, grads = loss_and_grads(model, ids)
    return loss, grads, fp8_floor(model, ids, grads, layers)


def assert_matches(got_loss, got, want_loss, want, floor=None, tol=GRAD_COSINE):
    """The loss within LOSS_TOL; each gradient's cosine >= tol, or with a
    floor (fp8_floor) its 1 - cosine at most FLOOR_ERROR_RATIO times the
    floor's plus FLOOR_SLACK (and the cosine >= GRAD_COSINE_MIN); the
    median likewise."""
    assert abs(got_loss.item() - want_loss.item()) <= LOSS_TOL * abs(want_loss.item()), \
        (got_loss.item(), want_loss.item())
    assert got.keys() == want.keys()
    low = {n: cosine(g, want[n]) for n, g in got.items()}
    median = lambda xs: sorted(xs)[len(xs) // 2]
    floor = floor or {}
    allowed = lambda f: tol if f is None else max(
        GRAD_COSINE_MIN, 1 - FLOOR_ERROR_RATIO * (1 - f) - FLOOR_SLACK)
    bound = {n: allowed(floor.get(n)) for n in low}
    median_bound = allowed(median(floor.values()) if floor else None)
    short = {n: (round(low[n], 4), round(bound[n], 4)) for n in low if low[n] < bound[n]}
    assert not short, short
    assert median(low.values()) >= median_bound, (median(low.values()), median_bound)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family", FAMILIES)
def test_converted_model_matches_the_unconverted_one(family, attn):
    """Under either attention implementation: the eager one takes the
    causal mask as a tensor, which must reach the attention function through
    the layer's call (GPT2Model passes it by position)."""
    model = build(family, attn=attn)
    ids = tokens(model)
    want_loss, want, floor = unconverted(model, ids)
    coat.convert(model)
    assert len(model.coat_report.converted) == model.config.num_hidden_layers
    assert all(isinstance(layer, HFDecoderLayer) for layer in decoder_layers(model))
    got_loss, got = loss_and_grads(model, ids)
    assert_matches(got_loss, got, want_loss, want, floor)


#: One argument, the KV cache, under the names transformers' releases give it.
CACHE_NAMES = {"past_key_values", "past_key_value", "cache", "layer_past"}


@pytest.mark.parametrize("family", FAMILIES)
def test_the_converted_layer_takes_the_layers_call(family):
    """Each argument the installed transformers' decoder layer takes by
    position, the converted layer takes at the same position (a model may
    pass it so: GPT2Model passes the cache, the mask and the encoder states
    by position)."""
    model = build(family)
    before = type(decoder_layers(model)[0]).forward
    coat.convert(model)
    after = type(decoder_layers(model)[0]).forward

    def positional(fn):
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind == p.POSITIONAL_OR_KEYWORD][1:]  # not self
        return ["cache" if n in CACHE_NAMES else n for n in names]

    theirs, ours = positional(before), positional(after)
    assert ours[:len(theirs)] == theirs, (theirs, ours)


@pytest.mark.parametrize("family", FAMILIES)
def test_spec_from_config_is_what_the_layers_say(family):
    model = build(family)
    for i, layer in enumerate(decoder_layers(model)):
        assert inspect_layer(f"{model.base_model_prefix}.{i}", layer) == \
            spec_from_config(model.config)


def test_qwen2_biases_are_read_and_run_in_the_programs():
    model = build("qwen2")
    spec = inspect_layer("model.layers.0", model.model.layers[0])
    assert spec.qkv_bias and not spec.o_bias
    assert layer_programs(spec)[0].bias
    with torch.no_grad():  # biases that matter (transformers initialises them to zero)
        for layer in model.model.layers:
            for p in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                p.bias.normal_(std=0.5)
    ids = tokens(model)
    want_loss, want, floor = unconverted(model, ids)
    coat.convert(model)
    got_loss, got = loss_and_grads(model, ids)
    assert_matches(got_loss, got, want_loss, want, floor)
    assert "model.layers.0.self_attn.q_proj.bias" in got


@pytest.mark.parametrize("family", ["gpt_neox", "gpt_neox_sequential"])
def test_gpt_neox_layers_are_read_and_run_in_the_programs(family):
    """GPT-NeoX's LayerNorms, fused q/k/v, biases, partial rotary and
    residual wiring, with norms and biases that matter (transformers
    initialises them to 1 and 0)."""
    model = build(family)
    layer = decoder_layers(model)[0]
    spec = inspect_layer("gpt_neox.layers.0", layer)
    parallel = CONFIGS[family]["use_parallel_residual"]
    assert (spec.family, spec.norm, spec.mlp, spec.qkv_layout, spec.parallel_residual) == \
        ("GPT-NeoX", "layernorm", "gelu", "fused_per_head", parallel)
    assert spec.rotary_dim == int(64 * CONFIGS[family]["rotary_pct"]) == \
        layer.attention.rotary_ndims
    assert spec.attn_norm_eps == spec.mlp_norm_eps == CONFIGS[family]["layer_norm_eps"]
    names = [c.name for c in layer_programs(spec)]
    assert names == ["coat_norm_linear_ln_h512_o1536_b", "coat_linear_residual_i512_h512_b",
                     "coat_gelu_mlp_ln_h512_f2048_b" + ("_separate_residual" if parallel else "")]
    with torch.no_grad():
        for layer in decoder_layers(model):
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.weight.normal_(1.0, 0.2)
                norm.bias.normal_(0.0, 0.2)
            for lin in (layer.attention.query_key_value, layer.attention.dense,
                        layer.mlp.dense_h_to_4h, layer.mlp.dense_4h_to_h):
                lin.bias.normal_(std=0.2)
    ids = tokens(model)
    want_loss, want, floor = unconverted(model, ids)
    coat.convert(model)
    assert all(isinstance(layer, GPTNeoXDecoderLayer) for layer in decoder_layers(model))
    # The LM head's name follows the installed transformers (embed_out in
    # 4.x, lm_head in 5.x).
    head = next(n for n, m in model.named_modules() if m is model.get_output_embeddings())
    assert set(model.coat_report.kept) == {"gpt_neox.final_layer_norm", head}
    got_loss, got = loss_and_grads(model, ids)
    assert_matches(got_loss, got, want_loss, want, floor)
    assert "gpt_neox.layers.0.attention.query_key_value.bias" in got


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("options", [dict(scale_attn_by_inverse_layer_idx=True),
                                     dict(scale_attn_weights=False)])
def test_gpt2_attention_scale_options(options, attn):
    """GPT-2's other attention scales (1/sqrt(head_dim) off; divided by
    layer_idx + 1) reach the attention function as transformers' GPT-2
    computes them."""
    model = build("gpt2", attn=attn, **options)
    _gpt2_weights_that_matter(model)
    ids = tokens(model)
    want_loss, want, floor = unconverted(model, ids)
    coat.convert(model)
    got_loss, got = loss_and_grads(model, ids)
    assert_matches(got_loss, got, want_loss, want, floor)


def _gpt2_weights_that_matter(model):
    """LayerNorms and Conv1D biases away from transformers' 1 and 0."""
    with torch.no_grad():
        for block in decoder_layers(model):
            for norm in (block.ln_1, block.ln_2):
                norm.weight.normal_(1.0, 0.2)
                norm.bias.normal_(0.0, 0.2)
            for conv in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc,
                         block.mlp.c_proj):
                conv.bias.normal_(std=0.2)


def test_gpt2_blocks_are_read_and_run_in_the_programs():
    """GPT-2's LayerNorms, Conv1D projections (transposed into the
    programs; gradients in their [in, out] shape), biases and gelu_new (the
    tanh form, in the MLP program), with norms and biases that matter."""
    model = build("gpt2")
    block = decoder_layers(model)[0]
    spec = inspect_layer("transformer.h.0", block)
    assert (spec.family, spec.norm, spec.mlp, spec.gelu_approximate, spec.positions,
            spec.qkv_layout, spec.parallel_residual) == \
        ("GPT-2", "layernorm", "gelu", "tanh", "absolute", "separate", False)
    assert spec.attn_norm_eps == spec.mlp_norm_eps == CONFIGS["gpt2"]["layer_norm_epsilon"]
    assert [c.name for c in layer_programs(spec)] == [
        "coat_norm_linear_ln_h512_o1536_b", "coat_linear_residual_i512_h512_b",
        "coat_gelu_mlp_ln_h512_f2048_b_tanh"]
    _gpt2_weights_that_matter(model)
    ids = tokens(model)
    want_loss, want, floor = unconverted(model, ids)
    coat.convert(model)
    assert all(isinstance(b, GPT2DecoderLayer) for b in decoder_layers(model))
    assert set(model.coat_report.kept) == {"transformer.ln_f", "lm_head"}
    got_loss, got = loss_and_grads(model, ids)
    assert_matches(got_loss, got, want_loss, want, floor)
    c_attn = decoder_layers(model)[0].attn.c_attn
    assert got["transformer.h.0.attn.c_attn.weight"].shape == c_attn.weight.shape == (512, 1536)
    assert "transformer.h.0.attn.c_attn.bias" in got


@pytest.mark.parametrize("family", ["olmo", "olmo_clip"])
def test_olmo_layers_are_read_and_run_in_the_programs(family):
    """OLMo-1's LayerNorms without parameters (eps 1e-5, fixed in
    OlmoLayerNorm) run in the programs; clip_qkv clamps q, k and v in the
    attention core, which then rotates them too. The final norm has no
    parameters: only the LM head is reported kept."""
    model = build(family)
    layer = decoder_layers(model)[0]
    assert type(layer.input_layernorm).__name__ == "OlmoLayerNorm"
    assert not list(layer.input_layernorm.parameters())
    spec = inspect_layer("model.layers.0", layer)
    clip = CONFIGS[family]["clip_qkv"]
    assert (spec.family, spec.norm, spec.norm_affine, spec.clip_qkv) == \
        ("OLMo", "layernorm", False, clip)
    assert spec.attn_norm_eps == spec.mlp_norm_eps == 1e-5
    names = [c.name for c in layer_programs(spec)]
    assert names == ["coat_norm_linear_ln_noaffine_h512_o1536" + ("" if clip else "_rope16x64"),
                     "coat_linear_residual_i512_h512", "coat_mlp_ln_noaffine_h512_f1408"]
    ids = tokens(model)
    want_loss, want, floor = unconverted(model, ids)
    coat.convert(model)
    assert all(isinstance(layer, HFDecoderLayer) for layer in decoder_layers(model))
    assert decoder_layers(model)[0].rope_in_program == (clip is None)
    assert set(model.coat_report.kept) == {"lm_head"}
    got_loss, got = loss_and_grads(model, ids)
    assert_matches(got_loss, got, want_loss, want, floor)


def test_every_hyperparameter_is_read_from_the_model():
    """A layer with eps 1e-6 runs programs compiled for 1e-6 (another
    content key than 1e-5's), and head_dim comes from the config even where
    it is not hidden / heads."""
    model = build("qwen3", rms_norm_eps=1e-6)
    spec = inspect_layer("model.layers.0", model.model.layers[0])
    assert spec.attn_norm_eps == spec.mlp_norm_eps == 1e-6
    assert spec.qk_norm == "head" and spec.head_dim == 64
    other = build("qwen3", programs=False, rms_norm_eps=1e-5)  # only its program text
    a, b = (layer_programs(inspect_layer("l", m.model.layers[0]))[0]
            for m in (model, other))
    assert a.eps != b.eps and a.text() != b.text()


@pytest.mark.parametrize("family", ["llama", "olmo2", "gpt_neox", "olmo", "gpt2"])
def test_state_dict_and_save_pretrained_round_trip(family, tmp_path):
    model = build(family)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    coat.convert(model)
    after = model.state_dict()
    assert list(after) == list(before)
    for k, v in before.items():
        assert after[k].dtype == v.dtype and torch.equal(after[k], v), k
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).to(device())
    for k, v in loaded.state_dict().items():
        assert torch.equal(v, before[k]), k
    # and a converted model loads a state_dict in place
    model.load_state_dict(before)


def test_filter_fn_keeps_chosen_layers_and_reports_them():
    model = build("llama")
    ids = tokens(model)
    want_loss, want, floor = unconverted(model, ids, layers=[0])
    kept_cls = type(model.model.layers[1])
    coat.convert(model, filter_fn=lambda fqn, mod: not fqn.endswith("layers.1"))
    report = model.coat_report
    assert list(report.converted) == ["model.layers.0"]
    assert report.kept["model.layers.1"] == "filter_fn"
    assert "lm_head" in report.kept and "Llama layer, 3 programs" in str(report)
    assert isinstance(model.model.layers[0], HFDecoderLayer)
    assert type(model.model.layers[1]) is kept_cls
    got_loss, got = loss_and_grads(model, ids)
    assert_matches(got_loss, got, want_loss, want, floor)


def test_unsupported_families_and_features_are_named():
    biased_mlp = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, mlp_bias=True))
    with pytest.raises(ValueError, match=r"model.layers.0.mlp.gate_proj has a bias"):
        coat.convert(copy.deepcopy(biased_mlp))
    coat.convert(biased_mlp, filter_fn=lambda fqn, mod: False)  # kept by choice
    assert biased_mlp.coat_report.kept["model.layers.0"] == "filter_fn"
    with pytest.raises(UnsupportedLayer, match="mlp_bias"):
        spec_from_config(biased_mlp.config)

    for kw, match in ((dict(hidden_act="gelu_fast"),
                       r"gpt_neox.layers.0.mlp: activation 'gelu_fast'; the GELU MLP program "
                       r"computes exact GELU \('gelu'\) or its tanh form"),
                      (dict(hidden_dropout=0.1),
                       r"gpt_neox.layers.0.post_attention_dropout: dropout 0.1"),
                      (dict(attention_dropout=0.1),
                       r"gpt_neox.layers.0.attention.attention_dropout: dropout 0.1")):
        neox = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
            vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
            num_attention_heads=4, **kw))
        with pytest.raises(ValueError, match=match):
            coat.convert(neox)
        with pytest.raises(UnsupportedLayer, match=r"GPT-NeoX config: "):
            spec_from_config(neox.config)

    gelu_olmo = transformers.OlmoForCausalLM(transformers.OlmoConfig(
        vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
        num_attention_heads=4, hidden_act="gelu", pad_token_id=1, eos_token_id=2))
    with pytest.raises(ValueError, match=r"model.layers.0.mlp: activation 'gelu'"):
        coat.convert(gelu_olmo)
    with pytest.raises(UnsupportedLayer, match="OLMo config: activation 'gelu'"):
        spec_from_config(gelu_olmo.config)

    mixtral = transformers.MixtralForCausalLM(transformers.MixtralConfig(
        vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=2))
    with pytest.raises(ValueError, match=r"model.layers.0 .*mixture-of-experts"):
        coat.convert(mixtral)

    with pytest.raises(UnsupportedLayer, match="model_type 'bloom'"):
        spec_from_config({"model_type": "bloom"})

    for kw, match in ((dict(reorder_and_upcast_attn=True),
                       r"transformer.h.0.attn: reorder_and_upcast_attn"),
                      (dict(add_cross_attention=True),
                       r"transformer.h.0 \(GPT2Block\) has a cross-attention"),
                      (dict(resid_pdrop=0.1),
                       r"transformer.h.0.attn.resid_dropout: dropout 0.1"),
                      (dict(activation_function="gelu_fast"),
                       r"transformer.h.0.mlp: activation 'gelu_fast'")):
        gpt2 = transformers.GPT2LMHeadModel(hf_config("gpt2", **kw))
        with pytest.raises(ValueError, match=match):
            coat.convert(gpt2)
        with pytest.raises(UnsupportedLayer, match=r"GPT-2 config: "):
            spec_from_config(gpt2.config)


@pytest.mark.parametrize("family", ["llama", "gpt_neox", "gpt2"])
def test_fused_loss_matches_the_unfused_one(family):
    """coat.convert fuses the LM head with the loss for training calls
    (coat.hf.loss): no logits in that output, the loss of the same
    converted model's unfused loss (the same bf16 logits) and its gradients
    within the FP8 tolerance (the logits' gradient is rounded to bf16 before
    its 1/n scale instead of after, and so the layers' E5M2 gradients round
    differently: measured on an H100, 2026-12-06, cosines down to 0.990),
    and evaluation calls still return logits."""
    model = build(family)
    ids = tokens(model)
    unfused = copy.deepcopy(model)
    coat.convert(unfused, fused_loss=False)
    assert unfused.coat_report.loss.startswith("unfused (fused_loss=False)")
    want_loss, want = loss_and_grads(unfused, ids)
    coat.convert(model)
    assert model.coat_report.loss.startswith("fused"), model.coat_report.loss
    assert type(model).__name__ == type(unfused).__name__
    got_loss, got = loss_and_grads(model, ids)
    assert abs(got_loss.item() - want_loss.item()) <= 1e-3 * abs(want_loss.item())
    assert_matches(got_loss, got, want_loss, want, tol=0.98)
    with torch.autocast(device(), torch.bfloat16):
        assert model(input_ids=ids, labels=ids).logits is None
        with torch.no_grad():
            out = model(input_ids=ids, labels=ids)
    assert out.logits.shape == (*ids.shape, model.config.vocab_size)
    assert abs(out.loss.item() - got_loss.item()) <= 1e-3 * abs(got_loss.item())


@pytest.mark.parametrize("family", ["llama", "gpt_neox", "olmo", "gpt2"])
def test_gradient_checkpointing_gives_the_same_gradients(family):
    model = build(family)
    ids = tokens(model)
    coat.convert(model)
    want_loss, want = loss_and_grads(model, ids)
    model.gradient_checkpointing_enable()
    model.train()
    got_loss, got = loss_and_grads(model, ids)
    assert_matches(got_loss, got, want_loss, want, tol=0.999)


@pytest.mark.parametrize("family", ["llama", "gpt_neox", "gpt_neox_sequential", "olmo",
                                    "olmo_clip", "gpt2"])
def test_kv_cache_generation_runs_converted(family):
    """A converted layer keeps the model's attention path, KV cache
    included: greedy decoding runs and its first logits match the
    unconverted model's."""
    model = build(family).eval()
    ids = tokens(model, batch=1, seq=16)
    with torch.no_grad(), torch.autocast(device(), torch.bfloat16):
        want = model(input_ids=ids).logits[:, -1].float()
        coat.convert(model)
        got = model(input_ids=ids).logits[:, -1].float()
        # (min_new_tokens: a random model may emit its end token at once.)
        out = model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert cosine(got, want) >= 0.99
    assert out.shape == (1, 20)


def test_trainer_trains_a_converted_model_with_fp8adamw(tmp_path):
    pytest.importorskip("accelerate", reason="the Trainer needs accelerate")
    if device() != "cuda":
        pytest.skip("FP8AdamW's GPU kernel")
    model = build("llama")
    coat.convert(model)
    ids = tokens(model, batch=8, seq=64, seed=3)

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            row = ids[i % ids.shape[0]].cpu()
            return {"input_ids": row, "labels": row}

    opt = coat.optim.FP8AdamW(model.parameters(), lr=3e-3)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8,
                                          max_steps=12, logging_steps=1, bf16=True,
                                          report_to=[], save_strategy="no")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Data(),
                                   optimizers=(opt, None))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 12 and losses[-1] < losses[0] - 0.1, losses
