"""Shared fixtures of the Python tests. Kernel-dependent tests look for
compiled modules (scripts/demo.sh writes them under build/demo) and skip with
a reason when there are none."""

import importlib
import os
import shutil
import subprocess
import sys
import types

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

FIXTURES = os.path.join(HERE, "fixtures")


def example_function(path: str, name: str) -> str:
    """The text of function @``name`` of the example module at ``path``: one
    kernel of an example, for tests of the compile path that need a real
    module but not all of its kernels (a whole example takes tens of
    seconds to compile on CI's cores)."""
    with open(path) as f:
        text = f.read()
    start = text.index(f"func.func @{name}(")
    return text[start:text.index("\n}\n", start) + 3]


@pytest.fixture
def fixture_module_dir(tmp_path):
    """A copy of fixtures/small_manifest.json as <tmp>/manifest.json, with the
    CPU twin compiled to fixture.cpu.o (PIC) next to it."""
    from coat import _paths

    cc = _paths.find_linker()
    if cc is None:
        pytest.skip("no C compiler to build the CPU-twin fixture")
    shutil.copy(os.path.join(FIXTURES, "small_manifest.json"), tmp_path / "manifest.json")
    subprocess.run([cc, "-c", "-fPIC", "-O1", "-o", str(tmp_path / "fixture.cpu.o"),
                    os.path.join(FIXTURES, "axpy_twin.c")], check=True)
    return tmp_path


def torch_or_skip():
    return pytest.importorskip("torch", reason="torch is not installed")


def fsdp2_missing():
    """Why FSDP2 cannot run with this torch (a skip reason), or None."""
    import torch

    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
        from torch.distributed.tensor import DTensor  # noqa: F401
        importlib.import_module("torch.distributed.checkpoint.state_dict")
    except Exception as e:  # ImportError, or torch 1.13's ValueError on Python 3.11
        return f"needs FSDP2 (torch.distributed.fsdp.fully_shard, torch >= 2.6); torch " \
               f"{torch.__version__} lacks it ({e})"
    if not torch.distributed.is_available():
        return "torch.distributed is not available"
    return None


def adamw_kernels_missing():
    """Why no FP8AdamW step can run (no compiled adamw_step kernels), or None."""
    from coat import artifacts

    if any(m.find(op="adamw_step") for m in artifacts.modules()):
        return None
    return "no compiled adamw_step kernels: run scripts/demo.sh (writes build/demo) or set " \
           "COAT_KERNELS"


def skip_unless_fsdp_runs(device, world):
    """Skips unless FSDP2, FP8AdamW's kernels and ``world`` ranks on
    ``device`` are there: as many Hopper GPUs with NCCL, or gloo."""
    import torch

    reason = fsdp2_missing() or adamw_kernels_missing()
    if reason:
        pytest.skip(reason)
    if device == "cuda":
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < world:
            pytest.skip(f"world size {world} on GPUs needs {world} CUDA devices, found {have}")
        if torch.cuda.get_device_capability() < (9, 0):
            pytest.skip("needs a Hopper GPU (sm_90a)")
        if not torch.distributed.is_nccl_available():
            pytest.skip("NCCL is not available in this torch")
    elif not torch.distributed.is_gloo_available():
        pytest.skip("gloo is not available in this torch")


@pytest.fixture(scope="module")
def cpu_cache(tmp_path_factory):
    """A fresh kernel cache (COAT_KERNEL_CACHE) for the module's tests, where
    coat.nn compiles the programs it needs with coat-opt; skips without it."""
    from coat import _paths

    if not _paths.find_coat_opt():
        pytest.skip("coat-opt is not built")
    old = os.environ.get("COAT_KERNEL_CACHE")
    os.environ["COAT_KERNEL_CACHE"] = str(tmp_path_factory.mktemp("kernels"))
    yield
    if old is None:
        os.environ.pop("COAT_KERNEL_CACHE")
    else:
        os.environ["COAT_KERNEL_CACHE"] = old


def captured_and_eager_steps(module, call, x, dy, replays=1):
    """Captures ``call(x).backward(dy)`` with coat.nn.capture_step, copies new
    random data into x and dy and replays it `replays` times, then runs the
    same step eagerly on that data. Returns the names (output, dx, then the
    module's parameters), the results of each replay and the eager results,
    each a list of [output, x.grad, *parameter grads] in that order."""
    import torch

    import coat.nn as cnn

    names = ["output", "dx", *[n for n, _ in module.named_parameters()]]
    params = list(module.parameters())

    def step():
        y = call(x)
        y.backward(dy)
        return y

    graphed = cnn.capture_step(step, reset_grads=[x, *params])
    x_new, dy_new = torch.randn_like(x), torch.randn_like(dy)
    with torch.no_grad():
        x.copy_(x_new)
    dy.copy_(dy_new)
    replayed = []
    for _ in range(replays):
        y = graphed.replay()
        torch.cuda.synchronize()
        replayed.append([y.detach().clone(), x.grad.clone(),
                         *[p.grad.clone() for p in params]])
    x_eager = x_new.clone().requires_grad_()
    for p in params:
        p.grad = None
    y_eager = call(x_eager)
    y_eager.backward(dy_new)
    eager = [y_eager.detach(), x_eager.grad, *[p.grad for p in params]]
    return names, replayed, eager, graphed


@pytest.fixture
def hf_attention_dispatch(monkeypatch):
    """transformers' attention dispatch, or where transformers is absent a
    stand-in of it that gives the family's eager function for "eager"
    (the CPU tests of converted Hugging Face layers use it)."""
    try:
        importlib.import_module("transformers.modeling_utils")
    except Exception:  # noqa: BLE001
        class Dispatch:
            @staticmethod
            def get_interface(implementation, default):
                assert implementation == "eager", implementation
                return default

        package = types.ModuleType("transformers")
        utils = types.ModuleType("transformers.modeling_utils")
        utils.ALL_ATTENTION_FUNCTIONS = Dispatch()
        package.modeling_utils = utils
        monkeypatch.setitem(sys.modules, "transformers", package)
        monkeypatch.setitem(sys.modules, "transformers.modeling_utils", utils)
