"""The compiler's identity: a hash of the sources coat-opt is built from
(scripts/compiler_id.py writes it; test_compiler_id checks it is current).
Part of every artifact's source key, so kernels a previous compiler made
are not taken for this one's."""

COMPILER_ID = "4dcf761bb1e6ccfbef72c8b07faebea7"
