"""coat.convert: a model's decoder layers, replaced in place by layers whose
norms and projections run as compiled programs.

Two kinds of layer are recognised: Hugging Face decoder layers of the
families :mod:`coat.hf.families` knows, and Llama-layout layers of plain
PyTorch models such as :mod:`coat.llama`'s (``self_attn.{q,k,v,o}_proj``,
``mlp.{gate,up,down}_proj``, ``input_layernorm``,
``post_attention_layernorm``, the attention's head counts as attributes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

import torch

from .decoder import DecoderLayer, _Projections
from .modules import _ProgramModule

#: Modules :func:`convert` leaves in high precision unless told otherwise:
#: the embedding, the final norm and the LM head (as in COAT), under Llama's
#: names, GPT-NeoX's and GPT-2's (ln_f; its embeddings wte and wpe are not
#: Linear layers).
KEEP_HIGH_PRECISION = ("embed_tokens", "norm", "lm_head", "embed_in", "final_layer_norm",
                       "embed_out", "ln_f")

FilterFn = Callable[[str, torch.nn.Module], bool]


@dataclass
class ConversionReport:
    """What :func:`convert` did: each converted layer (by name) with what it
    runs, and each layer or module left in high precision with the reason."""

    converted: Dict[str, str] = field(default_factory=dict)
    kept: Dict[str, str] = field(default_factory=dict)
    #: For a model that takes a loss function (``coat_loss``): whether its
    #: LM head and loss run fused (coat.nn.linear_cross_entropy) and why
    #: not; "" for other models.
    loss: str = ""
    #: Whether the converted layers keep their backward GEMMs' FP8 operands
    #: from the forward or derive them again (``keep_gemm_operands``).
    gemm_operands: str = ""

    def __str__(self) -> str:
        lines = [f"converted {len(self.converted)} layer(s), kept {len(self.kept)} in high "
                 "precision"]
        lines += [f"  {name}: {what}" for name, what in self.converted.items()]
        lines += [f"  {name}: kept ({why})" for name, why in self.kept.items()]
        if self.gemm_operands:
            lines.append(f"  backward GEMM operands: {self.gemm_operands}")
        if self.loss:
            lines.append(f"  loss: {self.loss}")
        return "\n".join(lines)


class FusedLoss:
    """A model's ``coat_loss``: coat.nn.linear_cross_entropy with the
    program folder the conversion found it in."""

    def __init__(self, vocab: int, ignore_index: int = -100, kernels=None):
        self.vocab, self.ignore_index, self.kernels = vocab, ignore_index, kernels

    def __call__(self, hidden, weight, targets):
        from .cross_entropy import linear_cross_entropy

        return linear_cross_entropy(hidden, weight, targets, self.ignore_index,
                                    kernels=self.kernels)

    def __repr__(self) -> str:
        return f"FusedLoss(vocab={self.vocab}, ignore_index={self.ignore_index})"


def _fuse_loss(model: torch.nn.Module, kernels, fused_loss: bool) -> str:
    """Fuses the LM head with the loss where the model takes it and its
    program is there: a model with a ``coat_loss`` attribute (coat.llama's)
    gets the fused loss there; a Hugging Face causal LM gets a forward that
    takes its training loss from the hidden states (coat.hf.loss). Returns
    the report's line ("" for a model with no LM head loss)."""
    import warnings

    from .. import artifacts, programs
    from ..manifest import ManifestError, ProgramError

    hf_lm = _is_hf(model) and hasattr(model, "get_output_embeddings") and \
        model.get_output_embeddings() is not None
    if not hasattr(model, "coat_loss") and not hf_lm:
        return ""
    head = model.get_output_embeddings() if hf_lm else getattr(model, "lm_head", None)
    if not fused_loss:
        return "unfused (fused_loss=False): the LM head, then the cross-entropy of fp32 logits"
    if hf_lm:
        from ..hf import loss as hf_loss

        why_not = hf_loss.why_not(model)
        if why_not is not None:
            return f"unfused: {why_not}"
    elif not isinstance(head, torch.nn.Linear) or head.bias is not None:
        return "unfused: lm_head is not a bias-free Linear"
    cfg = programs.CrossEntropyConfig(head.weight.shape[0])
    try:
        artifacts.program(cfg, kernels)
    except (artifacts.ArtifactNotFound, ManifestError, ProgramError, OSError,
            RuntimeError) as e:
        why = (f"unfused: no compiled {cfg.name} ({str(e).splitlines()[0]}); the loss "
               "materialises the fp32 logits")
        warnings.warn(f"coat.convert: {why}", stacklevel=3)
        return why
    if hf_lm:
        hf_loss.fuse(model, kernels)
        return (f"fused with the LM head when called with labels in training, chunked "
                f"(coat.nn.linear_cross_entropy, {cfg.name}; such outputs have no logits)")
    model.coat_loss = FusedLoss(cfg.vocab, cfg.ignore_index, kernels)
    return f"fused with lm_head, chunked (coat.nn.linear_cross_entropy, {cfg.name})"


def _is_hf(module: torch.nn.Module) -> bool:
    return type(module).__module__.startswith("transformers.")


def _is_layer_candidate(module: torch.nn.Module) -> bool:
    """A decoder layer (converted, or refused with a reason): a module with
    an attention and an MLP (or a mixture of experts) as children."""
    if isinstance(module, _ProgramModule):
        return False
    names = set(dict(module.named_children()))
    has_attn = bool(names & {"self_attn", "attention", "attn"})
    has_ffn = bool(names & {"mlp", "block_sparse_moe", "feed_forward"})
    return has_attn and has_ffn


def _llama_layer(qual: str, mod: torch.nn.Module, kernels,
                 keep_gemm_operands: bool = False) -> DecoderLayer:
    """A plain-PyTorch Llama-layout layer as a coat.nn.DecoderLayer around
    the same Parameters."""
    for part in ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm"):
        if not hasattr(mod, part):
            raise ValueError(f"coat.convert: {qual} ({type(mod).__name__}) has no {part}: "
                             "not a Llama decoder layer")
    at, mlp = mod.self_attn, mod.mlp

    def weight(owner, path):
        sub = getattr(owner, path.rpartition(".")[2], None)
        w = getattr(sub, "weight", None)
        where = f"{qual}.{path}" if qual else path
        if not isinstance(w, torch.nn.Parameter):
            raise ValueError(f"coat.convert: {where} has no weight Parameter")
        if getattr(sub, "bias", None) is not None:
            raise ValueError(f"coat.convert: {where} has a bias; the compiled layer "
                             "takes bias-free projections and norms")
        return w

    weights = {a: weight(at, f"self_attn.{a}") for a in ("q_proj", "k_proj", "v_proj",
                                                          "o_proj")}
    weights.update({a: weight(mlp, f"mlp.{a}") for a in ("gate_proj", "up_proj",
                                                          "down_proj")})
    weights["input_layernorm"] = weight(mod, "input_layernorm")
    weights["post_attention_layernorm"] = weight(mod, "post_attention_layernorm")
    heads = getattr(at, "heads", None) or getattr(at, "num_heads", None)
    kv_heads = (getattr(at, "kv_heads", None) or getattr(at, "num_key_value_heads", None)
                or heads)
    if heads is None:
        raise ValueError(f"coat.convert: {qual}.self_attn does not say its head count "
                         "(heads or num_heads)")
    eps = {}
    for norm in ("input_layernorm", "post_attention_layernorm"):
        n = getattr(mod, norm)
        e = getattr(n, "variance_epsilon", None) or getattr(n, "eps", None)
        if e is None:
            raise ValueError(f"coat.convert: {qual}.{norm} does not say its eps")
        eps[norm] = float(e)
    if eps["input_layernorm"] != eps["post_attention_layernorm"]:
        raise ValueError(f"coat.convert: {qual}: the two norms have different eps "
                         f"({eps['input_layernorm']}, {eps['post_attention_layernorm']})")
    hidden = weights["q_proj"].shape[1]
    try:
        return DecoderLayer(hidden, weights["gate_proj"].shape[0], heads, kv_heads,
                            eps["input_layernorm"], weights=weights, kernels=kernels,
                            keep_gemm_operands=keep_gemm_operands)
    except ValueError as e:
        raise ValueError(f"coat.convert: {qual}: {e}") from None


def _hf_layer(qual: str, mod: torch.nn.Module, kernels, keep_gemm_operands: bool = False):
    from ..hf.families import UnsupportedLayer, inspect_layer
    from ..hf.layer import converted_layer

    try:
        spec = inspect_layer(qual, mod)
        return converted_layer(mod, spec, qual=qual, kernels=kernels,
                               keep_gemm_operands=keep_gemm_operands)
    except UnsupportedLayer as e:
        raise ValueError(f"coat.convert: {e}") from None
    except ValueError as e:
        raise ValueError(f"coat.convert: {qual}: {e}") from None


def _describe(new: torch.nn.Module) -> str:
    spec = getattr(new, "spec", None)
    family = spec.family if spec is not None else "Llama"
    names = ", ".join(c.name for c in new.configs)
    return f"{family} layer, {len(new.configs)} programs ({names})"


def convert(model: torch.nn.Module, *, filter_fn: Optional[FilterFn] = None,
            keep=KEEP_HIGH_PRECISION, kernels=None,
            fused_loss: bool = True, keep_gemm_operands: bool = False) -> torch.nn.Module:
    """Replaces every decoder layer of ``model`` in place by one whose norms
    and projections run as compiled COAT programs, keeping parameter names,
    the state_dict and an optimizer built afterwards unchanged.

    ``filter_fn(fqn, module)`` returning False leaves that decoder layer (or
    a Linear or norm outside every layer) in high precision by choice.
    Modules whose last name is in ``keep`` (the embedding, the final norm,
    the LM head) stay in high precision too. A decoder layer the programs
    cannot express, or any other Linear or norm not kept by one of those,
    raises ValueError naming it: nothing silently stays in high precision
    or runs with the wrong hyperparameters.

    A model that takes a loss function (a ``coat_loss`` attribute, as
    :mod:`coat.llama`'s) gets the LM head fused with its cross-entropy
    (:func:`coat.nn.linear_cross_entropy`) where the ``coat.cross_entropy``
    program of its vocabulary is compiled (or can be, with coat-opt), unless
    ``fused_loss`` is False; where it is not, it keeps the unfused loss with
    a warning. A Hugging Face causal LM gets the same for its training calls
    (with ``labels`` and gradients on; :mod:`coat.hf.loss`), whose outputs
    then carry the loss and no logits. The report's ``loss`` line says
    which.

    ``keep_gemm_operands``: the converted layers' programs keep the
    per-tensor FP8 operands of their backward GEMMs (the norm outputs' and
    the MLP activation's transposed copies) from the forward instead of
    deriving them again in the backward: about one byte per element of
    those operands more between the forward and the backward, for fewer
    kernels in the backward (:class:`coat.programs.MLPBlockConfig`'s). The
    default, False, keeps the least. The report's ``gemm_operands`` line
    says which.

    Returns ``model``; ``model.coat_report`` is the ConversionReport."""
    report = ConversionReport()
    chosen_out = []
    for qual, mod in list(model.named_modules()):
        done = chosen_out + list(report.converted)
        if any(qual.startswith(c + ".") for c in done) or not _is_layer_candidate(mod):
            continue
        if filter_fn is not None and not filter_fn(qual, mod):
            report.kept[qual] = "filter_fn"
            chosen_out.append(qual)
            continue
        make = _hf_layer if _is_hf(mod) else _llama_layer
        new = make(qual, mod, kernels, keep_gemm_operands=bool(keep_gemm_operands))
        new._coat_name = qual
        parent_name, _, child = qual.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
        report.converted[qual] = _describe(new)
    if not report.converted and not report.kept:
        raise ValueError("coat.convert: no decoder layer found (a module with self_attn and "
                         "mlp)")
    converted = list(report.converted)
    for qual, mod in model.named_modules():
        if isinstance(mod, _Projections) or any(
                qual == c or qual.startswith(c + ".") for c in converted + chosen_out):
            continue
        last = qual.rpartition(".")[2]
        is_norm = (hasattr(mod, "eps") or hasattr(mod, "variance_epsilon")) and \
            isinstance(getattr(mod, "weight", None), torch.nn.Parameter)
        if not (isinstance(mod, torch.nn.Linear) or is_norm):
            continue
        if last in keep:
            report.kept[qual] = f"keep={tuple(keep)}"
        elif filter_fn is not None and not filter_fn(qual, mod):
            report.kept[qual] = "filter_fn"
        else:
            raise ValueError(f"coat.convert: {qual} ({type(mod).__name__}) is outside every "
                             f"decoder layer and not in keep={tuple(keep)}; add it to keep "
                             "(or return False for it from filter_fn) to leave it in high "
                             "precision")
    if report.converted:
        report.gemm_operands = (
            "kept from the forward (keep_gemm_operands=True: more memory, fewer backward "
            "kernels)" if keep_gemm_operands else
            "derived again in the backward (keep_gemm_operands=False: least memory)")
    report.loss = _fuse_loss(model, kernels, fused_loss)
    model.coat_report = report
    return model
