"""FP8AdamW's gradient buffers (coat.optim): when a bucket's flat gradient
buffer exists, how the backward's gradients get into it, zero_grad, global
and per-bucket clipping and the optimizer step in the backward
(docs/training.md, "Memory of a step", "Gradient clipping").

Lazy buckets (plain parameters, the default). A bucket's flat gradient buffer
does not exist between steps. A hook that runs after the backward has
accumulated a parameter's gradient (``register_post_accumulate_grad_hook``;
on torch < 2.1 a post hook of the parameter's AccumulateGrad node) copies
that gradient into the bucket's buffer -- allocating the buffer at the
bucket's first gradient of the step -- and makes ``.grad`` the view of it, so
the tensor the backward produced is freed at once and any later micro-batch
accumulates into the view in place. The bucket does not hold the buffer:
those views do (see _Bucket.grad), so ``zero_grad(set_to_none=True)``, the
optimizer's or torch's ``Module.zero_grad()``, frees it. With
``step_in_backward`` the bucket is stepped as soon as all its parameters'
gradients have arrived, and its buffer freed then.

Persistent buckets (DTensor parameters, whose gradients FSDP2 accumulates
into in place; or ``persistent_grads=True``): the buffer lives as long as the
optimizer and ``.grad`` are its views from construction on, as before. A
lazy bucket into which a CUDA graph captured an accumulation becomes
persistent ("pinned"): the graph's replays write to that address.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from .. import _dist
from ._layout import _Bucket, _param_name

# ---- which optimizer owns a parameter's gradient -----------------------------

#: id(parameter) -> (weak parameter, weak optimizer). The newest FP8AdamW
#: built over a parameter owns it (it re-pointed the parameter's storage);
#: an older one's hooks do nothing for it.
_OWNERS: Dict[int, Tuple["weakref.ref", "weakref.ref"]] = {}


def _set_owner(p: torch.Tensor, opt: Any) -> None:
    key = id(p)

    def forget(ref, key=key):
        entry = _OWNERS.get(key)
        if entry is not None and entry[0] is ref:
            del _OWNERS[key]

    _OWNERS[key] = (weakref.ref(p, forget), weakref.ref(opt))


def grad_owner(t: torch.Tensor) -> Any:
    """The live FP8AdamW that manages ``t``'s gradient, else None."""
    entry = _OWNERS.get(id(t))
    if entry is None or entry[0]() is not t:
        return None
    return entry[1]()


def owns_grad(t: torch.Tensor) -> bool:
    """Whether an FP8AdamW was built over ``t``: it makes ``t.grad`` a view
    of its flat gradient buffer, re-attaching the view where it finds
    another tensor (coat.nn.capture_step rejects such tensors in
    ``reset_grads``)."""
    entry = _OWNERS.get(id(t))
    return entry is not None and entry[0]() is t


# ---- hooks ---------------------------------------------------------------------


class _NodeHook:
    """A post hook of a parameter's AccumulateGrad node (torch < 2.1). The
    parameter refers to its node only weakly: this keeps the node, and so
    the hook, alive."""

    def __init__(self, node: Any, handle: Any):
        self.node, self.handle = node, handle

    def remove(self) -> None:
        self.handle.remove()


def accumulate_grad_node(p: torch.Tensor) -> Any:
    """The AccumulateGrad node of ``p`` (a leaf that requires grad): the
    node a backward runs to add into ``p.grad``. Alive while referenced."""
    with torch.enable_grad():
        return p.view_as(p).grad_fn.next_functions[0][0]


def after_accumulation(p: torch.Tensor, fn) -> Any:
    """Calls ``fn()`` each time a backward has accumulated a gradient into
    ``p.grad`` (p a leaf that requires grad). Returns a handle with remove()."""
    if hasattr(p, "register_post_accumulate_grad_hook"):
        return p.register_post_accumulate_grad_hook(lambda _p: fn())
    node = accumulate_grad_node(p)
    return _NodeHook(node, node.register_hook(lambda _inputs, _outputs: fn()))


def _capturing(device: torch.device) -> bool:
    return (device.type == "cuda" and torch.cuda.is_available()
            and torch.cuda.is_current_stream_capturing())


class GradBufferMixin:
    """FP8AdamW's gradient-buffer machinery. It reads the optimizer's
    _buckets, persistent_grads, step_in_backward, bucket_max_norm, _device,
    _mesh and the step plumbing (_open_step, _launch), and keeps the state of
    global clipping (_grad_scale, _clip_pending, _clip_captured), so it
    serves FP8AdamW only."""

    def _setup_grads(self, b: _Bucket) -> None:
        """At construction: a persistent bucket gets its buffer and the
        views (existing gradients copied in); a lazy bucket registers the
        accumulation hooks and leaves existing gradients where they are (the
        hooks or step() copy them in)."""
        for i, p in enumerate(b.params):
            _set_owner(p, self)
            self._slots[id(p)] = (b.index, i)
        if b.persistent:
            buf = torch.zeros(b.numel, dtype=b.param.dtype, device=b.device)
            b.set_grad(buf, keep=True)
            for i, p in enumerate(b.params):
                if p.grad is not None:
                    o, k = b.offsets[i], b.local_numel(i)
                    buf[o:o + k].copy_(_dist.local_tensor(p.grad).reshape(-1))
                p.grad = b.grad_for(i, buf)
            return
        b.set_grad(None)
        me = weakref.ref(self)
        for i, p in enumerate(b.params):
            if not p.requires_grad:
                continue  # never gets a gradient from a backward
            # Only the optimizer's weak reference and indices: a hook must
            # not keep a dropped optimizer's buffers alive through the model.
            self._grad_hooks.append(after_accumulation(
                p, lambda bi=b.index, i=i: _on_accumulated(me, bi, i)))
            b.expected += 1

    # ---- the buffer ------------------------------------------------------------
    #
    # A lazy bucket refers to its buffer weakly: the views its parameters'
    # .grad hold keep it alive. Code that may allocate one holds it in a local
    # (``buf``) until a view does.

    def _alloc_grad(self, b: _Bucket, zero: bool = False) -> torch.Tensor:
        """The bucket's flat gradient buffer, allocated now. Padding must be
        zero (it takes part in the groups' statistics); elements a gradient
        will overwrite need not be. A lazy bucket does not hold it: the
        caller does, until a parameter's .grad views it."""
        make = torch.zeros if (zero or b.padded) else torch.empty
        buf = make(b.numel, dtype=b.param.dtype, device=b.device)
        b.set_grad(buf, keep=b.persistent)
        if _capturing(b.device):
            self._pin(b, buf)
        return buf

    @staticmethod
    def _pin(b: _Bucket, buf: Optional[torch.Tensor] = None) -> None:
        """A CUDA graph accumulates into the buffer (``buf``, or the one its
        views hold): keep it at its address."""
        b.pinned = True
        if buf is not None:
            b.set_grad(buf, keep=True)
        else:
            b.keep_grad()

    @staticmethod
    def _grad_attached(b: _Bucket, i: int) -> bool:
        return b.views_buffer(i)

    def _copy_grad_in(self, b: _Bucket, i: int, g: torch.Tensor, buf: torch.Tensor) -> None:
        """Copies parameter i's gradient ``g`` (not the bucket's view) into
        its slot of ``buf`` (the bucket's live buffer) and makes ``.grad``
        the view."""
        p = b.params[i]
        if g.is_sparse or g.layout != torch.strided:
            raise ValueError(f"{_param_name(b.indices[i], p)}: sparse gradients are "
                             "not supported")
        if g.shape != p.shape:
            raise ValueError(f"{_param_name(b.indices[i], p)}: gradient shape "
                             f"{tuple(g.shape)} differs from the parameter's")
        lg = _dist.local_tensor(g)
        if b.layouts[i] is not None and tuple(lg.shape) != b.local_shape(i):
            raise ValueError(f"{_param_name(b.indices[i], p)}: local gradient shard "
                             f"has shape {tuple(lg.shape)}, the parameter's local "
                             f"shard {b.local_shape(i)}")
        view = b.grad_for(i, buf)
        _dist.local_tensor(view).copy_(lg)
        p.grad = view
        b.anchor = i

    @torch.no_grad()
    def _attach_grads(self, b: _Bucket) -> torch.Tensor:
        """Before a launch: the bucket's buffer exists, every p.grad is its
        view again, gradients that were replaced are copied in and the ones
        that are None are zero. Returns the buffer."""
        buf = b.grad
        fresh = buf is None
        zeroed = fresh and (b.padded or any(p.grad is None for p in b.params))
        if fresh:
            buf = self._alloc_grad(b, zero=zeroed)
        for i, p in enumerate(b.params):
            if not fresh and self._grad_attached(b, i):
                continue
            g = p.grad
            if g is not None:
                self._copy_grad_in(b, i, g, buf)
                continue
            if not zeroed:
                o, k = b.offsets[i], b.local_numel(i)
                buf[o:o + k].zero_()
            p.grad = b.grad_for(i, buf)
        return buf

    # ---- gradients their producer writes into the buffer --------------------------

    @torch.no_grad()
    def grad_destination(self, params: Sequence[torch.Tensor], shape: Sequence[int],
                         dtype: torch.dtype) -> Optional[torch.Tensor]:
        """Memory the backward now running may write the gradient of
        ``params`` into: the parameters' slots of their bucket's gradient
        buffer, as one ``shape`` ``dtype`` tensor (several parameters: their
        rows concatenated, a fused q|k|v weight's). The producer writes the
        gradient there and returns that tensor to autograd as the gradient,
        which AccumulateGrad then takes as ``.grad`` as it is (the first
        gradient of a step), so the accumulation hook finds it in its slot
        and copies nothing. None where that cannot hold, and the gradient
        takes the usual way: a parameter not in this optimizer's lazy
        buckets, or in another bucket, out of order or not adjacent; a
        dtype or shape other than the slots'; a gradient there already (a
        later micro-batch accumulates into it); a backward that does not
        accumulate into ``.grad`` (``torch.autograd.grad``, ``inputs=``
        without them); a CUDA graph capturing."""
        slots = [self._slot_of(p) for p in params]
        if not slots or any(s is None for s in slots):
            return None
        b = slots[0][0]
        first = slots[0][1]
        members = [i for _, i in slots]
        if (any(s[0] is not b for s in slots) or members != list(range(first, first + len(members)))
                or self._keeps_buffer(b) or b.param.dtype != dtype or _capturing(b.device)):
            return None
        rows = 0
        for k, i in enumerate(members):
            p = b.params[i]
            if (p.grad is not None or not p.requires_grad or b.layouts[i] is not None
                    or p.dim() == 0 or tuple(p.shape[1:]) != tuple(shape[1:])):
                return None
            if k and b.offsets[i] != b.offsets[i - 1] + b.local_numel(i - 1):
                return None
            rows += p.shape[0]
        if len(shape) != b.params[first].dim() or shape[0] != rows:
            return None
        if not all(self._backward_accumulates(b, i) for i in members):
            return None
        buf = b.grad
        if buf is None:
            buf = self._alloc_grad(b)
        b.set_grad(buf, keep=True)  # until the lent members' gradients arrive
        b.lent.update(members)
        o = b.offsets[first]
        return buf[o:o + math.prod(shape)].view(tuple(shape))

    def _slot_of(self, p: torch.Tensor) -> Optional[Tuple[_Bucket, int]]:
        slot = self._slots.get(id(p)) if grad_owner(p) is self else None
        if slot is None:
            return None
        b = self._buckets[slot[0]]
        return (b, slot[1]) if b.params[slot[1]] is p else None

    @staticmethod
    def _backward_accumulates(b: _Bucket, i: int) -> bool:
        """Whether the running backward executes member i's AccumulateGrad
        node (it does not under torch.autograd.grad, or backward(inputs=)
        without it)."""
        will_execute = getattr(torch._C, "_will_engine_execute_node", None)
        if will_execute is None:
            return False
        node = b.grad_nodes.get(i)
        if node is None:
            node = b.grad_nodes[i] = accumulate_grad_node(b.params[i])
        try:
            return bool(will_execute(node))
        except RuntimeError:  # torch.autograd.grad() with the parameter as an input
            return False

    def _keeps_buffer(self, b: _Bucket) -> bool:
        return b.persistent or b.pinned

    @torch.no_grad()
    def _release_grads(self, b: _Bucket) -> None:
        """Drops the bucket's gradients: frees a lazy bucket's buffer (and
        sets its parameters' .grad to None); zeroes a kept one in place."""
        if self._keeps_buffer(b):
            self._zero_kept(b)
            return
        b.set_grad(None)
        b.lent.clear()
        for p in b.params:
            p.grad = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """``set_to_none=True`` (the default) frees the gradient buffers and
        sets the parameters' .grad to None; the next backward allocates them
        again, bucket by bucket. (torch's ``Module.zero_grad()`` frees them as
        well: a buffer lives only as long as some .grad is a view of it.)
        ``set_to_none=False`` zeroes the buffers that exist in place (what a
        CUDA graph that accumulates into them needs). Persistent buffers
        (DTensor parameters, ``persistent_grads=True``, buffers a CUDA graph
        captured) are always zeroed in place. A ``clip_grad_norm_`` not yet
        applied by a step is dropped with the gradients it measured."""
        # The gradients a pending clip measured are gone.
        self._clip_pending = False
        with torch.no_grad():
            for b in self._buckets:
                b.arrived.clear()
                if set_to_none:
                    self._release_grads(b)
                elif b.grad is not None:
                    self._zero_kept(b)
                else:  # no buffer: zero gradients something else set, as torch does
                    for p in b.params:
                        if p.grad is not None:
                            p.grad.zero_()

    def _zero_kept(self, b: _Bucket) -> None:
        buf = b.grad
        if buf is None:
            return
        buf.zero_()
        for i, p in enumerate(b.params):
            if not self._grad_attached(b, i):
                p.grad = b.grad_for(i, buf)

    # ---- clipping ------------------------------------------------------------------

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0,
                        error_if_nonfinite: bool = False) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)``
        over every parameter of this optimizer, with the multiply left to the
        next ``step()``: computes the total norm of all gradients on the
        device (one norm per bucket buffer, no host synchronisation) and arms
        the next step to hand ``clamp(max_norm / (norm + 1e-6), max=1)`` to
        every bucket's kernel, which multiplies each gradient by it in f32 as
        it loads it; no pass rewrites the gradients. Returns the total norm,
        a float32 scalar tensor on the parameters' device.

        Call it after the last backward of a step, as torch's: the scale is
        for the gradients it measured (``zero_grad`` drops a pending one).
        The kernel does not round the scaled gradient to the gradient's
        dtype, so with bf16 gradients the step differs from torch's clip
        followed by ``step()`` by that rounding (and torch's factor is then a
        bf16). Where no compiled kernel
        takes the scale (``grad_scale`` in its config), ``step()`` multiplies
        the gradient buffer in place before the launch instead.

        DTensor (FSDP2) parameters: the norm is over the whole model, the
        shards' parts reduced over their mesh dimension as torch reduces
        DTensor gradients. With ``step_in_backward`` buckets are stepped
        before the last gradients exist, so no global norm can scale them:
        it raises (clip per bucket with ``bucket_max_norm``). Called while a
        CUDA graph captures (coat.nn.capture_step), it arms every later
        ``step()``: each replay writes the scale the steps read."""
        if self.step_in_backward:
            raise RuntimeError(
                "FP8AdamW(step_in_backward=True): clip_grad_norm_ needs every gradient of the "
                "model before the first update, but each bucket is stepped inside the backward "
                "as soon as its own gradients are complete; clip each bucket before its launch "
                "with bucket_max_norm instead")
        max_norm, norm_type = float(max_norm), float(norm_type)
        if not norm_type > 0:
            raise ValueError(f"norm_type must be positive (or inf), got {norm_type}")
        parts: Dict[Optional[int], List[torch.Tensor]] = {}
        for b in self._buckets:
            if not b.params:
                continue
            buf = self._attach_grads(b)  # every gradient in its slot, the rest zero
            dims = [None if lay is None else lay.shard_mesh_dim for lay in b.layouts]
            if len(set(dims)) == 1:
                parts.setdefault(dims[0], []).append(
                    torch.linalg.vector_norm(buf, norm_type, dtype=torch.float32))
                continue
            for i, d in enumerate(dims):
                parts.setdefault(d, []).append(torch.linalg.vector_norm(
                    b.grad_view(i, buf), norm_type, dtype=torch.float32))
        total = _dist.total_norm(parts, self._mesh, norm_type, self._device or "cpu")
        if error_if_nonfinite and bool(torch.logical_or(total.isnan(), total.isinf())):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients is "
                               "non-finite, so it cannot be clipped (error_if_nonfinite=True)")
        if self._grad_scale is None or self._grad_scale.device != total.device:
            self._grad_scale = torch.empty((), dtype=torch.float32, device=total.device)
        # In place: a captured clip writes the tensor later steps read.
        self._grad_scale.copy_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
        self._clip_pending = True
        if _capturing(self._grad_scale.device):
            self._clip_captured = True
        return total

    def _take_grad_scale(self) -> Optional[torch.Tensor]:
        """The scale of global clipping this step applies (None: none), and
        the pending clip consumed."""
        armed = self._clip_pending or self._clip_captured
        self._clip_pending = False
        return self._grad_scale if armed else None

    def _clip(self, b: _Bucket, grad_scale: Optional[torch.Tensor] = None) -> None:
        """Scales the bucket's gradient so that its L2 norm is at most
        ``bucket_max_norm`` (torch.nn.utils.clip_grad_norm_'s rule, applied to
        the bucket alone; no host synchronisation). ``grad_scale``: global
        clipping's factor, which the kernel applies after this; the bucket's
        norm is measured as scaled by it."""
        if self.bucket_max_norm is None:
            return
        buf = b.grad
        norm = torch.linalg.vector_norm(buf, 2, dtype=torch.float32)
        if grad_scale is not None:
            norm = norm * grad_scale
        coef = torch.clamp(self.bucket_max_norm / (norm + 1e-6), max=1.0)
        buf.mul_(coef)

    # ---- the step in the backward ------------------------------------------------

    @contextlib.contextmanager
    def no_step(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients without stepping
        (gradient accumulation with ``step_in_backward``): the first backward
        after it steps each bucket on the sum, or ``step()`` does. Without
        ``step_in_backward`` it changes nothing (a backward never steps)."""
        self._no_step += 1
        try:
            yield
        finally:
            self._no_step -= 1

    def _accumulated(self, b: _Bucket, i: int) -> None:
        """After the backward accumulated parameter i's gradient."""
        p = b.params[i]
        if p.grad is None:
            return
        stepping = self.step_in_backward and not self._no_step
        capturing = _capturing(b.device)
        if capturing:
            if stepping:
                raise RuntimeError(
                    "FP8AdamW(step_in_backward=True): a CUDA graph is capturing the backward, "
                    "and a replay would repeat the step's launch with its step count and "
                    "learning rate; capture without step_in_backward (or inside "
                    "optimizer.no_step()) and call step() after each replay")
        with torch.no_grad():
            if not self._grad_attached(b, i):
                buf = b.grad
                if buf is None:
                    buf = self._alloc_grad(b)
                self._copy_grad_in(b, i, p.grad, buf)
            elif i in b.lent:
                # Written in its slot (grad_destination): AccumulateGrad took
                # that memory as it is, not as a view of the buffer, which a
                # lazy bucket needs to find its buffer again.
                p.grad = b.grad_for(i, b.grad)
            if i in b.lent:
                b.lent.discard(i)
                if not b.lent and not b.persistent and not b.pinned:
                    b.holder = None  # the views hold it now
        if capturing:
            self._pin(b)
        if stepping:
            b.arrived.add(i)
            if len(b.arrived) >= b.expected:
                self._step_bucket_now(b)

    def _step_bucket_now(self, b: _Bucket) -> None:
        if b.stepped:
            raise RuntimeError(
                f"FP8AdamW(step_in_backward=True): bucket {b.index} received all its gradients "
                "twice without a step() in between. Call optimizer.step() after each backward "
                "(it steps the buckets the backward did not complete and ends the step); for "
                "gradient accumulation run the micro-batches but the last under "
                "optimizer.no_step()")
        if self._cycle is None:
            self._open_step()
        self._launch(b, self._cycle[b.index])
        b.stepped = True
        b.arrived.clear()
        self._release_grads(b)


def _on_accumulated(me: "weakref.ref", bucket: int, i: int) -> None:
    opt = me()
    if opt is None:
        return  # the optimizer is gone
    b = opt._buckets[bucket]
    if grad_owner(b.params[i]) is not opt:
        return  # a newer optimizer owns the parameter
    opt._accumulated(b, i)


def remove_hooks(hooks: List[Any]) -> None:
    for h in hooks:
        h.remove()
    hooks.clear()


__all__ = ["GradBufferMixin", "owns_grad", "grad_owner", "after_accumulation", "remove_hooks"]

