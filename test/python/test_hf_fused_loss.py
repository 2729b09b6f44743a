"""coat.hf.loss: a converted Hugging Face causal LM's LM head and loss fused
(coat.nn.linear_cross_entropy), on the CPU twins with a stand-in for a
``*ForCausalLM`` (its forward's shape: base model, LM head, Hugging Face's
label shift and loss); test_hf.py runs transformers' own models on the GPU
host. The loss is checked against Hugging Face's documented semantics
written out here: each position predicts the next label, the last position
nothing, labels equal to ignore_index do not count, the mean over the rest
or their sum over num_items_in_batch."""

import copy
import inspect
import sys
import types
from dataclasses import dataclass
from typing import Optional

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()
F = torch.nn.functional

from coat.hf import loss as hf_loss  # noqa: E402

VOCAB, HIDDEN = 96, 32


@dataclass
class _Output:
    loss: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None
    past_key_values: object = None
    hidden_states: object = None
    attentions: object = None

    def __getitem__(self, i):
        return [v for v in (self.loss, self.logits) if v is not None][i]


@pytest.fixture(autouse=True)
def modeling_outputs(monkeypatch):
    """transformers' output class where transformers is not installed."""
    try:
        import transformers.modeling_outputs  # noqa: F401
    except ImportError:
        fake = types.ModuleType("transformers")
        outputs = types.ModuleType("transformers.modeling_outputs")
        outputs.CausalLMOutputWithPast = _Output
        fake.modeling_outputs = outputs
        monkeypatch.setitem(sys.modules, "transformers", fake)
        monkeypatch.setitem(sys.modules, "transformers.modeling_outputs", outputs)


def hf_semantics(logits, labels, ignore_index=-100, num_items_in_batch=None):
    labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    reduction = "sum" if num_items_in_batch is not None else "mean"
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=ignore_index, reduction=reduction)
    return loss if num_items_in_batch is None else loss / num_items_in_batch


class _Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(VOCAB, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN)

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        assert not set(kwargs) & {"labels", "logits_to_keep", "num_items_in_batch"}, kwargs
        return (self.norm(self.embed_tokens(input_ids)),)


class TinyForCausalLM(torch.nn.Module):
    """A stand-in with a Hugging Face causal LM's forward."""

    base_model_prefix = "model"
    config = types.SimpleNamespace(vocab_size=VOCAB)

    def __init__(self, bias=False):
        super().__init__()
        torch.manual_seed(0)
        self.model = _Base()
        self.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=bias)

    @property
    def base_model(self):
        return self.model

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, labels=None, logits_to_keep=0,
                **kwargs):
        """The stand-in's documented forward."""
        hidden = self.model(input_ids, attention_mask)[0]
        keep = slice(-logits_to_keep, None) if logits_to_keep else slice(None)
        # bf16 GEMM, as under autocast (and in the fused loss)
        logits = F.linear(hidden[:, keep].bfloat16(), self.lm_head.weight.bfloat16())
        loss = None if labels is None else hf_semantics(logits, labels, **kwargs)
        return _Output(loss=loss, logits=logits)


def batch(seed=1, batch=3, seq=11):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch, seq), generator=g)
    labels = ids.clone()
    labels[0, :4] = -100
    return ids, labels


def loss_and_grads(model, ids, labels, **kw):
    model.zero_grad(set_to_none=True)
    out = model(ids, labels=labels, **kw)
    out.loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("num_items", [None, 17])
def test_fused_model_matches_its_own_loss_and_gradients(cpu_cache, num_items):
    ids, labels = batch()
    model = TinyForCausalLM()
    kw = {} if num_items is None else {"num_items_in_batch": torch.tensor(num_items)}
    want, want_g = loss_and_grads(model, ids, labels, **kw)
    hf_loss.fuse(model)
    got, got_g = loss_and_grads(model, ids, labels, **kw)
    assert got.logits is None
    # The same bf16 logits; the loss in f32 from them.
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-5, atol=1e-6)
    # The logits' gradient is rounded to bf16 before the 1/n scale here and
    # after it there, and the LM head's gradient summed over chunks in f32.
    for n in want_g:
        cos = F.cosine_similarity(got_g[n].flatten(), want_g[n].flatten(), dim=0)
        assert cos > 0.9999, (n, cos)
        torch.testing.assert_close(got_g[n], want_g[n], rtol=2e-2, atol=2e-4, msg=n)


def test_fused_model_keeps_its_class_name_signature_and_state(cpu_cache):
    model = TinyForCausalLM()
    sig = inspect.signature(model.forward)
    keys = model.state_dict().keys()
    hf_loss.fuse(model)
    assert type(model).__name__ == "TinyForCausalLM" and isinstance(model, TinyForCausalLM)
    assert type(model).__module__ == TinyForCausalLM.__module__
    assert inspect.signature(model.forward) == sig
    assert model.state_dict().keys() == keys
    twin = copy.deepcopy(model)
    assert type(twin) is type(model)
    hf_loss.fuse(model)  # again: the same class
    assert type(model) is type(twin)


def test_without_labels_gradients_or_with_logits_to_keep_the_model_runs_unfused(cpu_cache):
    ids, labels = batch()
    model = TinyForCausalLM()
    hf_loss.fuse(model)
    assert model(ids).logits.shape == (3, 11, VOCAB)
    with torch.no_grad():
        out = model(ids, labels=labels)
    assert out.logits.shape == (3, 11, VOCAB) and out.loss is not None
    out = model(ids, labels=labels[:, -1:], logits_to_keep=1)
    assert out.logits.shape == (3, 1, VOCAB)


def test_a_micro_batch_of_ignored_labels_adds_zero(cpu_cache):
    ids, labels = batch()
    labels[:] = -100
    model = TinyForCausalLM()
    hf_loss.fuse(model)
    out, grads = loss_and_grads(model, ids, labels, num_items_in_batch=torch.tensor(5))
    assert out.loss.item() == 0.0
    assert all(torch.isfinite(g).all() and not g.any() for g in grads.values())


def test_shift_labels_are_taken_as_given(cpu_cache):
    ids, labels = batch()
    hidden = torch.randn(3, 11, HIDDEN)
    w = torch.randn(VOCAB, HIDDEN) * 0.1
    shifted = F.pad(labels, (0, 1), value=-100)[..., 1:]
    a = hf_loss.causal_lm_loss(hidden, w, labels)
    b = hf_loss.causal_lm_loss(hidden, w, torch.zeros_like(labels), shift_labels=shifted)
    assert torch.equal(a, b)


def test_why_not_names_what_stops_the_fusion():
    assert hf_loss.why_not(TinyForCausalLM()) is None
    assert "bias-free" in hf_loss.why_not(TinyForCausalLM(bias=True))
    capped = TinyForCausalLM()
    capped.config = types.SimpleNamespace(final_logit_softcapping=30.0)
    assert "final_logit_softcapping" in hf_loss.why_not(capped)

    class NoLabels(TinyForCausalLM):
        def forward(self, input_ids=None):
            return None

    assert "labels" in hf_loss.why_not(NoLabels())
