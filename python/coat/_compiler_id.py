"""The compiler's identity: a hash of the sources coat-opt is built from
(scripts/compiler_id.py writes it; test_compiler_id checks it is current).
Part of every artifact's source key, so kernels a previous compiler made
are not taken for this one's."""

COMPILER_ID = "f1dd00d01f40074a77a6534fc2107a18"
