"""The LM head and loss of a converted Hugging Face causal LM, fused.

A ``*ForCausalLM`` computes ``lm_head(hidden)`` for every token, then its
loss from the fp32 copy of those logits: at 8192 tokens and Llama-3's
128256-entry vocabulary that is 2 GiB of bf16 logits, 4 GiB in fp32 and as
much again for their gradient. :func:`fuse` gives a converted model a
forward that, when called with ``labels`` while gradients are on (a training
step), runs the base model and takes the loss straight from the final hidden
states with :func:`coat.nn.linear_cross_entropy`, chunk by chunk, with the
model's own label shift, ``ignore_index`` and ``num_items_in_batch`` (the
Trainer's gradient-accumulation normalisation). That output's ``logits`` are
None. Without labels, without gradients (evaluation, generation) or with
``logits_to_keep`` or ``return_dict=False``, the model's own forward runs.

The model's class becomes a subclass of the same name and module whose only
change is ``forward``, so ``save_pretrained`` records the same architecture
and ``isinstance`` still holds; the original forward's signature is the one
``inspect.signature`` sees (the Trainer reads it). Pickling the whole model
object needs the class by name: save its state_dict instead.
"""

from __future__ import annotations

import functools
import inspect
from typing import Dict, Optional

import torch

#: Keyword arguments of a causal LM's forward that only its loss reads.
_LOSS_KWARGS = ("num_items_in_batch", "shift_labels", "ignore_index")
#: Config fields of heads whose logits are more than a bias-free Linear's.
_HEAD_EXTRAS = ("final_logit_softcapping", "logit_scale", "logits_scaling",
                "output_multiplier_scale")

_fused_classes: Dict[type, type] = {}


def why_not(model: torch.nn.Module) -> Optional[str]:
    """Why ``model``'s LM head and loss cannot be fused, or None."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear) or head.bias is not None:
        return "its LM head is not a bias-free Linear"
    base = getattr(model, "base_model", model)
    if base is model:
        return "it has no base model to take the hidden states from"
    try:
        params = inspect.signature(type(model).forward).parameters
    except (TypeError, ValueError):
        return "its forward's signature cannot be read"
    if "labels" not in params:
        return "its forward takes no labels"
    cfg = getattr(model, "config", None)
    for extra in _HEAD_EXTRAS:
        if getattr(cfg, extra, None) not in (None, 1, 1.0):
            return f"its logits are scaled or capped ({extra}={getattr(cfg, extra)})"
    return None


def fuse(model: torch.nn.Module, kernels=None) -> None:
    """Gives ``model`` (a converted Hugging Face causal LM for which
    :func:`why_not` is None) the fused forward (module docstring)."""
    cls = type(model)
    if getattr(cls, "_coat_fused_loss", False):
        model._coat_loss_kernels = kernels
        return
    fused = _fused_classes.get(cls)
    if fused is None:
        unfused = cls.forward
        signature = inspect.signature(unfused)

        @functools.wraps(unfused)
        def forward(self, *args, **kwargs):
            return _forward(self, unfused, signature, args, kwargs)

        fused = type(cls.__name__, (cls,), {
            "forward": forward, "__module__": cls.__module__,
            "__qualname__": cls.__qualname__, "_coat_fused_loss": True,
            "__doc__": cls.__doc__})
        _fused_classes[cls] = fused
    model.__class__ = fused
    model._coat_loss_kernels = kernels


def _forward(model, unfused, signature: inspect.Signature, args, kwargs):
    arguments = dict(signature.bind(model, *args, **kwargs).arguments)
    arguments.pop(next(iter(signature.parameters)))  # self
    extra = {}
    for name, p in signature.parameters.items():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            extra = arguments.pop(name, {})
        elif p.kind is inspect.Parameter.VAR_POSITIONAL and arguments.get(name):
            return unfused(model, *args, **kwargs)
    arguments.update(extra)
    labels = arguments.pop("labels", None)
    keep = arguments.pop("logits_to_keep", 0)
    if labels is None or not torch.is_grad_enabled() or \
            arguments.get("return_dict", True) is False or \
            not (isinstance(keep, int) and keep == 0):
        return unfused(model, *args, **kwargs)
    arguments.pop("return_dict", None)
    loss_kwargs = {k: arguments.pop(k) for k in _LOSS_KWARGS if k in arguments}
    outputs = model.base_model(**arguments)
    hidden = outputs[0]
    loss = causal_lm_loss(hidden, model.get_output_embeddings().weight, labels,
                          kernels=getattr(model, "_coat_loss_kernels", None), **loss_kwargs)
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return CausalLMOutputWithPast(loss=loss, logits=None,
                                  past_key_values=getattr(outputs, "past_key_values", None),
                                  hidden_states=getattr(outputs, "hidden_states", None),
                                  attentions=getattr(outputs, "attentions", None))


def causal_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *,
                   ignore_index: int = -100, num_items_in_batch=None, shift_labels=None,
                   kernels=None) -> torch.Tensor:
    """Hugging Face's causal-LM loss (each token predicts the next label; the
    last position predicts nothing; the mean over labels that are not
    ``ignore_index``, or their sum over ``num_items_in_batch``) of the logits
    ``hidden @ weight.T``, computed without them."""
    from ..nn.cross_entropy import linear_cross_entropy

    if shift_labels is None:
        labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:]
    targets = shift_labels.to(hidden.device)
    loss = linear_cross_entropy(hidden, weight, targets, ignore_index, kernels=kernels)
    if num_items_in_batch is None:
        return loss
    valid = (targets != ignore_index).sum()
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(hidden.device)
    # A micro-batch whose labels are all ignored adds 0 (the mean is NaN).
    return torch.where(valid > 0, loss * valid / num_items_in_batch, torch.zeros_like(loss))
