#!/usr/bin/env python3
"""Trains a Hugging Face ``transformers`` model with the ``Trainer``, in BF16
or converted by COAT, on byte-level tokens of the Python standard library's
sources (examples/train_llama.py's corpus, seed and held-out split):

  bf16   the model as built, Trainer(bf16=True): autocast, torch's fused AdamW
  coat   coat.convert(model) + coat.optim.FP8AdamW passed to the Trainer

(--optim picks either optimizer for either mode; the parameter groups are
the same: weight decay on matrices only).

Both clip the global gradient norm to 1.0. The Trainer's own clipping is
torch's clip_grad_norm_, which rewrites every gradient right before the
optimizer step; with FP8AdamW the Trainer's is turned off and a callback
calls FP8AdamW.clip_grad_norm_ instead, whose factor the optimizer step's
kernels apply as they load the gradients (on transformers without the
on_pre_optimizer_step callback the Trainer keeps clipping).

  python examples/train_hf.py --mode coat --family llama --steps 300 --log coat.json
  python examples/train_hf.py --mode bf16 --family llama --steps 300 --log bf16.json

The model is built from a config (random weights, nothing downloaded): one
of examples/train_llama.py's --size configs (100m: hidden 1024, 8 layers, 16
heads, FFN 2816, byte vocabulary) as a --family (llama, mistral, qwen3,
olmo2) model. Converting takes two lines:

    coat.convert(model)
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      optimizers=(coat.optim.FP8AdamW(model.parameters(), lr=...), None))

Prints the Trainer's log, then a record (held-out loss, step time over the
steps after --warmup-timing, peak memory, tokens/s), also written to --log.
coat mode needs the layer's compiled programs (scripts/compile_model.py
--hf-config, where LLVM is; found through $COAT_KERNELS) and FP8AdamW's
kernel (scripts/demo.sh's build/demo).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from train_llama import CLIP_NORM, CONFIGS, corpus  # noqa: E402

FAMILIES = ("llama", "mistral", "qwen3", "olmo2")


def model_config(family: str, size: str, seq: int):
    """train_llama.py's config ``size`` as a transformers config of ``family``."""
    import transformers

    c = CONFIGS[size]
    return transformers.AutoConfig.for_model(
        family, vocab_size=c.vocab, hidden_size=c.hidden, intermediate_size=c.ffn,
        num_hidden_layers=c.layers, num_attention_heads=c.heads,
        num_key_value_heads=c.kv_heads, rms_norm_eps=c.eps,
        hidden_act="silu", max_position_embeddings=seq, tie_word_embeddings=False,
        use_cache=False)


class Windows(torch.utils.data.Dataset):
    """Seeded random windows of ``seq`` + 1 bytes (input and next-byte labels)."""

    def __init__(self, data: torch.Tensor, seq: int, count: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.data, self.seq = data, seq
        self.starts = torch.randint(0, data.numel() - seq - 1, (count,), generator=g).tolist()

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        s = self.starts[i]
        ids = self.data[s:s + self.seq].long()
        return {"input_ids": ids, "labels": ids}


def step_timer(warmup: int):
    import transformers

    class StepTimer(transformers.TrainerCallback):
        """Wall time of the steps after the first `warmup` (synchronised)."""

        def __init__(self):
            self.times, self._t = [], None

        def on_step_begin(self, args, state, control, **kw):
            torch.cuda.synchronize()
            self._t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            torch.cuda.synchronize()
            if state.global_step > warmup:
                self.times.append(time.perf_counter() - self._t)

    return StepTimer()


def fused_clipping(opt, max_norm: float):
    """A Trainer callback that clips with FP8AdamW.clip_grad_norm_ right
    before each optimizer step (after the last micro-batch of an
    accumulation), keeping the norms it returns; None where this
    transformers has no such callback event."""
    import transformers

    if not hasattr(transformers.TrainerCallback, "on_pre_optimizer_step"):
        return None

    class FusedClip(transformers.TrainerCallback):
        def __init__(self):
            self.norms = []  # device tensors: no synchronisation per step

        def on_pre_optimizer_step(self, args, state, control, **kw):
            self.norms.append(opt.clip_grad_norm_(max_norm))

    return FusedClip()


def train(args) -> dict:
    import transformers

    torch.manual_seed(args.seed)
    cfg = model_config(args.family, args.size, args.seq)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to("cuda")
    train_bytes, held_bytes = corpus(args.data)
    train_set = Windows(train_bytes, args.seq, args.steps * args.batch, args.seed)
    held_set = Windows(held_bytes, args.seq, args.eval_batches * args.batch, args.seed + 1)
    if args.mode == "coat":
        import coat

        coat.convert(model, kernels=args.kernels)
        print(model.coat_report)
    # One parameter grouping for both optimizers: no decay on norms.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
    optim = args.optim or ("fp8adamw" if args.mode == "coat" else "adamw")
    clip = None
    if optim == "fp8adamw":
        import coat

        opt = coat.optim.FP8AdamW(groups, lr=args.lr, betas=(0.9, 0.95))
        clip = fused_clipping(opt, CLIP_NORM)
    else:
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), fused=True)
    targs = transformers.TrainingArguments(
        output_dir=args.out, per_device_train_batch_size=args.batch,
        per_device_eval_batch_size=args.batch, max_steps=args.steps, learning_rate=args.lr,
        lr_scheduler_type="cosine", warmup_steps=args.warmup, weight_decay=0.1,
        adam_beta1=0.9, adam_beta2=0.95, max_grad_norm=0.0 if clip else CLIP_NORM, bf16=True,
        logging_steps=args.log_every, save_strategy="no", report_to=[], seed=args.seed,
        dataloader_drop_last=True)
    timer = step_timer(args.warmup_timing)
    trainer = transformers.Trainer(model=model, args=targs, train_dataset=train_set,
                                   eval_dataset=held_set, optimizers=(opt, None),
                                   callbacks=[timer] + ([clip] if clip else []))
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    peak = torch.cuda.max_memory_allocated()
    held = trainer.evaluate()["eval_loss"]
    step = sorted(timer.times)[len(timer.times) // 2] if timer.times else float("nan")
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"mode": args.mode, "optimizer": optim, "family": args.family, "size": args.size,
            "steps": args.steps, "batch": args.batch, "seq": args.seq,
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": transformers.__version__,
            "train_loss_last": losses[-1] if losses else None, "train_losses": losses,
            "clip": f"{'FP8AdamW.clip_grad_norm_' if clip else 'Trainer'} {CLIP_NORM}",
            "grad_norms": [float(n) for n in clip.norms] if clip else None,
            "held_out_loss": held, "held_out_bits_per_byte": held / math.log(2),
            "median_step_s": step, "tokens_per_s": args.batch * args.seq / step,
            "peak_memory_gib": peak / 2 ** 30}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("bf16", "coat"), default="coat")
    ap.add_argument("--optim", choices=("adamw", "fp8adamw"), default=None,
                    help="default: fp8adamw for coat, torch's fused AdamW for bf16")
    ap.add_argument("--family", choices=FAMILIES, default="llama")
    ap.add_argument("--size", choices=sorted(CONFIGS), default="100m")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--warmup-timing", type=int, default=20)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=None, help="a folder of .py files (default: the stdlib)")
    ap.add_argument("--kernels", default=None, help="folder of compiled layer programs")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "coat-train-hf"))
    ap.add_argument("--log", default=None, help="write the run's JSON record here")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("train_hf.py needs a CUDA GPU", file=sys.stderr)
        return 2
    record = train(args)
    summary = {k: v for k, v in record.items() if k not in ("train_losses", "grad_norms")}
    print(json.dumps(summary, indent=1))
    if args.log:
        Path(args.log).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
