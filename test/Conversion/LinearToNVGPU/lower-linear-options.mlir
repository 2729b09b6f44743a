// Option values the hardware cannot run are pass failures with a message:
// at the first spec for options of every kernel, at the coat.linear for
// the shape of its own kernel (tile-n shapes per-tensor kernels only).
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-m=96})' 2>&1 | FileCheck %s --check-prefix=TILEM
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-n=136})' 2>&1 | FileCheck %s --check-prefix=TILEN
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{stages=6 epilogue=direct})' 2>&1 | FileCheck %s --check-prefix=SMEM
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-m=256 warpgroups=2 stages=2})' 2>&1 | FileCheck %s --check-prefix=REGS
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{stages=1})' 2>&1 | FileCheck %s --check-prefix=STAGES
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{block-tile-n=176})' 2>&1 | FileCheck %s --check-prefix=BLOCKN
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{block-tile-n=256})' 2>&1 | FileCheck %s --check-prefix=BLOCKREGS
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{block-tile-m=96})' 2>&1 | FileCheck %s --check-prefix=BLOCKM
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=fast})' 2>&1 | FileCheck %s --check-prefix=EPILOGUE
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-n=96 epilogue=tma})' 2>&1 | FileCheck %s --check-prefix=TMA-TILE
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-m=256 tile-n=160 epilogue=staged})' 2>&1 | FileCheck %s --check-prefix=STAGED-SMEM
// As in every kernel lowering, options are checked without a spec too (at
// the module then).
// RUN: echo 'module {}' | not coat-opt --pass-pipeline='builtin.module(coat-lower-linear{stages=1})' 2>&1 | FileCheck %s --check-prefix=NOSPEC
// NOSPEC: error: coat-lower-linear: stages must be >= 2

// TILEM: lower-linear-options.mlir:[[@LINE+9]]:1: error: coat-lower-linear: tile-m (96) must be a positive multiple of 64 * warpgroups
// TILEN: lower-linear-options.mlir:[[@LINE+10]]:8: error: 'coat.linear' op coat-lower-linear: tile-n (136) must be a multiple of 16 in [16, 256]
// SMEM: error: 'coat.linear' op coat-lower-linear: 128x256 tiles with 6 stages need 296032 bytes of shared memory, more than Hopper's 227 KiB per block
// REGS: lower-linear-options.mlir:[[@LINE+8]]:8: error: 'coat.linear' op coat-lower-linear: warpgroups = 2 leaves 232 registers per consumer thread, too few for 256 accumulators
// STAGES: error: coat-lower-linear: stages must be >= 2
// BLOCKN: lower-linear-options.mlir:[[@LINE+14]]:8: error: 'coat.linear' op coat-lower-linear: block-tile-n (176) must be a multiple of 16 whose tiles span at most two 128-column weight blocks (<= 128 + gcd(block-tile-n, 128))
// BLOCKREGS: lower-linear-options.mlir:[[@LINE+13]]:8: error: 'coat.linear' op coat-lower-linear: a block-scaled kernel with tile-m = 128, tile-n = 256, warpgroups = 2 has 232 registers per consumer thread, too few for 128 accumulators and 128 partial sums
// BLOCKM: lower-linear-options.mlir:[[@LINE+2]]:1: error: coat-lower-linear: block-tile-m (96) must be 0 (tile-m) or a positive multiple of 64 * warpgroups and at most 256

func.func @fwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
               %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>) -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

func.func @block(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
                 %w: !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>) -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
           !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

// EPILOGUE: error: coat-lower-linear: epilogue must be auto, direct, staged or tma, got 'fast'
// TMA-TILE: error: 'coat.linear' op coat-lower-linear: epilogue=tma stores 128-byte column blocks (64 bf16 columns): tile-n = 96 is not a multiple
// 256x160 tiles fit with direct stores, not with 256 rows x 128 bytes of staging.
// STAGED-SMEM: error: 'coat.linear' op coat-lower-linear: 256x160 tiles with 4 stages and the staged epilogue need 247808 bytes of shared memory, more than Hopper's 227 KiB per block

// ptxas compiles each wgmma within the launch share of registers: a wgmma's
// accumulators and about 26 more must fit it, whatever setmaxnreg grants.
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-m=192 tile-n=256 warpgroups=3})' 2>&1 | FileCheck %s --check-prefix=LAUNCH
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-m=256 tile-n=128 warpgroups=4 block-tile-n=192})' 2>&1 | FileCheck %s --check-prefix=BLOCKLAUNCH
// LAUNCH: error: 'coat.linear' op coat-lower-linear: 512 threads per CTA get 128 registers each at launch, too few for a wgmma with 128 accumulators (ptxas needs about 26 more): use fewer warpgroups or a narrower tile-n
// BLOCKLAUNCH: error: 'coat.linear' op coat-lower-linear: 640 threads per CTA get 96 registers each at launch, too few for a wgmma with 96 accumulators (ptxas needs about 26 more): use fewer warpgroups or a narrower block-tile-n

// Without warp specialization a block-scaled kernel keeps a partial per
// m-block (its per-m-block promotion spilled accumulators).
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-m=128 warpgroups=1 warp-specialize=false})' 2>&1 | FileCheck %s --check-prefix=PLAINREGS
// PLAINREGS: error: 'coat.linear' op coat-lower-linear: a block-scaled kernel with tile-m = 128, tile-n = 128, warpgroups = 1 has 255 registers per consumer thread, too few for 128 accumulators and 128 partial sums (without warp specialization, one partial per m-block)
