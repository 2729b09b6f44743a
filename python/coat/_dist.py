"""DTensor / FSDP2 support of FP8AdamW (docs/fsdp.md): which DTensor
parameters it takes, how each rank's local shard is laid out in the flat
buffers, and how the per-parameter FP8 state is described as DTensors for
torch.distributed.checkpoint.

Everything here imports on any torch: without torch.distributed.tensor
(torch < 2.4, e.g. CI's 1.13) ``DTensor`` is None and no parameter is a
DTensor, so the optimizer's single-device behaviour is untouched.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Tuple

import torch

try:  # public since torch 2.5
    from torch.distributed.tensor import DTensor, Replicate, Shard
except Exception:  # pragma: no cover - depends on the torch version
    # (torch 1.13's torch.distributed._tensor fails to import on Python 3.11
    # with a ValueError, not an ImportError)
    try:
        from torch.distributed._tensor import DTensor, Replicate, Shard  # torch 2.1-2.4
    except Exception:
        DTensor = Replicate = Shard = None  # type: ignore[assignment,misc]

__all__ = ["DTensor", "ShardLayout", "is_dtensor", "shard_layout", "local_tensor",
           "LAYOUT_KEY", "fsdp_params", "total_norm"]

# Per-parameter state key of DTensor parameters: an int64 tensor
# [version, shard world size, padded elements per rank, group size,
#  m format id, v format id, m expand, v expand] that travels with every
# state_dict path (sharded DCP, full, broadcast) and is checked on load.
LAYOUT_KEY = "coat_layout"
LAYOUT_VERSION = 1
FORMAT_IDS = {"e4m3": 1, "e5m2": 2}


def is_dtensor(t: Any) -> bool:
    return DTensor is not None and isinstance(t, DTensor)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The rank-local tensor object of a DTensor (the storage FP8AdamW reads
    and writes), or ``t`` itself."""
    if is_dtensor(t):
        return t._local_tensor  # the object itself; to_local() may wrap it
    return t


@dataclasses.dataclass(frozen=True)
class ShardLayout:
    """Where one rank's shard of a DTensor parameter sits.

    Supported placements: every mesh dimension Replicate() or Shard(0), at
    most one of them Shard(0) (FSDP2's default, HSDP's (Replicate, Shard(0))).
    Then each rank holds a contiguous block of rows of the row-major global
    tensor: rows [rank*R, rank*R + local_rows) with R = ceil(dim0 / world)
    (torch.chunk's split, which FSDP2 and distribute_tensor use)."""

    mesh: Any
    placements: Tuple[Any, ...]
    shard_mesh_dim: Optional[int]  # the mesh dim carrying Shard(0), None if replicated
    world: int  # ranks along shard_mesh_dim (1 if replicated)
    rank: int  # this rank's coordinate along shard_mesh_dim
    global_shape: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    padded_numel: int  # elements of the largest (rank 0's) shard: R * prod(shape[1:])

    def slot(self, group_size: int) -> int:
        """Elements this shard occupies in the flat buffers: the padded shard
        rounded up to whole groups, the same on every rank."""
        return -(-self.padded_numel // group_size) * group_size

    def groups(self, group_size: int) -> int:
        return self.slot(group_size) // group_size

    def row_range(self) -> Tuple[int, int]:
        """This rank's rows of the global tensor, [start, stop)."""
        if not self.global_shape:
            return 0, 0
        rows = -(-self.global_shape[0] // self.world)
        start = min(self.rank * rows, self.global_shape[0])
        return start, min(start + rows, self.global_shape[0])


def padded_shard_numel(global_shape: Tuple[int, ...], world: int) -> int:
    """Elements of a Shard(0) chunk of rank 0 (the largest one)."""
    if not global_shape:
        return 1
    rest = 1
    for d in global_shape[1:]:
        rest *= int(d)
    return -(-int(global_shape[0]) // world) * rest


def group_layout_matches_unsharded(global_shape: Tuple[int, ...], world: int,
                                   group_size: int) -> bool:
    """True when the 1 x group_size groups of every rank's shard are exactly
    the groups of the unsharded tensor (so the FP8 state and the updates are
    bit-identical to a single-device run): one rank, or every shard starts at
    a multiple of group_size elements of the flattened global tensor."""
    return world == 1 or padded_shard_numel(global_shape, world) % group_size == 0


def shard_layout(name: str, p: torch.Tensor) -> ShardLayout:
    """Validates a DTensor parameter's placements and returns its layout.
    Raises ValueError for placements FP8AdamW does not support."""
    placements = tuple(p.placements)
    mesh = p.device_mesh
    shard_dim: Optional[int] = None
    for i, pl in enumerate(placements):
        kind = type(pl).__name__
        if pl.is_replicate():
            continue
        if getattr(pl, "is_partial", lambda: False)():
            raise ValueError(f"{name}: DTensor placement {pl} on mesh dim {i} is a pending "
                             "reduction (Partial); FP8AdamW steps only materialized shards")
        if pl.is_shard() and kind == "Shard" and pl.dim in (0, -len(p.shape)):
            if shard_dim is not None:
                raise ValueError(f"{name}: DTensor is Shard(0) on mesh dims {shard_dim} and {i}; "
                                 "FP8AdamW supports dim-0 sharding over one mesh dim "
                                 "(FSDP2/HSDP) only")
            shard_dim = i
            continue
        raise ValueError(f"{name}: DTensor placement {pl} on mesh dim {i} is not supported; "
                         "FP8AdamW supports Shard(0) (FSDP2's default sharding) and "
                         "Replicate(). Shard the parameter on dim 0 (fully_shard without "
                         "shard_placement_fn)")
    world = mesh.size(shard_dim) if shard_dim is not None else 1
    rank = mesh.get_local_rank(shard_dim) if shard_dim is not None else 0
    gshape = tuple(int(d) for d in p.shape)
    loc = local_tensor(p)
    layout = ShardLayout(mesh, placements, shard_dim, int(world), int(rank), gshape,
                         tuple(int(d) for d in loc.shape), padded_shard_numel(gshape, world))
    start, stop = layout.row_range()
    want = ((stop - start,) + gshape[1:]) if gshape else ()
    if layout.local_shape != want:
        raise ValueError(f"{name}: local shard has shape {layout.local_shape}, expected {want} "
                         f"for rank {rank} of {world} (torch.chunk split of dim 0)")
    return layout


def layout_tensor(layout: Optional[ShardLayout], numel: int, group_size: int,
                  qconfig: Any) -> torch.Tensor:
    world, padded = (layout.world, layout.padded_numel) if layout else (1, numel)
    return torch.tensor([LAYOUT_VERSION, world, padded, group_size,
                         FORMAT_IDS.get(qconfig.m_format, 0), FORMAT_IDS.get(qconfig.v_format, 0),
                         int(qconfig.m_expand), int(qconfig.v_expand)], dtype=torch.int64)


def layout_groups_whole(v: torch.Tensor) -> bool:
    """Whether every shard of a layout (layout_tensor's vector) is whole
    groups: one shard, or padded shards of a multiple of the group size."""
    return int(v[1]) == 1 or int(v[2]) % int(v[3]) == 0


def layouts_regroupable(saved: torch.Tensor, mine: torch.Tensor) -> bool:
    """Whether FP8 state saved under layout ``saved`` loads bit-exactly into
    layout ``mine``: the same version, group size, formats and expansion,
    and the shards of both whole groups, so that both hold the groups of
    the unsharded tensor (codes are saved shaped like the parameter, the
    metadata as the tensor's groups in order followed by padding groups)."""
    if saved.numel() != 8 or mine.numel() != 8:
        return False
    return (int(saved[0]) == int(mine[0]) and torch.equal(saved[3:], mine[3:])
            and layout_groups_whole(saved) and layout_groups_whole(mine))


def describe_layout(t: torch.Tensor) -> str:
    v = [int(x) for x in t.reshape(-1).tolist()]
    if len(v) != 8:
        return f"unknown layout {v}"
    names = {i: n for n, i in FORMAT_IDS.items()}
    return (f"{v[1]} shard(s) of {v[2]} elements, group size {v[3]}, m {names.get(v[4], '?')}"
            f"{' expanded' if v[6] else ''}, v {names.get(v[5], '?')}{' expanded' if v[7] else ''}")


def state_dtensor(local: torch.Tensor, layout: ShardLayout, global_shape: Tuple[int, ...]):
    """A DTensor over the parameter's mesh and placements whose local part is
    ``local`` (a view of the live state, no copy)."""
    stride = []
    acc = 1
    for d in reversed(global_shape):
        stride.append(acc)
        acc *= int(d)
    return DTensor.from_local(local, layout.mesh, layout.placements, run_check=False,
                              shape=torch.Size(global_shape), stride=tuple(reversed(stride)))


def total_norm(parts: Dict[Optional[int], List[torch.Tensor]], mesh: Any, norm_type: float,
               device: Any) -> torch.Tensor:
    """The ``norm_type`` norm of the whole model's gradients from this rank's
    norms of its local gradient tensors (float32 scalars), keyed by the mesh
    dimension those tensors are sharded over (None: whole tensors, which
    every rank holding them holds alike). The sharded parts are reduced over
    that dimension's process group, as torch's clip_grad_norm_ reduces
    DTensor gradients; replicas along other dimensions are counted once.
    Nothing synchronises with the host."""
    if not parts:
        return torch.zeros((), dtype=torch.float32, device=device)
    if list(parts) == [None]:
        return torch.linalg.vector_norm(torch.stack(parts[None]), norm_type)
    inf = math.isinf(norm_type)
    pieces = []
    for dim, norms in parts.items():
        n = torch.stack(norms)
        # The p-th powers add across shards (the maximum for the inf-norm).
        v = n.max() if inf else n.pow(norm_type).sum()
        if dim is not None:
            torch.distributed.all_reduce(
                v, op=torch.distributed.ReduceOp.MAX if inf else torch.distributed.ReduceOp.SUM,
                group=mesh.get_group(dim))
        pieces.append(v)
    v = torch.stack(pieces)
    return v.max() if inf else v.sum().pow(1.0 / norm_type)


def fsdp_params(model: torch.nn.Module) -> List[Any]:
    """The FSDPParam records of every fully_shard-ed module of ``model``
    (FSDP2). Uses FSDP2's internal state; raises RuntimeError naming what is
    missing if this torch's FSDP2 does not have it."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError as e:  # pragma: no cover
        raise RuntimeError(f"this torch has no FSDP2 (torch.distributed.fsdp.FSDPModule): {e}")
    out, seen = [], set()
    for m in model.modules():
        if not isinstance(m, FSDPModule):
            continue
        state = m._get_fsdp_state()
        groups = getattr(state, "_fsdp_param_groups", None)
        if groups is None:
            g = getattr(state, "_fsdp_param_group", None)
            groups = [g] if g is not None else []
        for g in groups:
            if g is None:
                continue
            for fp in g.fsdp_params:
                if id(fp) not in seen:
                    seen.add(id(fp))
                    out.append(fp)
    return out


def describe_placements(p: torch.Tensor) -> Dict[str, Any]:
    return {"placements": [str(x) for x in p.placements], "mesh": str(p.device_mesh)}
