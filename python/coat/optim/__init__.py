"""coat.optim: FP8AdamW, AdamW with COAT's FP8 optimizer states
(docs/optimizer-numerics.md), laid out by concern:

- ``adamw``: the optimizer -- its buckets of flat buffers and their steps;
- ``_layout``: the quantization config, the buckets, the state keys;
- ``_grads``: the lazy gradient buffers, gradients written in place,
  ``zero_grad``, clipping and the step in the backward;
- ``_state``: ``state_dict`` / ``load_state_dict``;
- ``_fsdp``: DTensor parameters under FSDP2 (``share_fsdp_storage``).
"""

from .adamw import DEFAULT_BUCKET_MB, FP8AdamW, QuantConfig, owns_grad

__all__ = ["FP8AdamW", "QuantConfig", "owns_grad", "DEFAULT_BUCKET_MB"]
