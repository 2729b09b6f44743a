"""FP8AdamW's share_fsdp_storage (coat.optim): FSDP2 keeps its sharded
parameters in the optimizer's flat buffer slots, so step() stages nothing."""

from __future__ import annotations

from typing import Dict, Tuple

import torch

from .. import _dist
from ._layout import _Bucket, _param_name


class FSDPStorageMixin:
    """share_fsdp_storage and the check step() makes before staging a
    DTensor shard. It reads the optimizer's _buckets, so it serves FP8AdamW
    only."""

    @torch.no_grad()
    def share_fsdp_storage(self, model: torch.nn.Module) -> int:
        """Makes FSDP2 (``fully_shard``) keep the sharded parameters of
        ``model`` that this optimizer steps inside the optimizer's flat buffer
        slots, so step() copies nothing and the optimizer holds no second copy
        of the fp32 shards. Returns how many parameters now share storage.

        Uses FSDP2's internal per-parameter record (``FSDPParam``): its padded
        shard ``_sharded_param_data`` (what FSDP2 all-gathers) and the
        DTensor's local tensor become views of the slot. Parameters for which
        that record does not look as expected (CPU offload, non-dim-0 sharding,
        another torch layout) are left alone and keep being staged."""
        where: Dict[int, Tuple[_Bucket, int]] = {}
        for b in self._buckets:
            for i, p in enumerate(b.params):
                if b.layouts[i] is not None:
                    where[id(p)] = (b, i)
        shared = 0
        for fp in _dist.fsdp_params(model):
            p = getattr(fp, "sharded_param", None)
            if id(p) not in where:
                continue
            b, i = where[id(p)]
            data = getattr(fp, "_sharded_param_data", None)
            placement = getattr(fp, "fsdp_placement", None)
            state = getattr(getattr(fp, "sharded_state", None), "name", None)
            if (type(data) is not torch.Tensor or getattr(fp, "offload_to_cpu", False)
                    or state != "SHARDED" or getattr(placement, "dim", None) != 0
                    or data.numel() != b.layouts[i].padded_numel or data.dtype != b.param.dtype
                    or data.device != b.param.device):
                continue
            o, k = b.offsets[i], b.local_numel(i)
            slot = b.param[o:o + data.numel()]
            slot.copy_(data)
            fp._sharded_param_data = slot
            p._local_tensor = slot[:k].view(b.local_shape(i))
            if not self._slot_holds(b, i):  # pragma: no cover - defensive
                raise RuntimeError(f"FP8AdamW: could not place {_param_name(b.indices[i], p)} "
                                   "in its slot")
            shared += 1
        return shared

    def _slot_holds(self, b: _Bucket, i: int) -> bool:
        """Whether DTensor parameter i's local shard already lives in its slot
        (share_fsdp_storage), so nothing needs staging."""
        loc = _dist.local_tensor(b.params[i])
        return (loc.data_ptr() == b.param.data_ptr() + b.offsets[i] * b.param.element_size()
                and tuple(loc.shape) == b.local_shape(i) and loc.is_contiguous())
