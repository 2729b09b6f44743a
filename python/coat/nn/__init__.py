"""PyTorch modules whose forward and backward are compiled coat programs.

A module generates its block's program from its config (:mod:`coat.programs`),
finds or compiles its kernel set (:func:`coat.artifacts.program`), and runs the
launch plan the compiler exported (:mod:`coat.executor`) under autograd: the
forward calls, keeping exactly the values the plan lists as saved for the
backward (FP8 codes and scales where the compiler chose FP8), then the
backward calls when autograd asks.

    block = coat.nn.MLPBlock(hidden=1024, ffn=2816)
    y = block(h)                 # h + down(silu(gate(rmsnorm(h))) * up(rmsnorm(h)))
    y.sum().backward()

Tensors may be on the GPU (compiled kernels) or the CPU (their CPU twins).

Laid out by concern: ``modules`` (the one-program modules and their base),
``decoder`` (the project's Llama decoder layer), ``convert`` (coat.convert
and its report), ``cross_entropy`` (the LM head fused with its loss,
chunked: linear_cross_entropy), ``finite`` (NaN/Inf flags, read without
waiting), ``graphs`` (a step captured in a CUDA graph), ``_autograd`` (a
program under autograd).
Hugging Face decoder layers live in :mod:`coat.hf`.
"""

from ._autograd import (_RunProgram, forward_inputs, recomputed_output, returned_outputs,
                        run_backward, run_forward, run_recompute)
from .convert import KEEP_HIGH_PRECISION, ConversionReport, convert
from .cross_entropy import linear_cross_entropy
from .decoder import DecoderLayer
from .finite import NonFiniteError, check_finite, poll_finite
from .graphs import GraphedStep, capture_step
from .modules import TOKEN_MULTIPLE, LayerNorm, Linear, MLPBlock, RMSNorm

__all__ = ["MLPBlock", "Linear", "RMSNorm", "LayerNorm", "DecoderLayer", "convert",
           "ConversionReport", "KEEP_HIGH_PRECISION", "check_finite", "poll_finite",
           "NonFiniteError", "capture_step", "GraphedStep", "TOKEN_MULTIPLE", "forward_inputs",
           "returned_outputs", "run_forward", "run_backward", "_RunProgram",
           "linear_cross_entropy"]
