"""Hugging Face ``transformers`` models under coat.convert: which decoder
layers convert and what is read from them (:mod:`coat.hf.families`), and the
converted layer that takes the model's own call signature
(:mod:`coat.hf.layer`). ``transformers`` is imported only when a converted
layer runs its attention core."""

from .families import LayerSpec, UnsupportedLayer, inspect_layer, spec_from_config

__all__ = ["LayerSpec", "UnsupportedLayer", "inspect_layer", "spec_from_config"]
