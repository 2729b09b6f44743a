// The tensors the example's forward keeps for its backward, and their bytes
// against the same tensors in BF16 (COAT.md §3.5, Table 2: the MLP's share
// of 13.33U vs 22.66U). Saved: the 1x16 residual-stream copy (0.5U + scales),
// rstd, the transposed norm output (0.5U), the 1x16 gate, up and SiLU outputs
// and the transposed SwiGLU product (F/H = 2.6875 times 1x16 or per-tensor);
// in BF16 the same six tensors once each: 1 + 1 + 4 x 2.6875 = 12.75U. The
// transposed FP8 weights are counted apart.
// RUN: coat-opt %coat_src/examples/llama_mlp/mlp_block.mlir -coat-mixed-granularity \
// RUN:   -coat-report-saved-activations -o /dev/null 2>&1 | FileCheck %s

// CHECK-DAG: remark: saved for the backward: '!coat.qtensor<4096x4096xf8E4M3FN, per_group<16>, scale = bf16>', 18874368 bytes
// CHECK-DAG: remark: saved for the backward: 'tensor<4096xf32>', 16384 bytes
// CHECK-DAG: remark: saved for the backward: '!coat.qtensor<4096x4096xf8E4M3FN, per_tensor, scale = bf16>', 16777218 bytes
// CHECK-DAG: remark: saved for the backward: '!coat.qtensor<11008x4096xf8E4M3FN, per_tensor, scale = bf16>', 45088770 bytes{{$}}
// CHECK-DAG: remark: saved for the backward: '!coat.qtensor<4096x11008xf8E4M3FN, per_tensor, scale = bf16>', 45088770 bytes (weight copy)
// CHECK: remark: saved activations: 232931332 bytes, BF16 427827200 bytes (6.94U vs BF16 12.75U, U = 33554432 bytes); weight copies kept for the backward: 135266310 bytes
