"""The compiler's identity: a hash of the sources coat-opt is built from
(scripts/compiler_id.py writes it; test_compiler_id checks it is current).
Part of every artifact's source key, so kernels a previous compiler made
are not taken for this one's."""

COMPILER_ID = "982f3d421ac0dd1a5677f85c8fb6b3bb"
