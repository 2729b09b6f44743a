// Stock mlir-opt with the coat plugin parses coat IR and runs coat passes.
// UNSUPPORTED: sanitizers
//
// The dialect plugin alone registers the dialect and the coat passes:
// RUN: mlir-opt %s --load-dialect-plugin=%coat_plugin \
// RUN:   --pass-pipeline='builtin.module(func.func(coat-fuse-adamw))' \
// RUN:   | FileCheck %s
//
// Loaded also as a pass plugin (both entry points in one library):
// RUN: mlir-opt %s --load-pass-plugin=%coat_plugin --load-dialect-plugin=%coat_plugin \
// RUN:   --pass-pipeline='builtin.module(func.func(coat-fuse-adamw{mode=reference}))' \
// RUN:   | FileCheck %s --check-prefixes=CHECK,REF
//
// Without the plugin the dialect is unknown:
// RUN: not mlir-opt %s 2>&1 | FileCheck %s --check-prefix=NOPLUGIN
// NOPLUGIN: error: {{.*}}type created with unregistered dialect

// CHECK-LABEL: func.func @optimizer_step
// CHECK-NOT: coat.dequantize
// CHECK-NOT: coat.adamw_update
// CHECK: %[[P:.*]], %[[M:.*]], %[[V:.*]] = coat.adamw_step
// REF-SAME: mode = #coat.optimizer_mode<reference>
// CHECK-SAME: !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand>
// CHECK-NOT: coat.quantize
// CHECK: return %[[P]], %[[M]], %[[V]]
func.func @optimizer_step(%p: tensor<1000xf32>, %g: tensor<1000xf32>,
                          %qm: !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand>,
                          %qv: !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand>,
                          %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<1000xf32>, !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand>,
        !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand>) {
  %m = coat.dequantize %qm : !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand> -> tensor<1000xf32>
  %v = coat.dequantize %qv : !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand> -> tensor<1000xf32>
  %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<1000xf32>, tensor<1000xf32>, tensor<1000xf32>
  %qm2 = coat.quantize %m2 : tensor<1000xf32> -> !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand>
  %qv2 = coat.quantize %v2 : tensor<1000xf32> -> !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand>
  return %p2, %qm2, %qv2 : tensor<1000xf32>, !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<1000xf8E4M3FN, flat_group<128>, expand>
}
