#!/usr/bin/env python3
"""Checks that a checkpoint written by `infercept make-model` loads in Hugging Face
transformers: AutoModelForCausalLM.from_pretrained (LlamaForCausalLM, Qwen2ForCausalLM,
Qwen3ForCausalLM or MistralForCausalLM, by the config's model_type) with no missing, unexpected or mismatched
weights, AutoTokenizer (tokenizer.json + tokenizer_config.json, chat template), one forward
pass over a few tokens with finite logits, and a few greedy tokens. Prints the logits' stats.

Needs torch and transformers (not part of the CPU set-up; run it where they are installed,
e.g. on the GPU machine). Exit status 0 when every check passes.

Usage: python3 scripts/check_hf_load.py DIR [--device cpu|cuda] [--prompt TEXT]
"""
import argparse
import math
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--prompt", default="The capital of France is")
    args = ap.parse_args()

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"device {args.device}")
    tok = AutoTokenizer.from_pretrained(args.dir)
    print(f"tokenizer: {type(tok).__name__}, {len(tok)} tokens, bos {tok.bos_token!r}, "
          f"eos {tok.eos_token!r}")
    ids = tok(args.prompt, return_tensors="pt")["input_ids"]
    text = tok.decode(ids[0], skip_special_tokens=True)
    print(f"prompt ids: {ids[0].tolist()} -> {text!r}")
    ok = text == args.prompt
    if tok.chat_template:
        chat = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                       add_generation_prompt=True)
        print(f"chat template renders: {chat!r}")

    t0 = time.time()
    # transformers >= 4.56 names the argument `dtype`; older ones `torch_dtype`.
    major_minor = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    kw = {"dtype": "auto"} if major_minor >= (4, 56) else {"torch_dtype": "auto"}
    model, info = AutoModelForCausalLM.from_pretrained(args.dir, output_loading_info=True, **kw)
    print(f"loaded {type(model).__name__} in {time.time() - t0:.1f} s: dtype {model.dtype}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        bad = [k for k in info.get(key, []) if "rotary_emb.inv_freq" not in str(k)]
        if bad:
            print(f"FAIL {key}: {bad[:10]}")
            ok = False
    model.to(args.device).eval()

    with torch.no_grad():
        logits = model(ids.to(args.device)).logits.float()
    finite = bool(torch.isfinite(logits).all())
    print(f"logits {tuple(logits.shape)}: mean {logits.mean().item():.4f}, "
          f"std {logits.std().item():.4f}, min {logits.min().item():.3f}, "
          f"max {logits.max().item():.3f}, finite {finite}")
    ok = ok and finite and logits.shape[-1] == model.config.vocab_size
    std = logits.std().item()
    if not (0.01 < std < 100) or math.isnan(std):
        print("FAIL logits std out of range")
        ok = False

    with torch.no_grad():
        out = model.generate(ids.to(args.device), max_new_tokens=8, do_sample=False,
                             pad_token_id=tok.pad_token_id if tok.pad_token_id is not None
                             else tok.eos_token_id)
    new = out[0, ids.shape[1]:].tolist()
    print(f"greedy: {new} -> {tok.decode(new)!r}")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
