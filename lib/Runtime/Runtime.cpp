//===- Runtime.cpp - Load and launch COAT kernels with the CUDA driver API ===//
//
// Implements the C ABI of coat_runtime.h. Depends on the CUDA driver API only.
// Modules are loaded per CUDA context (the one current at launch), so one
// handle serves several devices.
//
//===----------------------------------------------------------------------===//

#include "coat/Runtime/coat_runtime.h"
#include "coat/Runtime/Manifest.h"

#include "ErrorBuffer.h"

#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>

using namespace coat::rt;

namespace {

/// A module image read at open time (cubin and/or PTX of one module).
struct Image {
  std::string cubinPath, ptxPath;
  std::string cubin, ptx; // file contents; ptx is NUL-terminated on use
};

struct LoadedModule {
  CUmodule module = nullptr;
  bool usedPtx = false;
};

std::string cuErr(CUresult r, const char *call) {
  const char *name = nullptr, *desc = nullptr;
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &desc);
  return std::string(call) + " failed: " + (name ? name : "CUDA error") + " (" +
         std::to_string(int(r)) + ")" + (desc ? std::string(": ") + desc : "");
}

} // namespace

struct coat_rt_handle {
  Manifest manifest;
  std::string path;
  std::map<std::string, Image> images; // key: cubin path + '|' + ptx path
  std::mutex mutex;
  std::map<std::pair<CUcontext, std::string>, LoadedModule> modules;
  std::map<std::pair<CUcontext, std::string>, CUfunction> functions;

  static std::string imageKey(const KernelSpec &k) { return k.cubin + "|" + k.ptx; }
  std::string resolve(const std::string &rel) const {
    if (rel.empty() || rel[0] == '/')
      return rel;
    return manifest.directory + "/" + rel;
  }
};

struct coat_rt_bound_launch {
  const coat::rt::KernelSpec *kernel = nullptr;
  CUcontext context = nullptr;
  CUfunction function = nullptr;
  coat::rt::PackedLaunch packed;
};

namespace {

int setError(char *errbuf, size_t errlen, int status, const std::string &msg) {
  return coat::rt::reportStatus(errbuf, errlen, status, msg);
}

int ok(char *errbuf, size_t errlen) {
  return coat::rt::reportStatus(errbuf, errlen, COAT_RT_OK, "");
}

/// Makes sure a context is current; retains device 0's primary context if not.
int ensureContext(CUcontext &ctx, std::string &error) {
  CUresult r = cuInit(0);
  if (r != CUDA_SUCCESS) {
    error = cuErr(r, "cuInit");
    return COAT_RT_ERR_CUDA;
  }
  r = cuCtxGetCurrent(&ctx);
  if (r != CUDA_SUCCESS) {
    error = cuErr(r, "cuCtxGetCurrent");
    return COAT_RT_ERR_CUDA;
  }
  if (ctx)
    return COAT_RT_OK;
  CUdevice dev;
  if ((r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS) {
    error = cuErr(r, "cuDeviceGet(0)");
    return COAT_RT_ERR_CUDA;
  }
  if ((r = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS) {
    error = cuErr(r, "cuDevicePrimaryCtxRetain");
    return COAT_RT_ERR_CUDA;
  }
  if ((r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) {
    error = cuErr(r, "cuCtxSetCurrent");
    return COAT_RT_ERR_CUDA;
  }
  return COAT_RT_OK;
}

/// Loads the image of `k` into `ctx`: the cubin first, the PTX (JIT) if the
/// cubin is absent or does not load (driver or architecture mismatch).
int loadModule(coat_rt_handle &h, CUcontext ctx, const KernelSpec &k,
               LoadedModule *&out, std::string &error) {
  auto key = std::make_pair(ctx, coat_rt_handle::imageKey(k));
  auto it = h.modules.find(key);
  if (it != h.modules.end()) {
    out = &it->second;
    return COAT_RT_OK;
  }
  Image &img = h.images.at(coat_rt_handle::imageKey(k));
  LoadedModule lm;
  std::string cubinError;
  if (!img.cubin.empty()) {
    CUresult r = cuModuleLoadData(&lm.module, img.cubin.data());
    if (r != CUDA_SUCCESS) {
      cubinError = cuErr(r, ("cuModuleLoadData(" + img.cubinPath + ")").c_str());
      lm.module = nullptr;
    }
  }
  if (!lm.module && !img.ptx.empty()) {
    char log[8192] = {0};
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER,
                           CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {log, reinterpret_cast<void *>(uintptr_t(sizeof log - 1))};
    CUresult r = cuModuleLoadDataEx(&lm.module, img.ptx.c_str(), 2, opts, vals);
    if (r != CUDA_SUCCESS) {
      error = (cubinError.empty() ? "" : cubinError + "; then ") +
              cuErr(r, ("cuModuleLoadDataEx(" + img.ptxPath + ")").c_str()) +
              (log[0] ? std::string("; JIT log: ") + log : "");
      return COAT_RT_ERR_CUDA;
    }
    lm.usedPtx = true;
  }
  if (!lm.module) {
    error = cubinError.empty()
                ? "kernel '" + k.name + "' has no GPU image (manifest gpu.cubin/gpu.ptx)"
                : cubinError + " and the manifest names no PTX to fall back to";
    return COAT_RT_ERR_CUDA;
  }
  out = &h.modules.emplace(key, lm).first->second;
  return COAT_RT_OK;
}

int getFunction(coat_rt_handle &h, const KernelSpec &k, CUfunction &fn,
                bool *usedPtx, std::string &error) {
  CUcontext ctx = nullptr;
  if (int st = ensureContext(ctx, error))
    return st;
  std::lock_guard<std::mutex> lock(h.mutex);
  auto fkey = std::make_pair(ctx, k.name);
  LoadedModule *lm = nullptr;
  auto fit = h.functions.find(fkey);
  if (fit != h.functions.end()) {
    fn = fit->second;
    if (usedPtx && loadModule(h, ctx, k, lm, error) == COAT_RT_OK)
      *usedPtx = lm->usedPtx;
    return COAT_RT_OK;
  }
  if (int st = loadModule(h, ctx, k, lm, error))
    return st;
  CUresult r = cuModuleGetFunction(&fn, lm->module, k.name.c_str());
  if (r != CUDA_SUCCESS) {
    error = cuErr(r, ("cuModuleGetFunction('" + k.name + "')").c_str());
    return COAT_RT_ERR_CUDA;
  }
  // More than 48 KiB of dynamic shared memory must be opted into.
  if (k.sharedBytes > 48 * 1024) {
    r = cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                           int(k.sharedBytes));
    if (r != CUDA_SUCCESS) {
      error = cuErr(r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
      return COAT_RT_ERR_CUDA;
    }
  }
  h.functions.emplace(fkey, fn);
  if (usedPtx)
    *usedPtx = lm->usedPtx;
  return COAT_RT_OK;
}

const KernelSpec *findKernel(coat_rt_handle *h, const char *name,
                             std::string &error) {
  if (!name) {
    error = "kernel name is null";
    return nullptr;
  }
  const KernelSpec *k = h->manifest.find(name);
  if (!k) {
    error = "no kernel named '" + std::string(name) + "' in " + h->path +
            " (it has:";
    for (const auto &kk : h->manifest.kernels)
      error += " " + kk.name;
    error += ")";
  }
  return k;
}

/// `kernel_name`'s spec in `h`, or the status and message of its absence.
int lookupKernel(coat_rt_handle *h, const char *kernel_name,
                 const KernelSpec *&k, std::string &error) {
  if (!h) {
    error = "null runtime handle";
    return COAT_RT_ERR_INVALID_VALUE;
  }
  k = findKernel(h, kernel_name, error);
  return k ? COAT_RT_OK : COAT_RT_ERR_NOT_FOUND;
}

int checkAndPack(coat_rt_handle *h, const char *kernel_name, int64_t n,
                 void *const *buffers, int nbuf, const double *scalars,
                 int nscalar, const KernelSpec *&k, PackedLaunch &packed,
                 std::string &error) {
  if (int st = lookupKernel(h, kernel_name, k, error))
    return st;
  if (nbuf > 0 && !buffers) {
    error = "kernel '" + k->name + "': buffer array is null";
    return COAT_RT_ERR_ARGUMENTS;
  }
  std::vector<uint64_t> addrs(nbuf > 0 ? size_t(nbuf) : 1, 0);
  for (int i = 0; i < nbuf; ++i)
    addrs[size_t(i)] = uint64_t(reinterpret_cast<uintptr_t>(buffers[i]));
  if (!packLaunch(*k, n, addrs.data(), nbuf, scalars, nscalar, packed, error))
    return COAT_RT_ERR_ARGUMENTS;
  return COAT_RT_OK;
}

/// Encodes the tensormap arguments of a packed launch (docs/manifest.md):
/// dense tiles, no interleave, 256-byte L2 promotion, out-of-bounds elements
/// read as zero.
int encodeTensorMap(PackedLaunch &packed, size_t i, std::string &error) {
  const TensorMapRequest &t = packed.tensorMaps[i];
  CUtensorMapDataType dt;
  if (t.dtype == "e4m3" || t.dtype == "e5m2")
    dt = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  else if (t.dtype == "bf16")
    dt = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  else if (t.dtype == "f16")
    dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  else if (t.dtype == "f32")
    dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  else if (t.dtype == "i32")
    dt = CU_TENSOR_MAP_DATA_TYPE_INT32;
  else {
    error = "tensormap '" + t.name + "': unsupported dtype " + t.dtype;
    return COAT_RT_ERR_ARGUMENTS;
  }
  CUtensorMapSwizzle sw = t.swizzle == "128b"  ? CU_TENSOR_MAP_SWIZZLE_128B
                          : t.swizzle == "64b" ? CU_TENSOR_MAP_SWIZZLE_64B
                          : t.swizzle == "32b" ? CU_TENSOR_MAP_SWIZZLE_32B
                                               : CU_TENSOR_MAP_SWIZZLE_NONE;
  cuuint64_t dims[5], strides[5];
  cuuint32_t box[5], elementStrides[5];
  cuuint32_t rank = cuuint32_t(t.dims.size());
  for (cuuint32_t d = 0; d < rank; ++d) {
    dims[d] = t.dims[d];
    box[d] = t.box[d];
    elementStrides[d] = 1;
    if (d + 1 < rank)
      strides[d] = t.strides[d];
  }
  CUresult r = cuTensorMapEncodeTiled(
      reinterpret_cast<CUtensorMap *>(packed.tensorMapStorage[i].bytes), dt, rank,
      reinterpret_cast<void *>(uintptr_t(t.address)), dims, strides, box,
      elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    error = "tensormap '" + t.name + "': " + cuErr(r, "cuTensorMapEncodeTiled");
    return COAT_RT_ERR_CUDA;
  }
  return COAT_RT_OK;
}

int encodeTensorMaps(PackedLaunch &packed, std::string &error) {
  for (size_t i = 0; i < packed.tensorMaps.size(); ++i)
    if (int st = encodeTensorMap(packed, i, error))
      return st;
  return COAT_RT_OK;
}

/// A persistent kernel gets one CTA per multiprocessor at most; it strides
/// over the tiles.
int limitPersistentGrid(const KernelSpec &k, PackedLaunch &packed,
                        std::string &error) {
  if (!k.persistent)
    return COAT_RT_OK;
  CUdevice dev;
  int sms = 0;
  CUresult q = cuCtxGetDevice(&dev);
  if (q == CUDA_SUCCESS)
    q = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  if (q != CUDA_SUCCESS) {
    error = cuErr(q, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
    return COAT_RT_ERR_CUDA;
  }
  uint64_t tiles = uint64_t(packed.grid[0]) * packed.grid[1] * packed.grid[2];
  packed.grid = {unsigned(std::min<uint64_t>(tiles, uint64_t(sms))), 1, 1};
  return COAT_RT_OK;
}

/// What a packed launch of `k` needs before cuLaunchKernel: its GPU image,
/// its function in the current context, its tensormaps encoded and a
/// persistent kernel's grid. Errors name the kernel.
int readyPacked(coat_rt_handle &h, const KernelSpec &k, PackedLaunch &packed,
                CUfunction &fn, std::string &error) {
  if (!h.images.count(coat_rt_handle::imageKey(k))) {
    error = "kernel '" + k.name + "' has no GPU image in the manifest";
    return COAT_RT_ERR_NOT_FOUND;
  }
  int st = getFunction(h, k, fn, nullptr, error);
  if (!st)
    st = encodeTensorMaps(packed, error);
  if (!st)
    st = limitPersistentGrid(k, packed, error);
  if (st)
    error = "kernel '" + k.name + "': " + error;
  return st;
}

int launchPacked(const KernelSpec &k, CUfunction fn, PackedLaunch &packed,
                 void *stream, std::string &error) {
  CUresult r = cuLaunchKernel(fn, packed.grid[0], packed.grid[1], packed.grid[2],
                              packed.block[0], packed.block[1], packed.block[2],
                              packed.sharedBytes, static_cast<CUstream>(stream),
                              packed.params.data(), nullptr);
  if (r == CUDA_SUCCESS)
    return COAT_RT_OK;
  error = "kernel '" + k.name + "' (grid " + std::to_string(packed.grid[0]) +
          ", block " + std::to_string(packed.block[0]) + "x" +
          std::to_string(packed.block[1]) + "x" + std::to_string(packed.block[2]) +
          "): " + cuErr(r, "cuLaunchKernel");
  return COAT_RT_ERR_CUDA;
}

} // namespace

extern "C" {

int coat_rt_abi_version(void) { return COAT_RT_ABI_VERSION; }

const char *coat_rt_status_name(int status) {
  switch (status) {
  case COAT_RT_OK: return "COAT_RT_OK";
  case COAT_RT_ERR_INVALID_VALUE: return "COAT_RT_ERR_INVALID_VALUE";
  case COAT_RT_ERR_IO: return "COAT_RT_ERR_IO";
  case COAT_RT_ERR_MANIFEST: return "COAT_RT_ERR_MANIFEST";
  case COAT_RT_ERR_NOT_FOUND: return "COAT_RT_ERR_NOT_FOUND";
  case COAT_RT_ERR_ARGUMENTS: return "COAT_RT_ERR_ARGUMENTS";
  case COAT_RT_ERR_CUDA: return "COAT_RT_ERR_CUDA";
  default: return "COAT_RT_UNKNOWN_STATUS";
  }
}

int coat_rt_open(const char *manifest_path, coat_rt_handle **out_handle,
                 char *errbuf, size_t errlen) {
  if (!manifest_path || !out_handle)
    return setError(errbuf, errlen, COAT_RT_ERR_INVALID_VALUE,
                    "coat_rt_open: null manifest path or handle pointer");
  *out_handle = nullptr;
  std::unique_ptr<coat_rt_handle> h(new (std::nothrow) coat_rt_handle());
  if (!h)
    return setError(errbuf, errlen, COAT_RT_ERR_INVALID_VALUE, "out of memory");
  h->path = manifest_path;
  std::string error, text;
  if (!readFile(manifest_path, text, error))
    return setError(errbuf, errlen, COAT_RT_ERR_IO, error);
  {
    std::string dir = ".";
    std::string p = manifest_path;
    size_t slash = p.find_last_of('/');
    if (slash != std::string::npos)
      dir = slash == 0 ? "/" : p.substr(0, slash);
    if (!parseManifest(text, dir, h->manifest, error))
      return setError(errbuf, errlen, COAT_RT_ERR_MANIFEST,
                      std::string(manifest_path) + ": " + error);
  }
  for (const auto &k : h->manifest.kernels) {
    std::string key = coat_rt_handle::imageKey(k);
    if (h->images.count(key) || (k.cubin.empty() && k.ptx.empty()))
      continue; // kernels without a GPU image fail only when launched
    Image img;
    img.cubinPath = h->resolve(k.cubin);
    img.ptxPath = h->resolve(k.ptx);
    std::string cubinErr, ptxErr;
    bool haveCubin = !k.cubin.empty() && readFile(img.cubinPath, img.cubin, cubinErr);
    bool havePtx = !k.ptx.empty() && readFile(img.ptxPath, img.ptx, ptxErr);
    if (!haveCubin && !havePtx)
      return setError(errbuf, errlen, COAT_RT_ERR_IO,
                      "kernel '" + k.name + "': " +
                          (cubinErr.empty() ? "" : cubinErr) +
                          (!cubinErr.empty() && !ptxErr.empty() ? "; " : "") +
                          (ptxErr.empty() ? "" : ptxErr));
    h->images.emplace(key, std::move(img));
  }
  *out_handle = h.release();
  return ok(errbuf, errlen);
}

namespace {
/// The body of coat_rt_prepare: `kernel_name`'s spec and its function in the
/// current context. Errors name the kernel.
int prepareFunction(coat_rt_handle *handle, const char *kernel_name,
                    const KernelSpec *&k, CUfunction &fn, bool *usedPtx,
                    std::string &error) {
  if (int st = lookupKernel(handle, kernel_name, k, error))
    return st;
  if (!handle->images.count(coat_rt_handle::imageKey(*k))) {
    error = "kernel '" + k->name + "' has no GPU image in the manifest";
    return COAT_RT_ERR_NOT_FOUND;
  }
  if (int st = getFunction(*handle, *k, fn, usedPtx, error)) {
    error = "kernel '" + k->name + "': " + error;
    return st;
  }
  return COAT_RT_OK;
}
} // namespace

int coat_rt_prepare(coat_rt_handle *handle, const char *kernel_name,
                    int *used_ptx, char *errbuf, size_t errlen) {
  const KernelSpec *k = nullptr;
  CUfunction fn;
  bool ptx = false;
  std::string error;
  if (int st = prepareFunction(handle, kernel_name, k, fn, &ptx, error))
    return setError(errbuf, errlen, st, error);
  if (used_ptx)
    *used_ptx = ptx ? 1 : 0;
  return ok(errbuf, errlen);
}

int coat_rt_resident_blocks(coat_rt_handle *handle, const char *kernel_name,
                            int64_t *out_blocks, char *errbuf, size_t errlen) {
  if (!out_blocks)
    return setError(errbuf, errlen, COAT_RT_ERR_INVALID_VALUE,
                    "null out_blocks");
  const KernelSpec *k = nullptr;
  CUfunction fn;
  std::string error;
  if (int st = prepareFunction(handle, kernel_name, k, fn, nullptr, error))
    return setError(errbuf, errlen, st, error);
  int perSm = 0, sms = 0;
  CUdevice dev;
  const char *call = "cuOccupancyMaxActiveBlocksPerMultiprocessor";
  CUresult r = cuOccupancyMaxActiveBlocksPerMultiprocessor(
      &perSm, fn, int(k->block[0] * k->block[1] * k->block[2]),
      size_t(k->sharedBytes));
  if (r == CUDA_SUCCESS) {
    call = "cuCtxGetDevice";
    r = cuCtxGetDevice(&dev);
  }
  if (r == CUDA_SUCCESS) {
    call = "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)";
    r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                             dev);
  }
  if (r != CUDA_SUCCESS)
    return setError(errbuf, errlen, COAT_RT_ERR_CUDA,
                    "kernel '" + k->name + "': " + cuErr(r, call));
  *out_blocks = int64_t(perSm) * sms;
  return ok(errbuf, errlen);
}

int coat_rt_check_launch(coat_rt_handle *handle, const char *kernel_name,
                         int64_t n, void *const *buffers, int nbuf,
                         const double *scalars, int nscalar, char *errbuf,
                         size_t errlen) {
  const KernelSpec *k = nullptr;
  PackedLaunch packed;
  std::string error;
  if (int st = checkAndPack(handle, kernel_name, n, buffers, nbuf, scalars,
                            nscalar, k, packed, error))
    return setError(errbuf, errlen, st, error);
  return ok(errbuf, errlen);
}

int coat_rt_launch(coat_rt_handle *handle, const char *kernel_name, int64_t n,
                   void *const *buffers, int nbuf, const double *scalars,
                   int nscalar, void *stream, char *errbuf, size_t errlen) {
  const KernelSpec *k = nullptr;
  PackedLaunch packed;
  std::string error;
  if (int st = checkAndPack(handle, kernel_name, n, buffers, nbuf, scalars,
                            nscalar, k, packed, error))
    return setError(errbuf, errlen, st, error);
  if (packed.grid[0] == 0)
    return ok(errbuf, errlen); // n == 0: nothing to do
  CUfunction fn;
  if (int st = readyPacked(*handle, *k, packed, fn, error))
    return setError(errbuf, errlen, st, error);
  if (int st = launchPacked(*k, fn, packed, stream, error))
    return setError(errbuf, errlen, st, error);
  return ok(errbuf, errlen);
}

int coat_rt_bind_launch(coat_rt_handle *handle, const char *kernel_name,
                        int64_t n, void *const *buffers, int nbuf,
                        const double *scalars, int nscalar,
                        coat_rt_bound_launch **out, char *errbuf, size_t errlen) {
  if (!out)
    return setError(errbuf, errlen, COAT_RT_ERR_INVALID_VALUE,
                    "out pointer is null");
  *out = nullptr;
  auto bound = std::make_unique<coat_rt_bound_launch>();
  std::string error;
  if (int st = checkAndPack(handle, kernel_name, n, buffers, nbuf, scalars,
                            nscalar, bound->kernel, bound->packed, error))
    return setError(errbuf, errlen, st, error);
  const KernelSpec &k = *bound->kernel;
  if (bound->packed.grid[0] != 0) {
    if (int st = readyPacked(*handle, k, bound->packed, bound->function, error))
      return setError(errbuf, errlen, st, error);
    // getFunction made a context current if there was none.
    if (cuCtxGetCurrent(&bound->context) != CUDA_SUCCESS || !bound->context)
      return setError(errbuf, errlen, COAT_RT_ERR_CUDA,
                      "kernel '" + k.name + "': no current CUDA context");
  }
  *out = bound.release();
  return ok(errbuf, errlen);
}

int coat_rt_launch_bound(coat_rt_bound_launch *bound, void *const *buffers,
                         int nbuf, void *stream, char *errbuf, size_t errlen) {
  if (!bound)
    return setError(errbuf, errlen, COAT_RT_ERR_INVALID_VALUE,
                    "bound launch is null");
  const KernelSpec &k = *bound->kernel;
  PackedLaunch &packed = bound->packed;
  if (packed.grid[0] == 0)
    return ok(errbuf, errlen); // n == 0: nothing to do
  if (nbuf < 0 || size_t(nbuf) != packed.bufferSlots.size() ||
      (nbuf > 0 && !buffers))
    return setError(errbuf, errlen, COAT_RT_ERR_ARGUMENTS,
                    "kernel '" + k.name + "': expected " +
                        std::to_string(packed.bufferSlots.size()) +
                        " buffer pointers, got " + std::to_string(nbuf));
  // A thread with no current context gets device 0's primary one, as in
  // coat_rt_launch.
  std::string error;
  CUcontext ctx = nullptr;
  if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
    if (int st = ensureContext(ctx, error))
      return setError(errbuf, errlen, st, "kernel '" + k.name + "': " + error);
  if (ctx != bound->context)
    return setError(errbuf, errlen, COAT_RT_ERR_CUDA,
                    "kernel '" + k.name +
                        "': the current CUDA context is not the one the launch "
                        "was bound in");
  for (size_t i = 0; i < packed.bufferSlots.size(); ++i) {
    uint64_t ptr = uint64_t(reinterpret_cast<uintptr_t>(buffers[i]));
    long slot = packed.bufferSlots[i];
    bool needed = slot < 0 || packed.storage[size_t(slot) + 3] != 0;
    if ((needed && ptr == 0) || ptr % kBufferAlignment != 0)
      return setError(errbuf, errlen, COAT_RT_ERR_ARGUMENTS,
                      "kernel '" + k.name + "': buffer " + std::to_string(i) +
                          " is null or not " + std::to_string(kBufferAlignment) +
                          "-byte aligned");
    if (slot >= 0) {
      packed.storage[size_t(slot)] = ptr;     // allocated
      packed.storage[size_t(slot) + 1] = ptr; // aligned
      continue;
    }
    size_t map = size_t(-1 - slot);
    if (packed.tensorMaps[map].address == ptr)
      continue;
    packed.tensorMaps[map].address = ptr;
    if (int st = encodeTensorMap(packed, map, error))
      return setError(errbuf, errlen, st, "kernel '" + k.name + "': " + error);
  }
  if (int st = launchPacked(k, bound->function, packed, stream, error))
    return setError(errbuf, errlen, st, error);
  return ok(errbuf, errlen);
}

void coat_rt_free_bound(coat_rt_bound_launch *bound) { delete bound; }

int coat_rt_num_kernels(const coat_rt_handle *handle) {
  return handle ? int(handle->manifest.kernels.size()) : 0;
}

const char *coat_rt_kernel_name(const coat_rt_handle *handle, int index) {
  if (!handle || index < 0 || size_t(index) >= handle->manifest.kernels.size())
    return nullptr;
  return handle->manifest.kernels[size_t(index)].name.c_str();
}

void coat_rt_close(coat_rt_handle *handle) {
  if (!handle)
    return;
  // Unload each module in the context it was loaded into, if that context is
  // still alive; a destroyed context already freed its modules.
  CUcontext prev = nullptr;
  cuCtxGetCurrent(&prev);
  for (auto &kv : handle->modules) {
    unsigned version = 0;
    if (cuCtxGetApiVersion(kv.first.first, &version) != CUDA_SUCCESS)
      continue;
    if (cuCtxSetCurrent(kv.first.first) == CUDA_SUCCESS)
      cuModuleUnload(kv.second.module);
  }
  if (!handle->modules.empty())
    cuCtxSetCurrent(prev);
  delete handle;
}

} // extern "C"
