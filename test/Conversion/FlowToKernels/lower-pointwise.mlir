// RUN: coat-opt %s -coat-lower-pointwise | FileCheck %s
// RUN: coat-opt %s -coat-lower-pointwise=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: coat-opt %s -coat-lower-pointwise=lanes-per-thread=2 | FileCheck %s --check-prefix=U2
// RUN: coat-opt %s -coat-lower-pointwise=exact-math=true | FileCheck %s --check-prefix=EXACT
// RUN: coat-opt %s -coat-lower-pointwise='target=cpu exact-math=true' | FileCheck %s --check-prefix=EXACT-CPU
// RUN: coat-opt %s -coat-lower-pointwise | FileCheck %s --check-prefix=NO-CTAS
// RUN: coat-opt %s -coat-lower-pointwise=min-ctas=6 | FileCheck %s --check-prefix=CTAS
// RUN: not coat-opt %s -coat-lower-pointwise=min-ctas=33 2>&1 | FileCheck %s --check-prefix=CTAS-RANGE
// RUN: not coat-opt %s -coat-lower-pointwise=lanes-per-thread=9 2>&1 | FileCheck %s --check-prefix=LANES-RANGE
// RUN: coat-opt %s -coat-lower-pointwise=reciprocal-division=true | FileCheck %s --check-prefix=RECIP
// RUN: not coat-opt %s -coat-lower-pointwise='exact-math=true reciprocal-division=true' 2>&1 | FileCheck %s --check-prefix=RECIP-EXACT

// An occupancy request is asked only with min-ctas, as a request that
// coat-drop-spilling-min-ctas drops where ptxas would spill under it.
// NO-CTAS-NOT: minctasm
// CTAS-LABEL: gpu.func @silu(
// CTAS-SAME: coat.min_ctas_unless_spilling
// CTAS-SAME: nvvm.minctasm = 6 : i32
// Option errors point at the first kernel spec, not the implicit module.
// CTAS-RANGE: lower-pointwise.mlir:{{[1-9][0-9]*}}:1: error: coat-lower-pointwise: min-ctas must be in [0, 32], got 33
// LANES-RANGE: coat-lower-pointwise: lanes-per-thread must be in [1, 8], got 9

// A 1x16 FP8 in -> 1x16 FP8 out op: no shuffles (one lane per group), the
// codes are read and written with 16-byte vectors, the scale is derived from
// the group maximum with IEEE division and rounded to bf16, and the values
// are divided by it in a run of divisions marked for
// coat-expand-shared-divisions (one IEEE reciprocal and two FMAs each in
// coat-gpu-to-binary). The default sigmoid is rcp(1 + ex2(-x log2 e)),
// both afn.
// CHECK: gpu.module @coat_flow_kernels
// CHECK-LABEL: gpu.func @silu(
// CHECK-SAME: %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi16>, %{{.*}}: i64, %{{.*}}: i64) kernel
// CHECK-SAME: coat.kernel = {args = [{bind = ["in0.codes"], dtype = "e4m3", extent = "n", kind = "memref", name = "x"}, {bind = ["in0.scale"], dtype = "bf16", extent = "groups", kind = "memref", name = "x_scale"}, {bind = ["out0.codes"], dtype = "e4m3", extent = "n", kind = "memref", name = "y"}, {bind = ["out0.scale"], dtype = "bf16", extent = "groups", kind = "memref", name = "y_scale"}, {bind = "rows(in0)", dtype = "i64", kind = "scalar", name = "rows"}, {bind = "cols(in0)", dtype = "i64", kind = "scalar", name = "cols"}
// CHECK-SAME: config = {eps = {{.*}}, group_size = 16 : i64, math = "fast", operands = ["x"], results = ["y"]}
// CHECK-SAME: launch = {block = [256, 1, 1], elements_per_block = 4096 : i64
// CHECK-SAME: op = "silu"}, known_block_size = array<i32: 256, 1, 1>
// CHECK: scf.if
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xi8>, vector<16xi8>
// CHECK: arith.extf %{{.*}} : vector<16xf8E4M3FN> to vector<16xf32>
// CHECK-NOT: math.exp %
// CHECK: math.exp2 %{{.*}} fastmath<afn> : f32
// CHECK: arith.divf %{{.*}}, %{{.*}} fastmath<afn> : f32
// CHECK: arith.maxnumf
// CHECK-NOT: gpu.shuffle
// CHECK: arith.constant 4.480000e+02 : f32
// CHECK: %[[SB:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK: %[[S:.*]] = arith.extf %[[SB]] : bf16 to f32
// CHECK-COUNT-16: arith.divf %{{.*}}, %[[S]] {coat.shared_divisor = "exact"} : f32
// CHECK-NOT: arith.divf
// CHECK: arith.truncf %{{.*}} : vector<16xf32> to vector<16xf8E4M3FN>
// CHECK: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xi8>, vector<16xi8>
// The last block masks its tail.
// CHECK: } else {
// CHECK: vector.maskedload
// CHECK: vector.maskedstore
// CHECK: gpu.return
// CPU-LABEL: func.func @silu(
// CPU-SAME: coat.kernel
// CPU: scf.for
// CPU: math.exp2
// CPU-NOT: gpu.
// EXACT-LABEL: gpu.func @silu(
// EXACT-SAME: math = "exact"
// EXACT-NOT: math.exp2
// EXACT: math.exp %
// EXACT-NOT: fastmath<afn>
// EXACT: gpu.return
// With reciprocal-division, the FP8 result is the value times the IEEE
// reciprocal of the rounded scale (an exact divf, once per group): no
// divisions marked for coat-expand-shared-divisions.
// RECIP-LABEL: gpu.func @silu(
// RECIP-SAME: config = {division = "reciprocal", eps
// RECIP: %[[SB:.*]] = arith.truncf %{{.*}} : f32 to bf16
// RECIP: %[[S:.*]] = arith.extf %[[SB]] : bf16 to f32
// RECIP: %[[R:.*]] = arith.divf %{{.*}}, %[[S]] : f32
// RECIP-COUNT-16: arith.mulf %{{.*}}, %[[R]] : f32
// RECIP-NOT: coat.shared_divisor
// RECIP: arith.truncf %{{.*}} : vector<16xf32> to vector<16xf8E4M3FN>
// RECIP: gpu.return
// RECIP-EXACT: coat-lower-pointwise: reciprocal-division applies to the fast forms; exact-math divides as the library does
// U2-LABEL: gpu.func @silu(
// U2-SAME: elements_per_block = 8192 : i64
// U2-COUNT-2: vector.load %{{.*}} : memref<?xi8>, vector<16xi8>
func.func @silu(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %y = coat.silu %x : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
      -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %y : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

// Groups of 64 span 4 lanes of 16: the epilogue maxima combine across them
// with xor shuffles 2, 1 and are stored by the group's first lane. bf16
// results move as 32-byte vectors; the maxima are of the rounded values.
// CHECK-LABEL: gpu.func @gelu_grad(
// CHECK-SAME: name = "x"}, {bind = ["in0.scale"], dtype = "f32", extent = "groups", kind = "memref", name = "x_scale"}, {bind = ["in1"], dtype = "bf16", extent = "n", kind = "memref", name = "dy"}, {bind = ["out0"], dtype = "bf16", extent = "n", kind = "memref", name = "dx"}, {bind = ["out1"], dtype = "f32", extent = "groups", kind = "memref", name = "dx_absmax"}
// CHECK-SAME: group_size = 64
// The fast GELU: Numerical Recipes' erfcc, t = rcp(1 + |z|/2) refined by a
// Newton step, a degree-9 polynomial in t, ex2 for exp(-x^2/2) and exp(P(t)).
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xi16>, vector<16xi16>
// CHECK-NOT: math.erf
// CHECK: arith.divf %{{.*}}, %{{.*}} fastmath<afn> : f32
// CHECK-COUNT-11: math.fma
// CHECK: math.exp2 %{{.*}} fastmath<afn> : f32
// CHECK: math.exp2 %{{.*}} fastmath<afn> : f32
// CHECK: arith.truncf %{{.*}} : vector<16xf32> to vector<16xbf16>
// CHECK: vector.store %{{.*}} : memref<?xi16>, vector<16xi16>
// CHECK: gpu.shuffle  xor %{{.*}}, %{{.*}}, %{{.*}} : f32
// CHECK: gpu.shuffle  xor
// CHECK-NOT: gpu.shuffle
// The maximum of the rounded values is the rounded maximum: one rounding.
// CHECK: %[[MB:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK: %[[M:.*]] = arith.extf %[[MB]] : bf16 to f32
// CHECK: scf.if
// CHECK: memref.store %[[M]], %{{.*}} : memref<?xf32>
// CPU-LABEL: func.func @gelu_grad(
// CPU-NOT: call @erff
// CPU: math.exp2
// EXACT-LABEL: gpu.func @gelu_grad(
// EXACT: math.erf
// EXACT-CPU-LABEL: func.func @gelu_grad(
// EXACT-CPU: func.call @erff
// EXACT-CPU-NOT: math.erf
func.func @gelu_grad(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<64>>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %dx = coat.gelu_grad %x, %dy : !coat.qtensor<?x?xf8E4M3FN, per_group<64>>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>
  %m = coat.absmax %dx, per_group<64> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dx, %m : tensor<?x?xbf16>, tensor<?x?xf32>
}

// Two results: the ABI lists operands, results, then maxima.
// CHECK-LABEL: gpu.func @swiglu_mul_grad(
// CHECK-SAME: name = "x1"}, {{.*}} name = "x1_scale"}, {{.*}} name = "x2"}, {{.*}} name = "x2_scale"}, {{.*}} name = "dy"}, {{.*}} name = "dx1"}, {{.*}} name = "dx2"}, {{.*}} name = "dx2_absmax"}, {bind = "rows(in0)", dtype = "i64", kind = "scalar", name = "rows"}, {bind = "cols(in0)", dtype = "i64", kind = "scalar", name = "cols"}
// CHECK-SAME: results = ["dx1", "dx2"]
func.func @swiglu_mul_grad(%a: !coat.qtensor<?x?xf8E4M3FN, per_group<32>>,
                           %b: !coat.qtensor<?x?xf8E4M3FN, per_group<32>>,
                           %dy: tensor<?x?xf32>)
    -> (tensor<?x?xf32>, tensor<?x?xf32>, tensor<?x?xf32>) {
  %d1, %d2 = coat.swiglu_mul_grad %a, %b, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<32>>, !coat.qtensor<?x?xf8E4M3FN, per_group<32>>,
        tensor<?x?xf32> -> tensor<?x?xf32>, tensor<?x?xf32>
  %m = coat.absmax %d2, per_group<32> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %d1, %d2, %m : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?x?xf32>
}

// The SwiGLU with its SiLU folded in: recorded as "swiglu", the gate read
// as an operand; silu(gate) is quantized to E4M3 codes in registers (the
// group's scale from its maximum) and read back before the product.
// CHECK-LABEL: gpu.func @swiglu_silu_gate(
// CHECK-SAME: name = "gate"}, {{.*}} name = "gate_scale"}, {{.*}} name = "x2"}, {{.*}} name = "x2_scale"}, {{.*}} name = "y"}, {{.*}} name = "y_absmax"}
// CHECK-SAME: math = "fast"
// CHECK-SAME: op = "swiglu"
// CHECK: math.exp2
// CHECK: arith.maxnumf
// CHECK: arith.truncf %{{.*}} : vector<16xf32> to vector<16xf8E4M3FN>
// CHECK-NEXT: arith.extf %{{.*}} : vector<16xf8E4M3FN> to vector<16xf32>
// CHECK: gpu.return
// CPU-LABEL: func.func @swiglu_silu_gate(
// CPU: arith.truncf %{{.*}} : vector<16xf32> to vector<16xf8E4M3FN>
func.func @swiglu_silu_gate(%g: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
                            %u: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %y = coat.swiglu_mul %g, %u {silu_gate}
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
        !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xbf16>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %m : tensor<?x?xbf16>, tensor<?x?xf32>
}

// Its backward: the gate's gradient is the first result, formed from
// dy * x2 rounded to bf16 (as the unfused product stored it).
// CHECK-LABEL: gpu.func @swiglu_grad_silu_gate(
// CHECK-SAME: name = "gate"}, {{.*}} name = "gate_scale"}, {{.*}} name = "x2"}, {{.*}} name = "x2_scale"}, {{.*}} name = "dy"}, {{.*}} name = "dgate"}, {{.*}} name = "dx2"}, {{.*}} name = "dgate_absmax"}, {{.*}} name = "dx2_absmax"}
// CHECK-SAME: op = "swiglu_grad"
// CHECK: arith.truncf %{{.*}} : vector<16xf32> to vector<16xf8E4M3FN>
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: gpu.return
func.func @swiglu_grad_silu_gate(%g: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
                                 %u: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
                                 %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xf32>, tensor<?x?xf32>) {
  %dg, %du = coat.swiglu_mul_grad %g, %u, %dy {silu_gate}
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
        !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x?xbf16>
        -> tensor<?x?xbf16>, tensor<?x?xbf16>
  %mg = coat.absmax %dg, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  %mu = coat.absmax %du, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dg, %du, %mg, %mu : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xf32>, tensor<?x?xf32>
}

// GELU's tanh form (approximate = "tanh", recorded in the manifest): the
// fast form takes t = +-(1 - 2 rcp(1 + ex2(2|u| log2 e))) on the SFU, no
// libdevice tanh; exact-math calls tanh (libm's tanhf in the CPU twin, as
// the reference library does).
// CHECK-LABEL: gpu.func @gelu_tanh(
// CHECK-SAME: config = {approximate = "tanh", group_size = 16 : i64, math = "fast"
// CHECK-SAME: op = "gelu"}
// CHECK-NOT: math.tanh
// CHECK-NOT: math.erf
// CHECK: math.exp2 %{{.*}} fastmath<afn> : f32
// CHECK: arith.divf %{{.*}}, %{{.*}} fastmath<afn> : f32
// CHECK: math.copysign
// CHECK-NOT: math.tanh
// CHECK: gpu.return
// CPU-LABEL: func.func @gelu_tanh(
// CPU-NOT: call @tanhf
// CPU: math.exp2
// CPU: math.copysign
// EXACT-LABEL: gpu.func @gelu_tanh(
// EXACT-SAME: approximate = "tanh"
// EXACT-SAME: math = "exact"
// EXACT-NOT: math.exp2
// EXACT: math.tanh %
// EXACT-NOT: math.erf
// EXACT: gpu.return
// EXACT-CPU-LABEL: func.func @gelu_tanh(
// EXACT-CPU: func.call @tanhf
// EXACT-CPU-NOT: math.tanh
func.func @gelu_tanh(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %y = coat.gelu %x {approximate = "tanh"} : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
      -> tensor<?x?xbf16>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %m : tensor<?x?xbf16>, tensor<?x?xf32>
}

// CHECK-LABEL: gpu.func @gelu_tanh_grad(
// CHECK-SAME: config = {approximate = "tanh"
// CHECK-SAME: op = "gelu_grad"}
// CHECK-NOT: math.tanh
// CHECK: math.exp2 %{{.*}} fastmath<afn> : f32
// CHECK: math.copysign
// CHECK-NOT: math.tanh
// CHECK: gpu.return
// EXACT-LABEL: gpu.func @gelu_tanh_grad(
// EXACT: math.tanh %
// EXACT-CPU-LABEL: func.func @gelu_tanh_grad(
// EXACT-CPU: func.call @tanhf
// EXACT-CPU-NOT: math.tanh
func.func @gelu_tanh_grad(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
                          %dy: tensor<?x?xbf16>) -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %dx = coat.gelu_grad %x, %dy {approximate = "tanh"}
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>
  %m = coat.absmax %dx, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dx, %m : tensor<?x?xbf16>, tensor<?x?xf32>
}
