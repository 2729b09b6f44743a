// In a kernel the SFU instructions reach the PTX with no libdevice wrapper
// around them (coat-gpu-to-binary runs coat-fast-nvvm-math first).
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s

module attributes {gpu.container_module} {
  gpu.module @k {
    // CHECK-LABEL: .visible .entry sfu(
    gpu.func @sfu(%buf: memref<4xf32>) kernel {
      %c0 = arith.constant 0 : index
      %x = memref.load %buf[%c0] : memref<4xf32>
      // CHECK: lg2.approx.ftz.f32
      %l = math.log2 %x fastmath<afn> : f32
      // CHECK: ex2.approx.ftz.f32
      %e = math.exp2 %l fastmath<afn> : f32
      // CHECK: rcp.approx.ftz.f32
      %r = arith.divf %e, %x fastmath<afn> : f32
      // CHECK-NOT: .local
      memref.store %r, %buf[%c0] : memref<4xf32>
      gpu.return
    }
  }
}
