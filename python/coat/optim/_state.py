"""FP8AdamW's state_dict and load_state_dict (coat.optim): torch's layout plus
the quantization config and step counts, DTensor entries for FSDP2
parameters, and loading a plain, a DCP-handed or a full (gathered) one."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict

import torch

from .. import _dist, _dtypes
from ._layout import _MOMENTS, _STATE_KEYS, QuantConfig, _Bucket


class StateDictMixin:
    """FP8AdamW's state_dict machinery. It reads the optimizer's qconfig,
    rounding, _buckets, _steps and _step_tensors, so it serves FP8AdamW only, placed
    before torch.optim.Optimizer, whose state_dict it extends."""

    def state_dict(self) -> Dict[str, Any]:
        """torch layout ("state" keyed by parameter index, "param_groups")
        whose per-parameter entries are views of the live FP8 state (codes
        as float8 or uint8), plus "coat": the quantization config and the
        per-group step counts. Save it with torch.save; it round-trips
        bit-exactly through load_state_dict.

        DTensor parameters (FSDP2): their entries are DTensors over the
        parameter's mesh -- codes as uint8 shaped like the parameter, each
        per-group metadata field as a 1-D tensor of (shard ranks x groups per
        slot) elements, evenly Shard(0)-ed -- plus "coat_layout", so that
        torch.distributed.checkpoint saves them sharded
        (get_optimizer_state_dict) or gathers them whole (full_state_dict)."""
        sd = super().state_dict()
        dist_index = {idx: (b, i) for b in self._buckets for i, idx in enumerate(b.indices)
                      if b.layouts[i] is not None}
        if dist_index:
            sd["state"] = {k: (self._distributed_entry(*dist_index[k], v) if k in dist_index
                               else v) for k, v in sd["state"].items()}
        sd["coat"] = {"format_version": 1, "config": dataclasses.asdict(self.qconfig),
                      "steps": list(self._steps), "seed": self.rounding.seed}
        return sd

    def _distributed_entry(self, b: _Bucket, i: int, st: Dict[str, Any]) -> Dict[str, Any]:
        lay = b.layouts[i]
        G = self.qconfig.group_size
        codes_keys = {_STATE_KEYS[(m, "codes")] for m in _MOMENTS}
        out: Dict[str, Any] = {}
        for key, t in st.items():
            if key == "step":
                out[key] = t
            elif key in codes_keys:
                out[key] = _dist.state_dtensor(_dtypes.codes_as_uint8(t), lay, lay.global_shape)
            else:
                out[key] = _dist.state_dtensor(t, lay, (lay.world * lay.groups(G),))
        # On the state's device: DCP's full-state load requires every tensor
        # of more than 0 dims to be on one device.
        out[_dist.LAYOUT_KEY] = _dist.layout_tensor(lay, b.local_numel(i), G,
                                                    self.qconfig).to(b.device)
        return out

    @torch.no_grad()
    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads a state_dict of this class: one from state_dict() (plain or
        with DTensor entries), one that torch.distributed.checkpoint's
        set_optimizer_state_dict hands over (no "coat" entry: the step counts
        then come from the "step" entries), or a full (gathered) one whose
        entries are whole tensors, of which each rank takes its shard. The
        FP8 state of a sharded parameter loads into the same shard layout,
        or into another (world size, or unsharded) where the shards of both
        are whole 1xG groups, so that the groups are the same (docs/fsdp.md)."""
        coat = state_dict.get("coat")
        if coat is not None:
            saved_cfg = QuantConfig(**coat["config"])
            if saved_cfg != self.qconfig:
                raise ValueError(f"state_dict was saved with {saved_cfg}, this optimizer uses "
                                 f"{self.qconfig}")
        if "state" not in state_dict or "param_groups" not in state_dict:
            raise ValueError("not an optimizer state_dict (needs 'state' and 'param_groups')")
        if coat is None and not any(isinstance(v, dict) and "scale_exp_avg" in v
                                    for v in state_dict["state"].values()):
            raise ValueError("not an FP8AdamW state_dict (no 'coat' entry and no FP8 state "
                             "entries such as 'scale_exp_avg')")
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"state_dict has {len(groups)} parameter groups, this optimizer "
                             f"has {len(self.param_groups)}")
        for gi, (saved, mine) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(mine["params"]):
                raise ValueError(f"parameter group {gi}: state_dict has {len(saved['params'])} "
                                 f"parameters, this optimizer has {len(mine['params'])}")
        saved_state = state_dict["state"]
        where = {id(p): (b, i) for b in self._buckets for i, p in enumerate(b.params)}
        # Map saved ids to our parameters in order (torch's convention).
        id_map = {}
        for saved, mine in zip(groups, self.param_groups):
            id_map.update(zip(saved["params"], mine["params"]))
        # Validate everything before writing anything.
        plan = []
        for sid, p in id_map.items():
            if sid not in saved_state:
                raise ValueError(f"state_dict has no state for parameter {sid}")
            src, dst = saved_state[sid], self.state[p]
            b, i = where[id(p)]
            regroup = self._check_layout(sid, src, b, i)
            extra = set(src) - set(dst) - {_dist.LAYOUT_KEY}
            if extra:
                raise ValueError(f"parameter {sid}: state_dict has {sorted(extra)}, which this "
                                 f"optimizer ({self.qconfig}) does not keep")
            for key, d in dst.items():
                if key == "step":
                    continue
                if key not in src:
                    if key == _STATE_KEYS[("master", "param")]:
                        continue  # saved without masters: they stay the parameters'
                    raise ValueError(f"parameter {sid}: state_dict lacks {key!r}")
                s = self._local_part(sid, key, src[key], b, i, regroup)
                if tuple(s.shape) != tuple(d.shape):
                    raise ValueError(f"parameter {sid}: {key!r} has shape {tuple(s.shape)}, "
                                     f"expected {tuple(d.shape)}")
                plan.append((d, s))
        steps = []
        for gi, (saved, mine) in enumerate(zip(groups, self.param_groups)):
            if coat is not None:
                steps.append(int(coat["steps"][gi]))
                continue
            counts = {self._step_value(saved_state[sid]["step"]) for sid in saved["params"]
                      if "step" in saved_state.get(sid, {})}
            if len(counts) != 1:
                raise ValueError(f"parameter group {gi}: cannot tell the step count from the "
                                 f"'step' entries (found {sorted(counts)})")
            steps.append(counts.pop())
        for d, s in plan:
            if d.dtype in (torch.float32,):
                d.copy_(s)
            else:  # FP8 codes: copy the bits, whatever dtype they were saved as
                _dtypes.codes_as_uint8(d).copy_(_dtypes.codes_as_uint8(s))
        # Loaded masters are the parameters' from here on (load the model's
        # state first: a parameter changed later is copied into its master).
        for b in self._buckets:
            b.note_versions()
        for gi, (saved, mine) in enumerate(zip(groups, self.param_groups)):
            for k, v in saved.items():
                if k != "params":
                    mine[k] = v
            self._steps[gi] = steps[gi]
            self._step_tensors[gi].fill_(float(self._steps[gi]))
        if coat is not None and "seed" in coat:
            # The run continues with its own random bits (stochastic rounding).
            self.rounding = dataclasses.replace(self.rounding, seed=int(coat["seed"]))

    @staticmethod
    def _step_value(x: Any) -> int:
        if _dist.is_dtensor(x):
            x = _dist.local_tensor(x)
        return int(float(x.item()) if isinstance(x, torch.Tensor) else float(x))

    def _check_layout(self, sid: Any, src: Dict[str, Any], b: _Bucket, i: int) -> bool:
        """Checks the saved shard layout against this optimizer's; returns
        whether the per-group metadata must be laid out anew: saved under
        another layout (another world size, or unsharded) where both keep
        every shard's 1xG groups whole (docs/fsdp.md). Any other difference
        raises ValueError."""
        lay = b.layouts[i]
        G = self.qconfig.group_size
        mine = _dist.layout_tensor(lay, b.local_numel(i), G, self.qconfig)
        saved = src.get(_dist.LAYOUT_KEY)
        if saved is None:
            # Saved by a non-distributed FP8AdamW: one shard of the whole tensor.
            if lay is None or lay.world == 1:
                return False
            saved = _dist.layout_tensor(None, _numel(lay.global_shape), G, self.qconfig)
            what = "unsharded FP8 state"
        else:
            saved = _dist.local_tensor(saved).detach().to("cpu", torch.int64).reshape(-1)
            if torch.equal(saved, mine):
                return False
            what = f"FP8 state saved for {_dist.describe_layout(saved)}"
        shape = lay.global_shape if lay is not None else tuple(b.params[i].shape)
        codes = src.get(_STATE_KEYS[(_MOMENTS[0], "codes")])
        same_shape = isinstance(codes, torch.Tensor) and tuple(codes.shape) == shape
        if same_shape and _dist.layouts_regroupable(saved, mine):
            return True
        raise ValueError(f"parameter {sid}: the state_dict holds {what}, this optimizer has "
                         f"{_dist.describe_layout(mine)}; FP8AdamW state loads only into the "
                         f"same shard layout, or into another of the same parameter shape and "
                         f"configuration where the shards of both are whole 1x{G} groups "
                         "(docs/fsdp.md)")

    def _local_part(self, sid: Any, key: str, s: Any, b: _Bucket, i: int,
                    regroup: bool = False) -> torch.Tensor:
        """This rank's part of a saved state entry: a DTensor's local tensor,
        or the rank's rows / groups of a whole (gathered) tensor. With
        ``regroup`` the whole metadata was saved under another layout whose
        shards are whole groups: in every such layout the tensor's groups
        come first, in order, and then the padding groups (empty ranks and
        the last shard's tail), so group g of the tensor is entry g."""
        if not isinstance(s, torch.Tensor):
            raise ValueError(f"parameter {sid}: {key!r} is a {type(s).__name__}, not a tensor")
        if _dist.is_dtensor(s):
            return _dist.local_tensor(s)
        lay = b.layouts[i]
        G = self.qconfig.group_size
        codes = key in {_STATE_KEYS[(m, "codes")] for m in _MOMENTS}
        if regroup and not codes:
            mine = self.state[b.params[i]][key]
            shape = lay.global_shape if lay is not None else tuple(b.params[i].shape)
            real = -(-_numel(shape) // G)
            first = lay.rank * lay.groups(G) if lay is not None else 0
            k = max(0, min(mine.numel(), real - first))
            if s.dim() != 1 or s.numel() < real:
                return s  # reported as a shape mismatch by the caller
            # Padding groups (no element of the tensor) keep their values.
            out = mine.clone()
            out[:k] = s[first:first + k].to(out.device)
            return out
        if lay is None or lay.world == 1:
            return s
        if codes:
            if tuple(s.shape) != lay.global_shape:
                return s  # reported as a shape mismatch by the caller
            start, stop = lay.row_range()
            return s[start:stop]
        L = lay.groups(G)
        if s.dim() != 1 or s.numel() != lay.world * L:
            return s
        return s[lay.rank * L:(lay.rank + 1) * L]


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
