#!/usr/bin/env python3
"""Compiles the kernel set of a model config ahead of time (where LLVM is),
for coat.nn on a GPU host without it:

  .venv/bin/python scripts/compile_model.py --hidden 1024 --ffn 2816 --out DIR
  .venv/bin/python scripts/compile_model.py --hidden 1024 --ffn 2816 --heads 16 --out DIR

writes DIR/<program name>/ (or <program name>-<hash> for a second config of
the same name, e.g. another eps) (PTX, cubin, CPU twins, manifest.json with the
program's launch plan) for the MLP block, and with --heads for the whole
decoder layer (attention input and output programs too; the attention input
rotates q and k itself where the head size allows, as coat.nn.DecoderLayer
decides; --rope on/off forces it; --recompute-attention-inputs also compiles
the attention input program that gives its q/k/v projection again in the
backward, for DecoderLayer(recompute_attention_inputs=True); the attention
output program that reads attention's kept output, name ending in _kc, for
DecoderLayer(reuse_attention_output=True), is always compiled;
--keep-gemm-operands also compiles the programs that keep their backward
GEMMs' FP8 operands from the forward, names ending in _kg, for
coat.convert(keep_gemm_operands=True)), and with --vocab
the LM head's loss (coat.cross_entropy, which coat.nn.linear_cross_entropy and
a converted coat.llama model run; the 1B/7B Llama sets: --vocab 32000). With
--hf-config, the programs of a Hugging Face model's decoder layers, read from
its config.json (or a JSON object of several named configs), and the loss
program of each config's vocab_size:

  .venv/bin/python scripts/compile_model.py --hf-config config.json --out DIR

Put DIR on
COAT_KERNELS there (coat.nn searches its sub-folders), or pass a folder as
MLPBlock(..., kernels=...).
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from coat import programs, toolchain  # noqa: E402


def hf_configs(path: str, ap: argparse.ArgumentParser, keep_gemm_operands: bool = False):
    """The program configs of the decoder layers of the config(s) in
    ``path``: one config.json, or an object whose values are configs (keys
    starting with "_" are comments); with ``keep_gemm_operands`` also the
    variants that keep their backward GEMMs' operands. Returns them and
    the programs as ``keep_gemm_operands`` chooses them (what
    --report-tokens sums)."""
    from coat.hf.families import UnsupportedLayer, spec_from_config
    from coat.hf.layer import layer_programs

    with open(path) as f:
        data = json.load(f)
    named = {"": data} if "model_type" in data else {
        k: v for k, v in data.items() if not k.startswith("_")}
    out, chosen = [], []
    for name, cfg in named.items():
        try:
            spec = spec_from_config(cfg)
            out += layer_programs(spec)
            chosen += layer_programs(spec, keep_gemm_operands)
            out += [c for c in chosen if c not in out]
        except UnsupportedLayer as e:
            ap.error(f"{path}{' ' + name if name else ''}: {e}")
        if cfg.get("vocab_size"):  # the LM head's loss (coat.nn.linear_cross_entropy)
            out.append(programs.CrossEntropyConfig(int(cfg["vocab_size"])))
            chosen.append(out[-1])
    return out, chosen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--ffn", type=int)
    ap.add_argument("--hf-config", default=None, metavar="JSON",
                    help="a transformers config.json, or an object of named configs")
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--heads", type=int, default=None,
                    help="also the attention programs of a decoder layer")
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--rope", choices=("auto", "on", "off"), default="auto",
                    help="with --heads: whether the attention input program applies RoPE to "
                         "q and k (auto: where the head size allows, as coat.nn.DecoderLayer "
                         "does)")
    ap.add_argument("--vocab", type=int, default=None,
                    help="also the LM head's loss program (coat.cross_entropy of this "
                         "vocabulary: coat.nn.linear_cross_entropy, a converted "
                         "coat.llama model's loss)")
    ap.add_argument("--recompute-attention-inputs", action="store_true",
                    help="with --heads: also the attention input program marked to give its "
                         "q/k/v projection again in the backward (name ending in _rc), for "
                         "coat.nn.DecoderLayer(recompute_attention_inputs=True)")
    ap.add_argument("--keep-gemm-operands", action="store_true",
                    help="also the programs that keep their backward GEMMs' per-tensor FP8 "
                         "operands from the forward instead of deriving them again (names "
                         "ending in _kg), for coat.convert(keep_gemm_operands=True)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--coat-opt", default=None)
    ap.add_argument("--report-tokens", type=int, default=None, metavar="N",
                    help="also print what each program keeps from its forward for its "
                         "backward at N tokens (coat-report-saved-activations), and the sum")
    args = ap.parse_args()
    if args.report_tokens is not None and args.report_tokens <= 0:
        ap.error("--report-tokens must be positive")
    if args.rope != "auto" and not args.heads:
        ap.error("--rope needs --heads")
    if args.recompute_attention_inputs and not args.heads:
        ap.error("--recompute-attention-inputs needs --heads")
    report = None  # the configs whose saved bytes --report-tokens sums: one layer's
    keep = args.keep_gemm_operands
    if args.hf_config:
        configs, report = hf_configs(args.hf_config, ap, keep)
    elif args.hidden is None or args.ffn is None:
        ap.error("--hidden and --ffn (or --hf-config) are required")
    elif args.heads:
        layer = dict(hidden=args.hidden, ffn=args.ffn, heads=args.heads,
                     kv_heads=args.kv_heads or args.heads, eps=args.eps,
                     rope={"auto": "auto", "on": True, "off": False}[args.rope])
        try:
            configs = list(programs.decoder_layer_configs(**layer))
            # Every variant asked for, and each combination of them; the
            # report sums the layer's programs with all the options on.
            rc = (False, True) if args.recompute_attention_inputs else (False,)
            kg = (False, True) if keep else (False,)
            for r in rc:
                for k in kg:
                    # The attention output program that reads attention's
                    # kept output (DecoderLayer(reuse_attention_output=True))
                    # is one program more, always compiled.
                    for ao in (False, True):
                        variant = programs.decoder_layer_configs(
                            **layer, recompute_output=r, keep_gemm_operands=k,
                            reuse_attention_output=ao)
                        configs += [c for c in variant if c not in configs]
            report = list(programs.decoder_layer_configs(**layer, recompute_output=rc[-1],
                                                         keep_gemm_operands=kg[-1]))
        except ValueError as e:
            ap.error(str(e))
    else:
        configs = [programs.MLPBlockConfig(hidden=args.hidden, ffn=args.ffn, eps=args.eps)]
        if keep:
            configs.append(programs.MLPBlockConfig(hidden=args.hidden, ffn=args.ffn,
                                                   eps=args.eps, keep_gemm_operands=True))
            report = configs[1:]
    report = report or configs  # the layer's programs (not the loss)
    if args.vocab is not None:
        if args.vocab < 1:
            ap.error("--vocab must be positive")
        configs = [*configs, programs.CrossEntropyConfig(args.vocab)]
    tools = toolchain.Toolchain(coat_opt=args.coat_opt)
    seen, used = set(), set()
    for cfg in configs:
        if cfg in seen:
            continue
        seen.add(cfg)
        cfg.check()
        # Configs of one name may differ (another eps): each its own folder
        # (coat.artifacts finds programs by content, not by folder name).
        folder = cfg.name
        if folder in used:
            folder += "-" + toolchain.key_halves(toolchain.source_key(cfg.text()))[0][:8]
        used.add(folder)
        out = Path(args.out) / folder
        out.mkdir(parents=True, exist_ok=True)
        src = out / f"{cfg.name}.mlir"
        src.write_text(cfg.text())
        tools.compile_program(src, out)
        print(f"{cfg.name} -> {out}")
    if args.report_tokens:
        print_saved(tools, report, args.report_tokens)
    return 0


def print_saved(tools: toolchain.Toolchain, configs, tokens: int) -> None:
    """Per program, the bytes its forward keeps for its backward at
    ``tokens`` tokens (FP8 activations, the same tensors in BF16, FP8 weight
    copies), and their sum: a decoder layer's, for --heads."""
    mib = 2.0 ** 20
    print(f"\nkept for the backward at {tokens} tokens (MiB):")
    print(f"{'program':<48} {'FP8':>10} {'in BF16':>10} {'weight copies':>14}")
    total = [0, 0, 0]
    for cfg in dict.fromkeys(configs):
        r = tools.saved_report(cfg.text(), tokens)
        for i, v in enumerate((r.saved, r.bf16, r.weight_copies)):
            total[i] += v
        print(f"{cfg.name:<48} {r.saved / mib:>10.1f} {r.bf16 / mib:>10.1f} "
              f"{r.weight_copies / mib:>14.1f}")
    print(f"{'sum':<48} {total[0] / mib:>10.1f} {total[1] / mib:>10.1f} "
          f"{total[2] / mib:>14.1f}")


if __name__ == "__main__":
    sys.exit(main())
