#!/usr/bin/env python3
"""Reference logits, greedy tokens and timings from Hugging Face transformers on a GPU.

Loads a Hugging Face checkpoint (safetensors: Llama, Qwen2, Qwen3, Mistral, any model_type
AutoModelForCausalLM knows) with transformers on CUDA in bf16 (or fp32 with --dtype fp32)
and, for each token-id list in --tokens-file:
  * runs the whole sequence in one forward pass (batch 1, no padding) and records the logits
    at the last position: the full vocabulary row (default), or the top-k ids/values, plus
    the row's L2 norm, logsumexp and argmax in every mode;
  * continues greedily for --greedy N tokens with use_cache=True (argmax each step, EOS not
    a stop unless --stop-at-eos), recording each chosen token and its top-1/top-2 gap.
Then times (torch.cuda.Event, after warm-up, median of --reps):
  * prefill of --prefill-len random tokens (batch 1, fresh cache, last-position logits only
    where the model supports logits_to_keep);
  * one decode step (one new token per sequence) at each batch size in --decode-batches with
    a KV cache of --decode-context random tokens (transformers' DynamicCache; the cache is
    cropped back to the context after every step, untimed, so every step sees the same
    context).
Prints a Markdown table and writes everything to --out (JSON).

Example:
  python3 bench/hf_reference.py --model models/llama --tokens-file prompts.json \
      --out $OUT/hf_ref.json --greedy 32
Tokens file: JSON list of lists of ints, e.g. [[1, 15043, 29892], [1, 450]] (a dict with a
"tokens" or "sequences" key holding such a list is accepted too).
Full logits rows are ~1.2 MB of JSON each for a 128k vocabulary: use --logits topk, or
--logits-npy PATH to store them in binary (float32 [n_seq, vocab]) next to the JSON.
"""

import argparse
import gc
import inspect
import json
import math
import os
import platform
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="Hugging Face checkpoint directory")
    p.add_argument("--tokens-file", help="JSON list of token-id lists (optional with --timing-only)")
    p.add_argument("--out", required=True, help="output JSON path")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa, eager, ...)")
    p.add_argument("--logits", choices=["full", "topk", "none"], default="full",
                   help="what of the last-position logits row goes in the JSON (default full)")
    p.add_argument("--topk", type=int, default=64, help="k for --logits topk (default 64)")
    p.add_argument("--logits-npy", help="also save last-position logits as float32 .npy [n_seq, vocab]")
    p.add_argument("--digits", type=int, default=7, help="significant digits of logits in JSON (default 7)")
    p.add_argument("--greedy", type=int, default=32, help="greedy tokens to generate per sequence (default 32)")
    p.add_argument("--stop-at-eos", action="store_true", help="stop a greedy continuation at EOS")
    p.add_argument("--prefill-len", type=int, default=4096, help="prefill timing length; 0 skips (default 4096)")
    p.add_argument("--decode-batches", default="1,32,128", help="decode timing batch sizes; empty skips")
    p.add_argument("--decode-context", type=int, default=1024, help="KV context for decode timing (default 1024)")
    p.add_argument("--prefill-chunk", type=int, default=256,
                   help="time-chunk used to build the decode-timing cache (untimed; default 256)")
    p.add_argument("--reps", type=int, default=10, help="timed repeats (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed warm-up runs (default 3)")
    p.add_argument("--no-timing", action="store_true", help="skip all timing")
    p.add_argument("--timing-only", action="store_true", help="skip the token sequences")
    p.add_argument("--seed", type=int, default=0, help="seed for the random timing tokens")
    return p.parse_args()


def load_sequences(path):
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict):
        for key in ("tokens", "sequences", "token_ids"):
            if key in data:
                data = data[key]
                break
    if not isinstance(data, list) or not all(isinstance(s, list) for s in data):
        raise SystemExit(f"{path}: expected a JSON list of token-id lists")
    seqs = []
    for i, s in enumerate(data):
        if not s:
            raise SystemExit(f"{path}: sequence {i} is empty")
        if not all(isinstance(t, int) and t >= 0 for t in s):
            raise SystemExit(f"{path}: sequence {i} holds something other than non-negative ints")
        seqs.append(s)
    return seqs


def load_model(args, torch, transformers):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    from transformers import AutoModelForCausalLM

    errors = []
    model = None
    # transformers >= 4.56 takes dtype=, older ones torch_dtype=; try device_map first.
    for kw in (
        dict(dtype=dtype, device_map="cuda"),
        dict(torch_dtype=dtype, device_map="cuda"),
        dict(dtype=dtype),
        dict(torch_dtype=dtype),
    ):
        try:
            model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation=args.attn, **kw)
            break
        except (TypeError, ValueError, ImportError, RuntimeError) as e:  # try the next spelling
            errors.append(f"{sorted(kw)}: {type(e).__name__}: {e}")
            model = None
            gc.collect()
    if model is None:
        raise SystemExit("could not load the model:\n  " + "\n  ".join(errors))
    # An unknown keyword could have gone into the config silently: enforce dtype and device.
    p = next(model.parameters())
    if p.dtype != dtype:
        model = model.to(dtype)
    if p.device.type != "cuda":
        model = model.to("cuda")
    model.eval()
    return model, dtype


def forward_kwargs(model):
    """Name of the 'only compute the last logits' argument, if the model has one."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return name
    return None


def eos_ids(model):
    ids = set()
    for src in (getattr(model, "generation_config", None), model.config):
        e = getattr(src, "eos_token_id", None) if src is not None else None
        if e is None:
            continue
        if isinstance(e, int):
            ids.add(e)
        else:
            ids.update(int(x) for x in e)
    return sorted(ids)


def round_list(values, digits):
    fmt = "%." + str(digits) + "g"
    return [float(fmt % v) for v in values]


def run_sequences(args, torch, model, seqs, keep_arg, vocab, eos):
    results = []
    npy_rows = [] if args.logits_npy else None
    dev = "cuda"
    eos_set = set(eos)
    for idx, seq in enumerate(seqs):
        if max(seq) >= vocab:
            raise SystemExit(f"sequence {idx}: token id {max(seq)} >= vocab size {vocab}")
        ids = torch.tensor([seq], dtype=torch.long, device=dev)
        kw = {keep_arg: 1} if keep_arg else {}
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=True, **kw)
            row = out.logits[0, -1].float()
            cache = out.past_key_values
            del out
            rec = {"index": idx, "n_tokens": len(seq)}
            rec["argmax"] = int(torch.argmax(row).item())
            rec["logits_norm"] = float(torch.linalg.vector_norm(row).item())
            rec["logsumexp"] = float(torch.logsumexp(row, dim=0).item())
            rec["logits_finite"] = bool(torch.isfinite(row).all().item())
            row_cpu = row.cpu()
            if args.logits == "full":
                rec["last_logits"] = round_list(row_cpu.tolist(), args.digits)
            elif args.logits == "topk":
                k = min(args.topk, row_cpu.numel())
                tv, ti = torch.topk(row_cpu, k)
                rec["topk_ids"] = ti.tolist()
                rec["topk_values"] = round_list(tv.tolist(), args.digits)
            if npy_rows is not None:
                npy_rows.append(row_cpu.numpy())

            greedy, gaps, top1 = [], [], []
            cur = row
            for step in range(args.greedy):
                nxt = int(torch.argmax(cur).item())
                tv = torch.topk(cur, 2).values
                greedy.append(nxt)
                top1.append(float(tv[0].item()))
                gaps.append(float((tv[0] - tv[1]).item()))
                if args.stop_at_eos and nxt in eos_set:
                    break
                if step == args.greedy - 1:
                    break
                out = model(input_ids=torch.tensor([[nxt]], dtype=torch.long, device=dev),
                            past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                cur = out.logits[0, -1].float()
                del out
            rec["greedy"] = greedy
            rec["greedy_top1_logit"] = round_list(top1, args.digits)
            rec["greedy_top2_gap"] = round_list(gaps, args.digits)
            del cache
        rec["seconds"] = round(time.perf_counter() - t0, 4)
        results.append(rec)
        print(f"seq {idx}: {len(seq)} tokens, argmax {rec['argmax']}, greedy {greedy[:12]}"
              f"{' ...' if len(greedy) > 12 else ''}", file=sys.stderr, flush=True)
    if npy_rows is not None:
        import numpy as np

        arr = np.stack(npy_rows).astype(np.float32) if npy_rows else np.zeros((0, vocab), np.float32)
        np.save(args.logits_npy, arr)
    return results


def cuda_time(torch, fn, warmup, reps):
    """Median/min/all of fn()'s GPU time in ms, CUDA events, after warm-up."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), min(times), times


def free_memory(torch):
    gc.collect()
    torch.cuda.empty_cache()


def time_prefill(args, torch, model, keep_arg, vocab, max_pos):
    L = args.prefill_len
    note = ""
    if max_pos and L > max_pos:
        note = f"clamped from {L} to max_position_embeddings {max_pos}"
        L = max_pos
    g = torch.Generator(device="cuda").manual_seed(args.seed)
    ids = torch.randint(0, vocab, (1, L), device="cuda", generator=g)
    kw = {keep_arg: 1} if keep_arg else {}

    def fn():
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=True, **kw)
            del out

    med, mn, all_ms = cuda_time(torch, fn, args.warmup, args.reps)
    res = {"tokens": L, "batch": 1, "ms_median": med, "ms_min": mn, "ms_all": all_ms,
           "tokens_per_s": L / (med / 1e3), "logits_last_only": bool(keep_arg),
           "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30}
    if note:
        res["note"] = note
    del ids
    free_memory(torch)
    return res


def time_decode(args, torch, model, keep_arg, vocab, batch):
    ctx = args.decode_context
    g = torch.Generator(device="cuda").manual_seed(args.seed + batch)
    res = {"batch": batch, "context": ctx}
    try:
        torch.cuda.reset_peak_memory_stats()
        ctx_ids = torch.randint(0, vocab, (batch, ctx), device="cuda", generator=g)
        kw = {keep_arg: 1} if keep_arg else {}
        cache = None
        chunk = max(1, args.prefill_chunk)
        with torch.inference_mode():
            for s in range(0, ctx, chunk):
                out = model(input_ids=ctx_ids[:, s:s + chunk], past_key_values=cache, use_cache=True, **kw)
                cache = out.past_key_values
                del out
        del ctx_ids
        step_ids = torch.randint(0, vocab, (batch, 1), device="cuda", generator=g)
        can_crop = hasattr(cache, "crop")
        crop_failed = []

        def fn():
            with torch.inference_mode():
                out = model(input_ids=step_ids, past_key_values=cache, use_cache=True)
                del out

        # Time steps one at a time so the cache can be cropped back (untimed) in between.
        times = []
        for i in range(args.warmup + args.reps):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            if i >= args.warmup:
                times.append(a.elapsed_time(b))
            if can_crop and not crop_failed:
                try:
                    with torch.inference_mode():
                        cache.crop(ctx)
                except Exception as e:  # noqa: BLE001 - report and carry on with a growing cache
                    crop_failed.append(f"{type(e).__name__}: {e}")
        med = statistics.median(times)
        res.update({"ms_median": med, "ms_min": min(times), "ms_all": times,
                    "tokens_per_s": batch / (med / 1e3),
                    "cache": type(cache).__name__,
                    "context_fixed": bool(can_crop and not crop_failed),
                    "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30})
        if not res["context_fixed"]:
            res["note"] = ("cache could not be cropped; context grew to "
                           f"{ctx + args.warmup + args.reps}" + (f" ({crop_failed[0]})" if crop_failed else ""))
        del cache, step_ids
    except torch.cuda.OutOfMemoryError as e:
        res["error"] = f"out of memory: {str(e).splitlines()[0]}"
    free_memory(torch)
    return res


def main():
    args = parse_args()
    if not args.timing_only and not args.tokens_file:
        raise SystemExit("--tokens-file is required unless --timing-only")
    import torch
    import transformers

    if not torch.cuda.is_available():
        raise SystemExit("CUDA is not available")
    torch.set_float32_matmul_precision("highest")  # fp32 reference: no TF32

    seqs = load_sequences(args.tokens_file) if not args.timing_only else []
    t_load = time.perf_counter()
    model, dtype = load_model(args, torch, transformers)
    t_load = time.perf_counter() - t_load
    cfg = model.config
    vocab = int(getattr(cfg, "vocab_size", 0) or model.get_output_embeddings().weight.shape[0])
    max_pos = int(getattr(cfg, "max_position_embeddings", 0) or 0)
    keep_arg = forward_kwargs(model)
    eos = eos_ids(model)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"loaded {args.model}: {n_params / 1e9:.2f}B params, {dtype}, attn {args.attn}, vocab {vocab}, "
          f"{t_load:.1f} s; logits arg {keep_arg}", file=sys.stderr, flush=True)

    out = {
        "tool": "bench/hf_reference.py",
        "model": os.path.abspath(args.model),
        "dtype": args.dtype,
        "attn_implementation": args.attn,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name(0),
        "n_params": n_params,
        "vocab_size": vocab,
        "max_position_embeddings": max_pos,
        "eos_token_ids": eos,
        "model_type": getattr(cfg, "model_type", None),
        "load_seconds": round(t_load, 2),
        "logits_mode": args.logits,
        "logits_digits": args.digits,
        "greedy_tokens": args.greedy,
        "greedy_stop_at_eos": args.stop_at_eos,
        "sequences": [],
        "timing": None,
    }
    if args.logits == "topk":
        out["topk"] = args.topk

    if seqs:
        out["sequences"] = run_sequences(args, torch, model, seqs, keep_arg, vocab, eos)
        free_memory(torch)

    rows = []
    if not args.no_timing:
        timing = {"method": "torch.cuda.Event around each forward, after warm-up; median",
                  "reps": args.reps, "warmup": args.warmup, "prefill": None, "decode": []}
        if args.prefill_len > 0:
            torch.cuda.reset_peak_memory_stats()
            pre = time_prefill(args, torch, model, keep_arg, vocab, max_pos)
            timing["prefill"] = pre
            rows.append(("prefill", 1, pre["tokens"], pre["ms_median"], pre["tokens_per_s"], pre.get("note", "")))
            print(f"prefill {pre['tokens']}: {pre['ms_median']:.2f} ms", file=sys.stderr, flush=True)
        batches = [int(b) for b in args.decode_batches.split(",") if b.strip()]
        for b in batches:
            d = time_decode(args, torch, model, keep_arg, vocab, b)
            timing["decode"].append(d)
            if "error" in d:
                rows.append(("decode step", b, args.decode_context, float("nan"), float("nan"), d["error"]))
            else:
                rows.append(("decode step", b, args.decode_context, d["ms_median"], d["tokens_per_s"], d.get("note", "")))
            print(f"decode batch {b}: {d.get('ms_median', float('nan')):.3f} ms", file=sys.stderr, flush=True)
        out["timing"] = timing

    with open(args.out, "w") as f:
        json.dump(out, f)
    size = os.path.getsize(args.out)

    print(f"\n### transformers {transformers.__version__} / torch {torch.__version__}, "
          f"{out['device']}, {args.dtype}, {args.attn}\n")
    if seqs:
        print("| seq | tokens | argmax | logits norm | greedy (first 8) |")
        print("|---:|---:|---:|---:|---|")
        for r in out["sequences"]:
            print(f"| {r['index']} | {r['n_tokens']} | {r['argmax']} | {r['logits_norm']:.2f} | {r['greedy'][:8]} |")
        print()
    if rows:
        print("| phase | batch | context / tokens | median ms | tokens/s | note |")
        print("|---|---:|---:|---:|---:|---|")
        for ph, b, c, ms, tps, note in rows:
            ms_s = "-" if math.isnan(ms) else f"{ms:.3f}"
            tps_s = "-" if math.isnan(tps) else f"{tps:.1f}"
            print(f"| {ph} | {b} | {c} | {ms_s} | {tps_s} | {note} |")
    print(f"\nwrote {args.out} ({size / 1e6:.1f} MB)")
    if args.logits_npy:
        print(f"wrote {args.logits_npy}")


if __name__ == "__main__":
    main()
