"""The compiler's identity: a hash of the sources coat-opt is built from
(scripts/compiler_id.py writes it; test_compiler_id checks it is current).
Part of every artifact's source key, so kernels a previous compiler made
are not taken for this one's."""

COMPILER_ID = "e8e21e951e545db49d3d0da319116ad4"
