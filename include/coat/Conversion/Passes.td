//===- Passes.td - coat conversion passes -----------------------*- tablegen -*-===//

#ifndef COAT_CONVERSION_PASSES_TD
#define COAT_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

// Options that several kernel lowerings share verbatim, declared once.
// `target`: which twin of each kernel a lowering generates.
defvar KernelTargetOption =
    Option<"target", "target", "std::string", /*default=*/"\"gpu\"",
           "Where the kernels run: 'gpu' or 'cpu'">;
// `block-size` of the lowerings whose GPU blocks are any multiple of a warp.
defvar WarpMultipleBlockSizeOption =
    Option<"blockSize", "block-size", "int64_t", /*default=*/"256",
           "Threads per GPU block (multiple of 32)">;

//===----------------------------------------------------------------------===//
// Optimizer kernels (owned with lib/Conversion/OptimizerToKernels)
//===----------------------------------------------------------------------===//

def CoatLowerOptimizer : Pass<"coat-lower-optimizer", "::mlir::ModuleOp"> {
  let summary = "Lowers kernel-spec functions holding coat.adamw_step to "
                "GPU kernels or CPU functions";
  let description = [{
    A *kernel-spec function* is a public `func.func` whose body is one
    `coat.adamw_step` followed by a `return` of its three results. Each one
    becomes a kernel of the same name that updates its buffers in place:

    - `target=gpu`: a `gpu.func` in `gpu.module @coat_kernels`; one warp-
      aligned set of L lanes per group, each lane holding E consecutive
      elements loaded with vector accesses, group statistics combined with
      `gpu.shuffle xor`. Blocks stride over tiles of `block-size` lanes by
      the grid size, `lanes-per-thread` passes each, so the step's constants
      (two accurate powers) are paid once per thread, not once per lane.
    - `target=cpu`: a `func.func` looping over groups, one group per
      iteration, with the same element math.

    The argument list follows `docs/manifest.md`: memrefs for param, grad,
    the codes, scales (and k, c) of m then v, then `n : i64` and the f32
    hyperparameters. A `coat.kernel` dictionary on each kernel records that
    ABI, the launch rule and the configuration for `coat-export-manifest`.

    ```mlir
    func.func @step(%p: tensor<?xf32>, %g: tensor<?xf32>,
                    %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
                    %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
                    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
        -> (tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
            !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
      %0:3 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd : ...
      return %0#0, %0#1, %0#2 : ...
    }
    ```
  }];
  let options = [
    KernelTargetOption,
    Option<"elementsPerThread", "elements-per-thread", "int64_t",
           /*default=*/"0",
           "Elements each GPU thread holds (power of two; 0 picks "
           "min(group_size, max(16, group_size/32)), the fastest measured "
           "for bf16 parameters and stochastic rounding)">,
    Option<"blockSize", "block-size", "int64_t", /*default=*/"128",
           "Threads per GPU block (multiple of 32)">,
    Option<"lanesPerThread", "lanes-per-thread", "int64_t", /*default=*/"4",
           "GPU: lanes (E elements of one group each, 1 to 1024) a thread "
           "updates one after the other, a grid of tiles apart; the step's "
           "constants (bias corrections, step size) are derived once for all "
           "of them">,
    Option<"minCtas", "min-ctas", "int64_t", /*default=*/"0",
           "GPU: CTAs per multiprocessor the registers must allow "
           "(.minnctapersm, 0 to 32), kept where ptxas fits them without "
           "spilling (coat-drop-spilling-min-ctas, which needs ptxas); 0 "
           "leaves the register count to ptxas. coat.compile asks for 5 "
           "(102 registers with the default blocks)">,
    Option<"bf16MinCtas", "bf16-min-ctas", "int64_t", /*default=*/"0",
           "GPU: min-ctas for the kernels of bf16 parameters (0: min-ctas). "
           "Their step moves 2 bytes less an element than an f32 one, and "
           "measured fastest with more blocks resident">,
    Option<"softExp2", "soft-exp2", "std::string", /*default=*/"\"none\"",
           "GPU, fixed mode: the requantization of the new expanded moment "
           "(m, v or both; none) evaluates its ex2 on the FMA units "
           "(coat-expand-soft-exp2, within 1.36 ulp) instead of the SFU, "
           "which the step's about 10 SFU operations an element saturate">,
    Option<"splitMetadata", "split-metadata", "bool", /*default=*/"true",
           "GPU, fixed mode, both moments expanded: the two lanes of a pair "
           "derive one moment's new group metadata each (m on even lanes, v "
           "on odd ones) and swap it by shuffles, instead of every lane "
           "deriving both; the values are the same">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect", "::mlir::NVVM::NVVMDialect"];
}

def CoatExpandFp8Conversions : Pass<"coat-expand-fp8-conversions"> {
  let summary = "Expands f8 arith.truncf/extf into integer arithmetic";
  let description = [{
    Rewrites `arith.truncf` to `f8E4M3FN`/`f8E5M2` (round to nearest even,
    saturating to the largest finite value, NaN kept) and `arith.extf` from
    them into integer bit manipulation, so targets without FP8 conversion
    instructions (the CPU through LLVM) compute the same codes as PTX
    `cvt.rn.satfinite`. Scalars and vectors are handled.

    ```mlir
    %q = arith.truncf %x : f32 to f8E4M3FN
    // becomes bitcast/shift/select arithmetic on i32 and a trunci to i8
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

//===----------------------------------------------------------------------===//
// FP8 to NVVM (owned with lib/Conversion/Fp8ToNVVM)
//===----------------------------------------------------------------------===//

def CoatLowerFp8ToNVVM : Pass<"coat-lower-fp8-to-nvvm"> {
  let summary = "Lowers f8E4M3FN/f8E5M2 arith.truncf/extf to NVVM cvt ops";
  let description = [{
    Upstream MLIR 22 has no NVVM lowering of `arith.truncf`/`arith.extf` to or
    from `f8E4M3FN`/`f8E5M2`: `convert-gpu-to-nvvm` leaves them in place and
    serialization fails. This pass rewrites them into the packed PTX
    conversions, pairing adjacent vector elements (a `vector<16xf32>` becomes
    8 `cvt.rn.satfinite.e4m3x2.f32`; an odd trailing element is paired with
    zero). Run it inside the `gpu.module`, before `convert-gpu-to-nvvm`:

    ```mlir
    %q = arith.truncf %x : vector<2xf32> to vector<2xf8E4M3FN>
    // becomes (element 0 lands in the low byte)
    %p = nvvm.convert.f32x2.to.f8x2 %x1, %x0
           {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>}
           : i16(f8E4M3FN)
    ```

    | op | source | emitted |
    |----|--------|---------|
    | truncf | f32 | `nvvm.convert.f32x2.to.f8x2` (rn, satfinite) |
    | truncf | f16 | `nvvm.convert.f16x2.to.f8x2` (rn, satfinite) |
    | truncf | bf16 | exact `extf` to f32, then as f32 (PTX has no bf16x2 to e4m3/e5m2) |
    | extf | f8 to f16 | `nvvm.convert.f8x2.to.f16x2` |
    | extf | f8 to f32 | as f16, then exact `extf` |
    | extf | f8 to bf16 | as f32, then exact `truncf` (every FP8 value is a bf16) |

    Semantics: the conversion *saturates* (`satfinite`): values beyond the
    format's range, infinities included, become +-448 (E4M3) / +-57344 (E5M2)
    and NaN stays NaN, whereas `arith.truncf` leaves overflow unspecified.
    COAT relies on this after scaling. (Checked on an H200: -896.0 -> 0xFE,
    f16 +inf -> 0x7B as E5M2, 0.1 -> 0x1D; element i of a vector lands in
    byte i.) A `truncf` with a rounding mode other than to-nearest-even,
    or from another source type, is left alone and reported as an error.

    The instructions need sm_89 with PTX 8.1, or sm_90 and newer; see
    `coat-verify-nvvm-target`.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::vector::VectorDialect"];
}

def CoatVerifyNVVMTarget : Pass<"coat-verify-nvvm-target", "::mlir::ModuleOp"> {
  let summary = "Rejects #nvvm.target chip/PTX combinations LLVM would abort on";
  let description = [{
    LLVM's NVPTX backend does not diagnose an unsupported chip/PTX pair or an
    FP8 `cvt` on a chip without it: it aborts the process (`LLVM ERROR: Cannot
    select: intrinsic %llvm.nvvm.e4m3x2.to.f16x2.rn`, `LLVM ERROR: PTX version
    7.8 does not support target 'sm_90a'`), which kills a Python host. This
    pass checks every `#nvvm.target` of every `gpu.module` up front and emits
    an error on the `gpu.module` instead.

    * Every module: the PTX ISA (the largest `+ptxNN` in `features`, or the
      chip's minimum when none is given, as LLVM does) must be at least the
      chip's minimum (sm_89/sm_90: 7.8, sm_90a: 8.0, sm_100(a): 8.6,
      sm_120(a): 8.7, ...).
    * Modules with FP8 conversions (f8 `arith.truncf`/`extf` or NVVM f8x2
      converts; or every module with `require-fp8`): the chip must be sm_89
      or newer, and sm_89 needs PTX 8.1.

    ```mlir
    // error: chip 'sm_89' with PTX 7.8 has no FP8 conversions: sm_89 needs +ptx81 or newer
    gpu.module @k [#nvvm.target<chip = "sm_89", features = "+ptx78">] { ... }
    ```
  }];
  let options = [
    Option<"requireFp8", "require-fp8", "bool", /*default=*/"false",
           "Check FP8 support even for modules without FP8 conversions">,
  ];
}

def CoatMarkGridConstants : Pass<"coat-mark-grid-constants"> {
  let summary = "Makes marked kernel parameters byval nvvm.grid_constant";
  let description = [{
    `nvvm.grid_constant` is only accepted on `llvm.func` kernels and
    `convert-gpu-to-nvvm` drops `llvm.byval` from `gpu.func` arguments, so
    lowerings mark a `gpu.func` with `coat.grid_constant = array<i32: ...>`
    (indices of `!llvm.ptr` parameters) and this pass, run after
    `convert-gpu-to-nvvm`, gives those `llvm.func` parameters
    `llvm.byval = !llvm.array<128 x i8>`, `nvvm.grid_constant` and
    `llvm.align = 64`. PTX then declares `.param .align 64 .b8 p[128]` and
    takes its address with `cvta.param` (a CUtensorMap passed by value).
  }];
  let dependentDialects = ["::mlir::NVVM::NVVMDialect"];
}

def CoatDropSpillingMinCtas
    : Pass<"coat-drop-spilling-min-ctas", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Keeps a kernel's .minnctapersm only where ptxas fits it "
                "without spilling";
  let description = [{
    Lowerings ask for `.minnctapersm N` (`nvvm.minctasm` on an `llvm.func`
    kernel, e.g. `coat-lower-activations{flat-min-ctas=N}`), which makes
    ptxas fit N blocks' registers on a multiprocessor. That pays only where
    nothing spills: the 1x16 bf16 quantizer at N = 6 went from 86.5% to
    95.6% of its byte ideal on the H200, the kernels that spilled under the
    same cap lost a third (docs/benchmarks.md). This pass, part of
    `coat-gpu-to-binary` after the lowering to LLVM, emits the module's PTX
    through its `#nvvm.target`, runs `ptxas -v` for the target's chip and
    removes the hint from each kernel that spills under it. It decides only
    hints marked `coat.min_ctas_unless_spilling` (the min-ctas options of
    coat-lower-activations and coat-lower-optimizer) and removes the mark; a
    lowering's own hints (the norms' forward register budget, the GEMM's one
    block per multiprocessor) stay.
    Modules without marked hints are left alone and need no ptxas.
  }];
  let options = [
    Option<"toolkit", "toolkit", "std::string", /*default=*/"\"\"",
           "CUDA toolkit root holding bin/ptxas (default: $PATH, then "
           "$CUDA_ROOT, $CUDA_HOME, $CUDA_PATH)">,
  ];
}

def CoatExpandSharedDivisions : Pass<"coat-expand-shared-divisions"> {
  let summary = "Divides values that share a divisor by one reciprocal and "
                "a correction each";
  let description = [{
    Kernel emitters mark the f32 divisions of a quantizer, `x_i / s` for the
    values of a group, tile or tensor with one scale `s`, with
    `coat.shared_divisor` (`emitSharedDivisions`, GroupKernel.h). The value
    names what the results must be: `"exact"` the IEEE quotients (within the
    contract of `divideBySharedDivisor`: the quantizer's groups), or
    `"fp8_codes"` only their saturating FP8 codes, for any dividend and
    divisor (a scale given to the kernel). This pass replaces each run of
    consecutive marked divisions by one divisor with one IEEE reciprocal
    `r = RN(1/s)` and Markstein's correction per value,

    ```
    q = RN(x * r);  n = fma(q, s, -x);  q' = fma(-n, r, q)
    ```

    under a test of `s` that sends divisors outside the range where that is
    correct to the IEEE divisions (`scf.if`); `"fp8_codes"` widens the range
    to 2^-80 and keeps an overflowing first product. A division costs a
    reciprocal, a range check and a branch to a slow path on the GPU
    (`div.rn.f32`); with one reciprocal per group it is three FMA-pipe
    operations per value. The marked divisions are IEEE divisions by
    themselves, so a pipeline without this pass computes the same codes.
    `test/Unit/DivisionTest.cpp` checks the sequence against IEEE division.

    ```mlir
    %q0 = arith.divf %x0, %s {coat.shared_divisor = "exact"} : f32
    %q1 = arith.divf %x1, %s {coat.shared_divisor = "exact"} : f32
    // becomes
    %q:2 = scf.if %in_range -> (f32, f32) {
      %r = arith.divf %one, %s : f32
      ...  // two fma per value
    } else {
      ...  // the IEEE divisions
    }
    ```
  }];
  let dependentDialects = ["::mlir::math::MathDialect",
                           "::mlir::scf::SCFDialect"];
}

def CoatExpandSoftExp2 : Pass<"coat-expand-soft-exp2"> {
  let summary = "Evaluates marked ex2 on the FMA units instead of the SFU";
  let description = [{
    A kernel whose special functions saturate the special function unit
    (sixteen operations per clock and multiprocessor on Hopper, against 128
    fused multiply-adds) can move its `ex2` to the FMA units. Emitters mark
    such an f32 `math.exp2` with `coat.soft_exp2`; this pass replaces each
    with the sequence of `coat/Numerics/SoftExp2.h`:

    ```
    x' = maximumf(minimumf(x, 128), -126.5)   // NaN stays NaN
    t  = (x' - 0.5) + 1.5 * 2^23              // n = floor(x') in t's low bits
    f  = x' - (t - 1.5 * 2^23)                // in [0, 1], exact
    p  = c0 + f (c1 + ... + f c6)             // six math.fma
    2^x ~ p * bitcast((bitcast(t) << 23) + (127 << 23))
    ```

    Twelve FMA-unit operations and an integer shift and add in place of one
    SFU operation. The result is within 1.36 ulp of 2^x (an f64 sweep of
    every eighth f32 in [-126, 128), test/Unit/SoftExp2Test.cpp), inside the
    2 ulp of `ex2.approx.f32`; results below 2^-126 are 0 or subnormal
    (`ex2.approx.ftz` gives 0), and past f32's range +inf. It is part of
    `coat-gpu-to-binary` (before coat-fast-nvvm-math) and of the CPU
    pipeline, so a CPU twin evaluates the same sequence. A mark on anything
    but an f32 `math.exp2` is an error.
  }];
}

def CoatFastNVVMMath : Pass<"coat-fast-nvvm-math"> {
  let summary = "Maps approximate special functions to Hopper's SFU instructions";
  let description = [{
    Rewrites f32 `math.exp2`, `math.log2`, `math.sqrt` and `arith.divf` that
    carry the `afn` fast-math flag into the NVVM intrinsics of the special
    function unit: `ex2.approx.ftz.f32`, `lg2.approx.ftz.f32`,
    `sqrt.approx.ftz.f32` and a multiply by `rcp.approx.ftz.f32`. Without it
    each op becomes a libdevice call whose subnormal handling (range checks
    and rescaling around the SFU instruction) costs four to six extra
    instructions; the optimizer kernels issue about ten of these per element.
    Ops without `afn` are left alone. Subnormal inputs and results of the
    rewritten ops flush to zero, except on ops marked `coat.keep_subnormals`,
    which get the non-flushing variants (`ex2.approx.f32`, `lg2.approx.f32`,
    `sqrt.approx.f32`, `div.approx.f32`; a few instructions more each).

    ```mlir
    %y = math.exp2 %x fastmath<afn> : f32
    // becomes
    %y = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%x) : (f32) -> f32
    ```
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

//===----------------------------------------------------------------------===//
// Activation quantization kernels (owned with lib/Conversion/QuantizeToKernels)
//===----------------------------------------------------------------------===//

def CoatLowerActivations : Pass<"coat-lower-activations", "::mlir::ModuleOp"> {
  let summary = "Lowers kernel-spec functions holding activation quantization "
                "ops to GPU kernels or CPU functions";
  let description = [{
    A *kernel-spec function* holds one op on a 2-D `[rows, cols]` operand
    (dynamic extents allowed) and returns its result(s); each becomes a kernel
    of the same name (`target=gpu`: a `gpu.func` in
    `gpu.module @coat_activation_kernels`; `target=cpu`: a `func.func` twin
    with the same ABI). Supported bodies:

    | body | kernel (`op` in the manifest) | arguments |
    |---|---|---|
    | `coat.quantize` to `per_group<G>` | `quantize` | input, codes, scale, rows, cols |
    | `coat.quantize ... scale %s` to `per_tensor` | `quantize` | input, scale, codes, rows, cols |
    | the same + `coat.transpose`, returning both | `quantize_transpose` | input, scale, codes, codes_t, rows, cols |
    | the same, returning only the transposed copy | `quantize_transposed_only` | input, scale, codes_t, rows, cols |
    | `coat.quantize` to `per_block<BxB>` (B = 32, 64, 128) | `quantize` | input, codes, scale, rows, cols |
    | the same + `coat.transpose` (`per_block<BxB>`), returning both | `quantize_transpose` | input, codes, scale, codes_t, scale_t, rows, cols |
    | `coat.dequantize` of `per_group<G>` / `per_tensor` | `dequantize` | codes, scale, output, rows, cols |
    | `coat.absmax` with `per_group<G>` | `absmax` | input, absmax, rows, cols |

    Numerics follow COAT (COAT.md §1.2, §3): `s = (absmax + eps) / fp8max`,
    rounded to bf16 for `scale = bf16`, then `q = cvt.rn.satfinite(x / s)`
    with the rounded `s`; the codes are those of the IEEE quotient on both
    targets (Triton's `div.full.f32` in COAT can differ by an ulp), unless
    `approx-division`. They come from one IEEE reciprocal of the group's,
    block's or given scale and Markstein's correction per element
    (`coat.shared_divisor` divisions, expanded by
    coat-expand-shared-divisions), not a division per element (the CPU twins
    of the tile kernels divide).

    Grouped kernels index groups of the row-major flattened tensor, which are
    the `per_group<G>` groups because G divides `cols`; on the GPU a lane
    holds E consecutive elements (16-byte accesses), G/E adjacent lanes form
    a group and combine the group maximum with `gpu.shuffle xor`. Tails are
    masked: any `rows x cols`. Tile kernels (quantize + transpose, per-block
    quantize) loop over T x T tiles (T = `tile`, or B per block; a block
    takes `tiles-per-block` of them, issuing the next one's loads before it
    processes the current one): each
    thread first issues all its 16-byte loads of the tile; per block, the
    maximum is combined by warp shuffles and one word per warp in workgroup
    memory, then `s = (max + eps) / fp8max` (IEEE, rounded to the scale
    type) and `q = cvt(x / s)`. The transposed copy goes through a tile of
    32-bit words in workgroup memory: each thread reads one column word of
    16 rows, transposes 4x4 bytes with `nvvm.prmt` and stores 16-byte rows
    of q^T. Per-block scales are `[ceil(rows/B), ceil(cols/B)]` row-major;
    `scale_t` is its transpose, the scales of q^T's `per_block<BxB>` grid;
    edge blocks are partial. Every kernel is launched with `gridDim.x =
    ceil(rows * cols / elements_per_block)`.

    ```mlir
    func.func @q(%x: tensor<?x?xbf16>)
        -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
      %q = coat.quantize %x : tensor<?x?xbf16>
             -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
      return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
    }
    ```
  }];
  let options = [
    KernelTargetOption,
    Option<"elementsPerThread", "elements-per-thread", "int64_t",
           /*default=*/"0",
           "Elements each GPU thread holds (power of two; 0 picks 16 for "
           "bf16/f16 and 8 for f32 data, at most the group size)">,
    WarpMultipleBlockSizeOption,
    Option<"tile", "tile", "int64_t", /*default=*/"0",
           "Square tile of the per-tensor quantize+transpose kernel: 32, "
           "64 or 128; 0 picks 128 for f32 inputs and 64 for 16-bit ones "
           "(the faster of the two for each, measured with the default "
           "tile-block-size and tiles-per-block). per_block<BxB> kernels "
           "use B">,
    Option<"approxDivision", "approx-division", "bool", /*default=*/"false",
           "GPU: multiply by an approximate reciprocal of the scale instead "
           "of an IEEE division (faster; codes may move by one FP8 step)">,
    Option<"tileBlockSize", "tile-block-size", "int64_t", /*default=*/"0",
           "Threads per GPU block of the tile kernels (quantize+transpose, "
           "per_block): a multiple of 32 up to 1024; 0 takes, for tiles "
           "of 16 KiB of input or more, block-size or one thread per 128 "
           "bytes where that is more (f32 128x128 tiles: 512), for smaller "
           "ones a thread per 64 bytes (bf16 64x64 tiles: 128). A block "
           "holds its tile in registers, so more threads hold fewer "
           "elements each">,
    Option<"tilesPerBlock", "tiles-per-block", "int64_t", /*default=*/"0",
           "GPU tile kernels: tiles a block takes in turn, 1 to 64 (the "
           "grid shrinks by as much), or 0: 2 for tiles of 16 KiB of input "
           "or more, else 1; above 1 the next tile's loads are issued "
           "before the current tile is quantized and transposed, keeping a "
           "tile's bytes in flight per block">,
    Option<"tileMinCtas", "tile-min-ctas", "int64_t", /*default=*/"0",
           "GPU tile kernels: CTAs per multiprocessor the registers must "
           "allow (.minnctapersm); 0 leaves the register count to ptxas">,
    Option<"flatMinCtas", "flat-min-ctas", "int64_t", /*default=*/"0",
           "GPU flat kernels (grouped, element-wise, requantize): the same "
           "(coat.compile asks for 6). "
           "In coat-gpu-to-binary, kernels that would spill under either "
           "keep ptxas's choice (coat-drop-spilling-min-ctas)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect"];
}

def CoatLowerReduceScales : Pass<"coat-lower-reduce-scales", "::mlir::ModuleOp"> {
  let summary = "Lowers the second stage of group scaling to one kernel";
  let description = [{
    A kernel-spec function holding one `coat.reduce_scales` of an argument
    (partial maxima or group scales, f32 or bf16, any shape), optionally
    followed by arith ops on rank-0 tensors with splat constants (the
    `(max + eps) / fp8max`, rounded to the scale type, that
    coat-group-scaling and coat-outline-kernels write), returning one f32 or
    bf16 rank-0 value, becomes one kernel (`op` "reduce_scales"):

    - GPU: each CTA reads `block-size x 32` entries with 16-byte loads and
      reduces them (warp shuffles, then workgroup memory); its maximum is
      combined into word 0 of a two-word `workspace` with an unsigned
      atomic max of the bit patterns (the entries are non-negative, so their
      bits order like their values), and the CTA that finishes last (a
      counter in word 1) runs the scalar arithmetic, stores the scale and
      sets the workspace back to zero. The workspace must be zero before the
      first launch; a kernel must not run on two streams at once with the
      same workspace.
    - CPU: a loop, then the same arithmetic.

    A NaN among the entries makes the maximum NaN, as `torch.max` does in
    COAT. Arguments: maxima (n), scale (1), workspace (2 x i32), n.

    ```mlir
    func.func @scale(%p: tensor<?x?xf32>) -> tensor<bf16> {
      %m = coat.reduce_scales %p : tensor<?x?xf32> -> tensor<f32>
      %eps = arith.constant dense<1.0e-10> : tensor<f32>
      %max = arith.constant dense<448.0> : tensor<f32>
      %a = arith.addf %m, %eps : tensor<f32>
      %s = arith.divf %a, %max : tensor<f32>
      %b = arith.truncf %s : tensor<f32> to tensor<bf16>
      return %b : tensor<bf16>
    }
    ```
  }];
  let options = [
    KernelTargetOption,
    Option<"blockSize", "block-size", "int64_t", /*default=*/"512",
           "Threads per GPU block (multiple of 32, <= 1024)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect", "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect",
    "::mlir::NVVM::NVVMDialect"];
}

//===----------------------------------------------------------------------===//
// Bias gradients (owned with lib/Conversion/BiasGradToKernels)
//===----------------------------------------------------------------------===//

def CoatLowerBiasGrad : Pass<"coat-lower-bias-grad", "::mlir::ModuleOp"> {
  let summary = "Lowers coat.bias_grad kernel specs to a deterministic "
                "two-level column sum";
  let description = [{
    A kernel-spec function holding one `coat.bias_grad` of a 2-D `[rows,
    cols]` argument (bf16, f16 or f32; dynamic extents allowed), perhaps
    with `coat.absmax` `per_group<G>` maxima of the same argument (what
    `coat-outline-kernels` puts beside it for a gradient entering a
    program; `coat.bias_grad`'s `canFuseMaxima` says which G), and
    returning their results, becomes two kernels (`target=gpu`: in
    `gpu.module @coat_bias_grad_kernels`; `target=cpu`: twins with the
    same ABI):

    | kernel | `op` | arguments |
    |---|---|---|
    | `<name>` | `bias_grad` | dy, [absmax], dbias_partial, rows, cols, partials |
    | `<name>_reduce` | `bias_grad_reduce` | dbias_partial, dbias, cols, partials |

    Every sum is f32 and its order is fixed by the shape alone
    (`coat/Numerics/ColumnSums.h`): partial p adds rows p, p + partials, ...
    into row p of the f32 workspace `dbias_partial` (`partials x cols`,
    `partials = ceil(rows / rows-per-partial)`, bound by the manifest); the
    reduction adds the partials in 8 strided runs, then the runs in order,
    and rounds once to the result type. GPU, CPU twin and the reference
    library (`coat_ref_bias_grad`) therefore agree bit for bit, on any GPU
    and under any schedule; no atomics.

    GPU: in `<name>` a thread takes one 16-byte vector of a row (V = 8
    bf16/f16 or 4 f32 columns) over its partial's rows, `rows-in-flight`
    rows' loads issued before their additions, so a warp reads 512
    contiguous bytes of each row; CTAs are `block-size` threads, grid x over
    the partials and y over the columns. With maxima, the G / V lanes of a
    group combine each row's maximum (NaN skipped, as every absmax kernel
    does) with shuffles and one of them stores it. `<name>_reduce`: 32
    columns a CTA, a warp per strided run, the runs combined through
    workgroup memory. At the default 32 rows a partial the workspace is
    1/16 of a bf16 `dy`, written once and read once.

    ```mlir
    func.func @db(%dy: tensor<?x512xbf16>) -> (tensor<?x32xf32>, tensor<512xbf16>) {
      %m = coat.absmax %dy, per_group<16> : tensor<?x512xbf16> -> tensor<?x32xf32>
      %db = coat.bias_grad %dy : tensor<?x512xbf16> -> tensor<512xbf16>
      return %m, %db : tensor<?x32xf32>, tensor<512xbf16>
    }
    ```
  }];
  let options = [
    KernelTargetOption,
    Option<"blockSize", "block-size", "int64_t", /*default=*/"128",
           "Threads per CTA of the partial-sum kernel (multiple of 32, <= "
           "1024)">,
    Option<"rowsPerPartial", "rows-per-partial", "int64_t", /*default=*/"32",
           "Rows each partial sum takes: partials = ceil(rows / this); it "
           "fixes the order of the sums, so it is recorded in the manifest">,
    Option<"rowsInFlight", "rows-in-flight", "int64_t", /*default=*/"8",
           "GPU: rows whose loads a thread issues before adding them, 1 to "
           "32 (the order of the additions does not change)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect", "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect"];
}

//===----------------------------------------------------------------------===//
// Softmax cross-entropy (owned with lib/Conversion/CrossEntropyToKernels)
//===----------------------------------------------------------------------===//

def CoatLowerCrossEntropy : Pass<"coat-lower-cross-entropy", "::mlir::ModuleOp"> {
  let summary = "Lowers coat.cross_entropy kernel specs to a row-per-CTA "
                "kernel that writes the loss and the gradient";
  let description = [{
    A kernel-spec function holding one `coat.cross_entropy` of a `[rows,
    V]` bf16 argument (rows dynamic or static, V static) and an i64
    argument of targets, returning both results, becomes one kernel
    (`target=gpu`: in `gpu.module @coat_cross_entropy_kernels`;
    `target=cpu`: a twin with the same ABI):

    | kernel | `op` | arguments |
    |---|---|---|
    | `<name>` | `cross_entropy` | logits, targets, loss, [dlogits], [finite_loss], [finite_dlogits], rows, cols |

    With `logits` a `coat.writable` argument there is no `dlogits`
    argument: the kernel writes the gradient over the logits (`bind` of
    `logits` names the input and the result). Finiteness flags are there
    for the results marked `coat.finite_flag`.

    GPU: one CTA a row, `threads` threads (recorded in `config.threads`: 32
    to 1024, the power of two nearest `ceil(V / 64)`, about eight 16-byte
    chunks a thread). Pass 1 reads the row's aligned 8-element chunks
    round-robin (one 16-byte load each; masked loads for the partial first
    and last chunk where the row does not start at a 16-byte boundary or V
    is not a multiple of 8, their missing lanes read as -inf) and keeps an
    online maximum and sum of `2^((x - max) log2 e)` in f32; the pairs
    combine by warp shuffles and, over warps, through workgroup memory in
    warp order, so every thread holds the same `(max, sum)`. After a
    barrier (the target's logit is read before it, as the gradient may
    overwrite it), pass 2 reads the chunks again and writes the bf16
    gradient with 16-byte stores; thread 0 writes the loss. The `exp2`s are
    marked `coat.soft_exp2` (the FMA-unit sequence of coat/Numerics/
    SoftExp2.h, on the GPU and in the CPU twin) and the logarithm is the
    sequence of coat/Numerics/SoftLog.h, so the kernel, the twin and
    `coat_ref_cross_entropy` agree bit for bit. The CPU twin runs the same
    chunk and combination order with loops.

    ```mlir
    func.func @ce(%x: tensor<?x32000xbf16> {coat.writable}, %t: tensor<?xi64>)
        -> (tensor<?xf32>, tensor<?x32000xbf16>) {
      %loss, %dx = coat.cross_entropy %x, %t
          : tensor<?x32000xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x32000xbf16>
      return %loss, %dx : tensor<?xf32>, tensor<?x32000xbf16>
    }
    ```
  }];
  let options = [
    KernelTargetOption,
    Option<"threads", "threads", "int64_t", /*default=*/"0",
           "Threads of a row's CTA (a power of two in [32, 1024]; 0: chosen "
           "from V). It fixes the order of the sums, so it is recorded in "
           "the manifest">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"];
}

//===----------------------------------------------------------------------===//
// Pointwise precision-flow kernels (owned with lib/Conversion/FlowToKernels)
//===----------------------------------------------------------------------===//

def CoatLowerPointwise : Pass<"coat-lower-pointwise", "::mlir::ModuleOp"> {
  let summary = "Lowers kernel-spec functions holding a pointwise precision-flow "
                "op to GPU kernels or CPU functions";
  let description = [{
    A *kernel-spec function* holds one pointwise precision-flow op
    (`coat.silu`, `silu_grad`, `gelu`, `gelu_grad`, `swiglu_mul`,
    `swiglu_mul_grad`, `residual_add`, `residual_add_grad`, and the rotary
    `rope`, `rope_grad`) on 2-D
    `[rows, cols]` operands that are function arguments, followed by any
    `coat.absmax ... per_group<G> epilogue` of its high-precision results,
    and returns the op's results, then the maxima, in that order. Each
    becomes one kernel of the function's name (`target=gpu`: a `gpu.func` in
    `gpu.module @coat_flow_kernels`; `target=cpu`: a `func.func` twin with the
    same ABI) that makes one pass over memory:

    - 1xG FP8 operands (`per_group<G>`) are read as codes plus
      scales and dequantized, `x = f32(q) * s`; high-precision operands are
      widened to f32.
    - The op contributes only its f32 element math (COAT.md §3.4, evaluated
      in the order of the reference library, `lib/Numerics/Activations.cpp`).
    - A high-precision result is rounded to its type and stored; its epilogue
      maxima are `max |.|` of the stored values per group, written as f32 (the
      first stage of group scaling: the per-tensor scale comes from them, and
      no kernel re-reads the result to find it).
    - A `per_group<G>` FP8 result is quantized from the f32 values as
      `coat.quantize` does: `s = bf16((max|y| + 1e-10) / fp8max)` (IEEE
      division), codes `cvt.rn.satfinite(y / s)`, the division by one
      IEEE reciprocal of `s` per group and Markstein's correction per element
      (`coat.shared_divisor` divisions for coat-expand-shared-divisions),
      which gives the codes of the IEEE quotient.

    The special functions have two formulations (`exact-math`):

    - `exact-math=true`: the library's formulas in its order with IEEE
      divisions and `expf`/`erff` (libm in the CPU twin, which then agrees
      with the library bit for bit; libdevice on the GPU, within an ulp or
      two of libm).
    - `exact-math=false` (default): no IEEE division and no libdevice call
      per element. sigmoid(x) = rcp(1 + ex2(-x log2 e)). Phi(x) = h for
      x <= 0 and 1 - h for x > 0, h = erfc(|x|/sqrt2)/2, from erfc(z) =
      t exp(P(t) - z^2), t = 1/(1 + z/2), evaluated in base 2 as
      h = t ex2(P'(t) - x^2 log2(e)/2), P' = P log2 e - 1. gelu_grad takes
      Numerical Recipes' erfcc (Press et al., Numerical Recipes in C, 2nd
      ed., §6.2: degree-9 P, relative error < 1.2e-7) with one Newton step
      on t and forms exp(-x^2/2) for its pdf term separately; gelu takes a
      degree-5 P (a least-squares fit: erfc within 7.7e-6 relative).
      1/sqrt2 and 1/sqrt(2 pi) are multiplications. On the GPU ex2 and rcp
      are the SFU approximations (`afn`, coat-fast-nvvm-math: within 2 ulp
      and 1 ulp); the CPU twin evaluates the same formulas with libm `exp2f`
      and IEEE division. With those bounds (an fp64 evaluation on
      [-100, 100], each ex2 and rcp perturbed by its bound) the f32 values
      before rounding are within 2^-17.9 (silu) and 2^-16.0 (gelu) relative
      of the exact functions, and silu_grad, gelu_grad within
      2^-22.4 (1 + |x|) |dy| and 2^-21.0 (1 + |x|) |dy| absolute (gelu:
      2^-20.1 (1 + |x|); the library's own f32 evaluation: about
      2^-23 (1 + |x|) |dy|). So bf16 results are within one bf16 ulp of the
      library's, or within 2^-19 (1 + |x|) |dy| of them where the
      derivatives or 1 + erf cancel, and an FP8 code can move by one step
      when y/s lies within about 2^-18 of a rounding boundary. The SFU ops
      flush subnormal results: sigmoid(x) for x < -87.3 is 0 (an absolute
      error below 2^-126 |x|).
    - GELU's tanh form (`approximate = "tanh"` on coat.gelu/gelu_grad): the
      argument u = sqrt(2/pi) (x + 0.044715 x^3) is formed in the library's
      order; `exact-math=true` takes `tanhf` (libm in the CPU twin, which is
      then bit-exact; libdevice `__nv_tanhf` on the GPU), the fast form
      t = sign(u) (1 - 2 rcp(1 + ex2(2 |u| log2 e))): one ex2 and one rcp,
      a quotient that stays accurate as it shrinks, and a difference that
      rounds to +-1 where the library's tanhf does (|u| > 9.01), so 1 + t
      and 1 - t^2 vanish where the library's do. The rest (`(x/2)(1 + t)`,
      `(1 + t)/2 + (x/2)(1 - t^2) sqrt(2/pi)(1 + 3 * 0.044715 x^2)`) follows
      the library's order on both forms, and the results meet the bounds
      the tests hold the other special functions to. The manifest records
      `approximate = "tanh"`.
    - `soft-exp2=true` (fast forms only): each ex2 is evaluated on the FMA
      units instead (`coat.soft_exp2`, coat-expand-soft-exp2: within 1.36
      ulp, so the bounds above hold), halving the SFU operations of silu,
      gelu and their gradients for kernels the SFU limits. The manifest
      records `ex2 = "fma"`.
    - `reciprocal-division=true` (fast forms only): the FP8 results of those
      ops are `y * RN(1/s)` with one IEEE reciprocal per group instead of
      the IEEE quotient (Markstein's three operations per element). The
      product is within 1.5 ulp of `y / s`, so the bound above grows by
      2^-22.4 and a code still moves by one step only near a rounding
      boundary. The manifest records `division = "reciprocal"`.

    Per-tensor FP8 results and transposed copies need the maximum of the
    whole tensor: `coat-group-scaling` turns them into high-precision results
    with epilogue maxima and a separate `coat.quantize`, which is what this
    pass takes.

    All grouped operands, results and maxima of a kernel share one group size
    G (a power of two <= 1024 that divides `cols`). On the GPU a lane holds
    E = min(16, G) consecutive elements (16-byte FP8 accesses, 16/32/64-byte
    high-precision ones), G/E adjacent lanes form a group and combine maxima
    with `gpu.shuffle xor`; each thread handles `lanes-per-thread` lanes
    whose loads are all issued before any math. Blocks that lie wholly inside
    the tensor take an unmasked path; the last one masks its tail, so any
    `rows x cols` works. The ABI (docs/manifest.md): per operand its codes
    and `<name>_scale`, or its values; per result its values, or codes and
    `<name>_scale`; per maximum `<result>_absmax`; then `rows`, `cols`.

    The rotary ops pair each element of the first half of a head with the
    one d/2 columns on, so their lanes hold two runs of E elements (E = 16
    bytes of the input, at most d/2 and the maxima's group), the token's
    table entries at both, and a GPU block takes whole rows
    (`launch.grid_tiles` over `rows`: the count that fills its sweeps of
    the block best). The row length is compiled in (`config.cols`) and the
    tables are `rows*d` (`[rows, d]`). Their math is the library's, each
    product and sum one f32 operation, so both targets match it bit for
    bit. Maxima need groups inside half a head. A `coat.writable` input
    lends its buffer: the input argument is also the result (bound to both)
    and, without maxima, only the rotated heads are visited.

    ```mlir
    func.func @swiglu(%a: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
                      %b: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
        -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
      %y = coat.swiglu_mul %a, %b
          : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
            !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
          -> tensor<?x?xbf16>
      %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
      return %y, %m : tensor<?x?xbf16>, tensor<?x?xf32>
    }
    ```
  }];
  let options = [
    KernelTargetOption,
    WarpMultipleBlockSizeOption,
    Option<"lanesPerThread", "lanes-per-thread", "int64_t", /*default=*/"1",
           "GPU: lanes (E elements each) per thread, strided by the block "
           "size; more keeps more bytes in flight per thread">,
    Option<"exactMath", "exact-math", "bool", /*default=*/"false",
           "Evaluate sigmoid and GELU with the reference library's formulas "
           "(IEEE divisions, expf/erff; the CPU twin is bit-exact) instead "
           "of the fast forms (SFU ex2/rcp, erfcc)">,
    Option<"softExp2", "soft-exp2", "bool", /*default=*/"false",
           "Fast forms: evaluate ex2 on the FMA units (coat-expand-soft-exp2, "
           "within the SFU's 2 ulp) instead of the SFU; for kernels whose "
           "special functions saturate it">,
    Option<"reciprocalDivision", "reciprocal-division", "bool",
           /*default=*/"false",
           "Fast forms: FP8 results of silu, gelu and their gradients are "
           "y * RN(1/s), one multiply per element, instead of the IEEE "
           "quotient y / s (three operations); the manifest records "
           "division = \"reciprocal\"">,
    Option<"minCtas", "min-ctas", "int64_t", /*default=*/"0",
           "GPU: CTAs per multiprocessor the registers must allow "
           "(.minnctapersm), kept only where ptxas fits it without spilling "
           "(coat-drop-spilling-min-ctas); 0 leaves the count to ptxas">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"];
}

//===----------------------------------------------------------------------===//
// Row normalizations of the precision flow (lib/Conversion/FlowToKernels)
//===----------------------------------------------------------------------===//

def CoatLowerNorms : Pass<"coat-lower-norms", "::mlir::ModuleOp"> {
  let summary = "Lowers kernel-spec functions holding RMSNorm/LayerNorm flow "
                "ops (forward and backward) to GPU kernels or CPU functions";
  let description = [{
    A kernel-spec function holds one `coat.rmsnorm`, `coat.layernorm`
    (no affine, weight, weight + bias), `coat.rmsnorm_grad` or
    `coat.layernorm_grad` on a 2-D `[rows, cols]` `per_group<G>` FP8 input
    (dynamic extents allowed; G a power of two in [16, 128]) and returns all
    its results; a forward norm returns its unquantized values (bf16/f16/f32,
    as `coat-group-scaling` leaves it) and may be followed by
    `coat.absmax %y, per_group<G> epilogue`, whose partial maxima the kernel
    computes from the values it writes. Each becomes a kernel of the same
    name (`target=gpu`: a `gpu.func` in `gpu.module @coat_norm_kernels`;
    `target=cpu`: a `func.func` twin with the same ABI); a backward with
    `dweight` also gets `<name>_reduce`, and `<name>_columns` where its
    column sums are separate (below).

    | body | `op` | arguments |
    |---|---|---|
    | `coat.rmsnorm` [+ absmax] | `rmsnorm` | x_codes, x_scale, weight, y, rstd, [absmax], rows, cols |
    | `coat.layernorm` [+ absmax] | `layernorm` | x_codes, x_scale, [weight, [bias]], y, mean, rstd, [absmax], rows, cols |
    | `coat.rmsnorm_grad` | `rmsnorm_grad` | x_codes, x_scale, weight, rstd, dy, dx, [dweight_partial, partials: fused], rows, cols |
    | `coat.layernorm_grad` | `layernorm_grad` | x_codes, x_scale, [weight], mean, rstd, dy, dx, [dweight_partial, [dbias_partial], partials: fused], rows, cols |
    | (separate column sums) | `norm_grad_columns` | x_codes, x_scale, [mean], rstd, dy, dweight_partial, [dbias_partial], rows, cols, partials |
    | (backward with dweight) | `norm_grad_reduce` | dweight_partial, dweight, [dbias_partial, dbias], cols, partials |

    Math per row in f32, from `x = f32(code) · s_g` (COAT.md §3.4):
    RMSNorm `rstd = 1 / sqrt(Σx²/H + eps)`, `y = x·rstd·w`; LayerNorm
    `mean = Σx/H`, `rstd = 1 / sqrt(Σ(x−mean)²/H + eps)`,
    `y = (x−mean)·rstd [·w] [+b]`; backward with the saved statistics,
    `x̂ = (x [−mean])·rstd`: RMSNorm `dx = (w·dy − x̂·mean(x̂·w·dy))·rstd`,
    LayerNorm `dx = (w·dy − (x̂·mean(x̂·w·dy) + mean(w·dy)))·rstd` (w = 1
    without affine), `dw = Σ_rows dy·x̂`, `db = Σ_rows dy`. Division and
    sqrt are IEEE; group sums of products (Σx², Σ(x−mean)·w·dy, the
    dweight accumulation) use fused multiply-adds, and the backward scales
    Σ(x−mean)·w·dy by rstd once per row.

    GPU layout: a team of T threads per row (T = 32: a row per warp; up to
    the block: a row per CTA), chosen as the fewest threads that hold
    `max_cols` columns in `groups-per-thread` G-element slots each (fused
    column sums: one slot per thread up to T = 512, since each slot also
    holds its column accumulators; `threads-per-row` overrides). Thread j
    owns groups j, j+T, ...: one group per 16-byte-wide access (with
    `lane-elements=V` below G, the V-element chunks j, j+T, ... instead:
    the G/V lanes of a group share its scale, and a warp's access to an
    f32 operand is contiguous, not 16 of every 64 bytes). The row's values
    stay in registers between the statistics and the output pass; masked
    slots cover any
    `cols` up to `max_cols` (a static cols extent, else the function's
    `coat.max_cols` attribute, else the `max-cols` option; recorded in the
    manifest and checked at launch). Row sums: `gpu.shuffle xor` butterfly,
    then one value per warp through workgroup memory summed in warp order,
    so results do not depend on scheduling.

    dweight/dbias are deterministic column sums without atomics: partial p
    of `partials` (a launch argument) sums rows p, p + partials, ... in row
    order in f32 and writes row p of an f32 workspace (`partials x cols`);
    `<name>_reduce` adds the workspace rows in a fixed order (8 strided
    sums, then in stride order) and rounds once to the weight type. Where
    the partial sums are taken is `column-sums`: `fused`, row team p takes
    those rows and holds 16 f32 accumulators per slot and sum in registers
    (one slot per thread up to T = 512); `shared`, row team p takes those
    rows too but keeps the sums in dynamic shared memory (each thread reads
    and writes only its own columns' sums, so no barrier; a team as
    without column sums, `groups-per-thread` slots a thread); `separate`,
    the row kernel takes one row per team and `<name>_columns` (128
    threads per CTA, a thread per group and partial) re-reads x and dy for
    them. All three give bitwise the same sums. `auto` picks shared for
    129..512 groups a row without dbias (teams of one group a thread in
    8-element slots, about 64 registers) and for 257..512 with dbias (where
    a fused team would take 512 threads), separate for wider rows with
    dbias (two slots of two sums: 128 registers), and fused otherwise; the
    manifest's `column_sums` records the choice. COAT instead accumulates into 128/64 lock-protected partial
    buffers in the weight dtype, in whatever order CTAs take the locks.

    `row-prefetch` (row kernels that take the column sums, so that a team
    loops over rows): while a team works on row i, each thread copies its
    slots of row i + 1's x codes and dy into one of two shared-memory
    stages (`cp.async`, zero-filled past the row) and loads that row's
    scales and statistics into registers; it waits only for row i's copies
    and reads only its own, so no barrier. The results are bitwise those
    without it; the manifest's `row_prefetch` records it. `auto` (the
    default) prefetches where that was measured faster: the LayerNorm
    backward with a weight, no dbias and shared column sums (H100, 4096 and
    8192 columns: 80 to 85% and 76 to 82% of the copy bandwidth). The
    RMSNorm backward lost 4-7% with it, the fused teams at 11008 columns
    and the shared ones with dbias lost too.

    ```mlir
    func.func @rms(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
                   %w: tensor<?xbf16>)
        -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>) {
      %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
          : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
          -> tensor<?x?xbf16>, tensor<?xf32>
      %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
      return %y, %rstd, %m : tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>
    }
    ```
  }];
  let options = [
    KernelTargetOption,
    Option<"blockSize", "block-size", "int64_t", /*default=*/"256",
           "Threads per GPU block (a power of two; raised to threads-per-row)">,
    Option<"threadsPerRow", "threads-per-row", "int64_t", /*default=*/"0",
           "Threads normalizing one row: 0 picks from max-cols, else a power "
           "of two in [32, 1024] (32: a row per warp)">,
    Option<"groupsPerThread", "groups-per-thread", "int64_t",
           /*default=*/"0",
           "Target number of G-element groups each thread holds when "
           "threads-per-row is picked automatically, 1 to 16; 0: 1 for a "
           "backward with shared column sums and no dbias, else 2">,
    Option<"laneElements", "lane-elements", "int64_t", /*default=*/"0",
           "Row kernels: elements of a row a thread takes per slot, a power "
           "of two in [4, G], or 0: min(8, G) for a backward with shared "
           "column sums and no dbias, and where a team of 256 threads or "
           "more reads a weight (forward, or backward with fused column "
           "sums), else a whole group (G); below G the "
           "lanes of a group share its scale and a warp reads and writes "
           "wide operands (f32 weight, bias, y) contiguously">,
    Option<"stageStores", "stage-stores", "bool", /*default=*/"true",
           "Forward: store y through workgroup memory so each warp store "
           "writes 512 contiguous bytes (outputs wider than 16 bytes a "
           "group, blocks of at most 32 KiB of y)">,
    Option<"maxCols", "max-cols", "int64_t", /*default=*/"16384",
           "Largest cols a kernel with a dynamic cols extent handles (unless "
           "the spec function has a coat.max_cols attribute)">,
    Option<"backwardMinCtas", "backward-min-ctas", "int64_t",
           /*default=*/"0",
           "GPU, backward row kernels: CTAs per multiprocessor the registers "
           "must allow (.minnctapersm), kept only where ptxas fits it without "
           "spilling (coat-drop-spilling-min-ctas); 0 leaves the count to "
           "ptxas. The forward always asks for 1024 threads' worth">,
    Option<"columnSums", "column-sums", "std::string", /*default=*/"\"auto\"",
           "Backward with dweight: where the per-partial column sums are "
           "taken: `fused` (the row kernel's registers), `shared` (the row "
           "kernel's dynamic shared memory, each thread its own columns; "
           "teams as without column sums), `separate` (a `<name>_columns` "
           "kernel that re-reads x and dy) or `auto` (shared for 129..512 "
           "groups a row, with dbias only for 257..512; above that "
           "separate with dbias; else fused)">,
    Option<"rowPrefetch", "row-prefetch", "std::string",
           /*default=*/"\"auto\"",
           "Backward row kernels whose teams loop over rows (column sums "
           "fused or shared): `true` has each thread copy its slots of the "
           "next row's x codes and dy into shared memory asynchronously "
           "(cp.async, two stages) and load its scales and statistics "
           "into registers while the team works on the current row; "
           "`false` does not; `auto` (GPU) does for the LayerNorm backward "
           "with a weight, no dbias and shared column sums; other kernels "
           "ignore it">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::nvgpu::NVGPUDialect"];
}

//===----------------------------------------------------------------------===//
// FP8 GEMM (owned with lib/Conversion/LinearToNVGPU)
//===----------------------------------------------------------------------===//

def CoatLowerLinear : Pass<"coat-lower-linear", "::mlir::ModuleOp"> {
  let summary = "Lowers kernel-spec functions holding coat.linear to Hopper "
                "TMA + wgmma kernels";
  let description = [{
    A kernel-spec function is a public `func.func` whose body holds one
    `coat.linear` with FP8 operands (A: M x K, B: N x K, both K-major),
    per-tensor or block-scaled (below). It becomes a `gpu.func` of the same
    name in `gpu.module @coat_linear`; per-tensor operands give
    `C = (A . B^T) * s_A * s_B (+ bias)`.
    `forward`, `dgrad` and `wgrad` are the same NT GEMM once their operands
    are K-major (COAT.md §3.2), so all kinds share one kernel; A and B may be
    any of E4M3/E5M2 (`wgmma ... .e5m2.e4m3` etc.). The result is written as
    bf16, f32, or, for a `!coat.qtensor<..., per_group<16>, scale = bf16>`
    result, as FP8 codes plus one bf16 scale per 1x16 group of a row
    (COAT.md §4.1: with `acc` the scaled f32 result incl. bias,
    `s = (max|acc| + 1e-10) / fp8max`, codes = `cvt.rn.satfinite(acc / s)`,
    stored scale `bf16(s)`; columns past N count as zero).

    - K in slices of 128 (128 FP8 bytes, the 128B swizzle span) loaded by
      TMA (`cp.async.bulk.tensor`, out-of-bounds boxes zero-filled) into a
      ring of `stages` shared-memory buffers, each completing on a "full"
      mbarrier and released through an "empty" one;
    - `warpgroups` consumer warpgroups each issue
      `wgmma.mma_async m64nNk32` on `tile-m / warpgroups` rows into f32
      registers, keeping one wgmma group in flight;
    - with `warp-specialize` (default) one more warpgroup produces: one of
      its threads issues all TMA loads, and `setmaxnreg` moves its registers
      to the consumers. CTAs are persistent (the runtime launches
      min(tiles, multiprocessors)) and walk the tiles in grouped order
      (`group-m` M tiles sweep all N tiles), so loads of the next tile
      overlap the epilogue of the current one. Without it: one CTA per
      output tile, thread 0 refilling the ring between its wgmma groups;
    - the epilogue multiplies by `s_A * s_B` (read from two 1-element f32
      buffers), adds the bias in f32 and stores with bounds checks (any M,
      N; K must be a multiple of 16 for TMA strides), from registers or, per
      `epilogue`, through shared memory (`staged`) or by TMA (`tma`: `out`
      is a tensormap, so N * element bytes must be a multiple of 16).

    Block-scaled operands (COAT.md §4.4, DeepSeek-style: lhs
    `per_group<128>`, rhs `per_block<128x128>`, f32 scales) compute
    `Y[i, j] = sum_kb s_A[i, kb] s_B[j / 128, kb] sum_{k in kb} A[i, k] B[j, k]`
    with promotion to f32 every 128 of K: each K slice (one ring stage) is
    multiplied into a fresh wgmma fragment (scale-d = 0), waited for
    (`wgmma.wait_group 0`; the other consumer warpgroup's wgmma overlaps),
    released, and added to the f32 accumulators with one FMA per element by
    `s_A[row, kb] * s_B[col / 128, kb]`. The scales (row-major
    `[m, k_blocks]` and `[n_blocks, k_blocks]` f32, `k_blocks = ceil(k/128)`,
    `n_blocks = ceil(n/128)`) are loaded per slice into registers before the
    slice's barrier wait; out-of-range rows and slices read a clamped, valid
    entry (their products are zero or not stored). These kernels use
    `block-tile-n` (default 128) columns per tile instead of `tile-n`, and
    `block-tile-m` rows where it is set: the partial fragment doubles the
    accumulators, and a tile may span at most two weight blocks. Where a
    partial per 64-row m-block does not fit the consumer's registers (e.g.
    256x128 tiles on two consumer warpgroups), a warp-specialized kernel
    multiplies and promotes the slice one m-block at a time with one
    partial fragment (manifest
    `promotion = "per_m_block"`): more waits, but a quarter less operand
    traffic than 128x128 tiles. A tile that can cross a block boundary (tile widths
    not dividing 128, e.g. 192) gets one mainloop per column offset it can
    start at inside its weight block (`scf.index_switch`), each with the
    boundary as a constant.

    With `target=cpu` each spec becomes a CPU twin instead: a `func.func`
    of the kernel's name with the same parameters (the tensormaps as
    `memref<?xi8>` of K-major codes) and the same manifest record less the
    launch rule, computing the same scaled products, bias and epilogue with
    loops and an f32 accumulator summed in K order (to f32 rounding of the
    sum, not bitwise, the GPU's result; not meant to be fast).

    Tile shape, depth and schedule are options, so a caller picks them per
    problem shape (bench/bench_linear.py compiles several).

    Parameters (docs/manifest.md): tensormaps `a`, `b` (CUtensorMap by value,
    grid constants; see `coat-mark-grid-constants`), memref `out` (m*n of
    bf16, f32 or FP8 codes), for FP8 results `out_scale` (bf16, m*groups,
    groups = ceil(n/16)), `a_scale`, `b_scale` (f32, 1; block-scaled:
    `m*k_blocks` and `n_blocks*k_blocks`), optional `bias` (n), then i64
    `m`, `n`, `k` (block-scaled: then `n_blocks`, `k_blocks`). A `coat.kernel` dictionary records them for the
    manifest. Operands that are not resolved per-tensor or block-scaled qtensors, or option
    values that do not fit the hardware, are reported as errors.

    ```mlir
    func.func @fp8_linear_dgrad(%dy: !coat.qtensor<?x?xf8E5M2, per_tensor>,
                                %wt: !coat.qtensor<?x?xf8E4M3FN, per_tensor>)
        -> tensor<?x?xbf16> {
      %dx = coat.linear dgrad %dy, %wt
              : !coat.qtensor<?x?xf8E5M2, per_tensor>,
                !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xbf16>
      return %dx : tensor<?x?xbf16>
    }
    ```
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"gpu\"",
           "gpu: Hopper kernels; cpu: CPU twins with the same parameters "
           "and manifest records (tensormaps as memrefs of codes), loops "
           "with an f32 accumulator summed in K order">,
    Option<"tileM", "tile-m", "int64_t", /*default=*/"128",
           "Output rows per tile (multiple of 64 * warpgroups, <= 256). "
           "With tile-m, tile-n and warpgroups unset, a spec with a static "
           "M >= 8192 gets 256x128 tiles (faster there on the H200), one "
           "with static M and N whose 128x256 tiles leave multiprocessors "
           "idle narrower ones (a remark says so), others 128x256">,
    Option<"tileN", "tile-n", "int64_t", /*default=*/"256",
           "Output columns per tile (wgmma N: multiple of 16, <= 256)">,
    Option<"stages", "stages", "int64_t", /*default=*/"4",
           "Shared-memory pipeline depth over K (>= 2)">,
    Option<"warpgroups", "warpgroups", "int64_t", /*default=*/"2",
           "Consumer warpgroups (128 threads each) issuing wgmma">,
    Option<"warpSpecialize", "warp-specialize", "bool", /*default=*/"true",
           "Add a TMA producer warpgroup and make CTAs persistent">,
    Option<"groupM", "group-m", "int64_t", /*default=*/"8",
           "M tiles per group of the persistent tile order">,
    Option<"blockTileM", "block-tile-m", "int64_t", /*default=*/"0",
           "Output rows per tile of block-scaled kernels (0: tile-m). Where "
           "a partial fragment per 64-row m-block does not fit beside the "
           "accumulators, a warp-specialized kernel multiplies and promotes "
           "each K slice one m-block at a time">,
    Option<"blockTileN", "block-tile-n", "int64_t", /*default=*/"128",
           "Output columns per tile of block-scaled kernels (multiple of 16; "
           "a tile spans at most two 128-column weight blocks)">,
    Option<"multiprocessors", "multiprocessors", "int64_t",
           /*default=*/"132",
           "Multiprocessors of the target (132: H100 SXM, H200) that the "
           "tile choice fills">,
    Option<"epilogue", "epilogue", "std::string", /*default=*/"\"auto\"",
           "How results are stored: `auto` (per spec: `tma` for results "
           "of a static N with 16-byte rows, else `staged`; `direct` where "
           "a staging block does not fit beside the ring); `direct`, "
           "each thread its "
           "fragment's element pairs (8 rows of 16 bytes a warp store); "
           "`staged`, through shared memory a 128-byte column block at a "
           "time, then contiguous 16-byte stores (mPerWarpgroup x 128 bytes "
           "of shared memory a consumer warpgroup); `tma`, the same blocks "
           "stored by TMA while the warpgroup goes on (`out` becomes a "
           "tensormap: rows 16-byte aligned; tile-n a multiple of 64 bf16 "
           "or 32 f32 columns). FP8 codes are staged under `staged` and "
           "`tma` alike (a 128-column block at a time; their 1x16 scales "
           "are stored directly, `out` stays a buffer)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"];
}

#endif // COAT_CONVERSION_PASSES_TD
