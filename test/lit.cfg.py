# -*- Python -*-
import os
import shutil

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "COAT"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.coat_obj_root, "test")

config.substitutions.append(("%shlibext", config.llvm_shlib_ext))
config.substitutions.append(
    ("%coat_plugin", os.path.join(config.coat_lib_dir, "CoatPlugin.so")))
config.substitutions.append(("%coat_src", config.coat_src_root))
config.substitutions.insert(0, ("%python", config.python_executable))

# An ASan-instrumented plugin cannot be dlopen'ed by the uninstrumented
# stock mlir-opt; plugin tests say `UNSUPPORTED: sanitizers`.
if getattr(config, "coat_sanitizers", False):
    config.available_features.add("sanitizers")
    # The tools are instrumented but the prebuilt libMLIR.so is not: inline
    # LLVM allocator code in our binaries poisons memory that the library then
    # uses legitimately, so manual poisoning and container annotations would
    # report false positives. Real out-of-bounds accesses are still caught.
    config.environment["ASAN_OPTIONS"] = (
        "allow_user_poisoning=0:detect_container_overflow=0")
    config.environment["UBSAN_OPTIONS"] = "print_stacktrace=1"

llvm_config.with_system_environment(
    ["HOME", "TMP", "TEMP", "CUDA_HOME", "CUDA_ROOT", "CUDA_PATH"])
llvm_config.use_default_substitutions()
# `not`, `count` etc. anywhere in a RUN line (not only after a pipe).
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

# coat-opt from the build; mlir-opt, mlir-runner etc. are the stock ones.
tools = [
    ToolSubst("coat-opt", unresolved="fatal"),
    ToolSubst("mlir-opt", unresolved="fatal"),
    ToolSubst("mlir-translate", unresolved="ignore"),
    ToolSubst("mlir-runner", unresolved="ignore"),
]
llvm_config.add_tool_substitutions(
    tools, [config.coat_tools_dir, config.llvm_tools_dir])

# ptxas: needed to turn PTX into a cubin.
ptxas = shutil.which("ptxas")
for root in ("CUDA_HOME", "CUDA_ROOT", "CUDA_PATH"):
    if ptxas:
        break
    if os.environ.get(root):
        cand = os.path.join(os.environ[root], "bin", "ptxas")
        if os.path.exists(cand):
            ptxas = cand
if not ptxas and os.path.exists("/usr/local/cuda/bin/ptxas"):
    ptxas = "/usr/local/cuda/bin/ptxas"
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%cuda_toolkit", os.path.dirname(os.path.dirname(ptxas))))
