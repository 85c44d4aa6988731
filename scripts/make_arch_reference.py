#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers for the tiny make-model checkpoints of every
architecture infercept runs (Llama, Qwen2, Qwen3, Mistral): tests/fixtures/reference_arch_tiny.json,
which tests/test_arch_reference.cpp holds our CPU forward pass to (from safetensors and from GGUF).

For each shape (tiny, qwen2-tiny, qwen3-tiny, mistral-tiny) this writes the checkpoint with
`infercept make-model --shape S --seed 0` (deterministic: the test writes the same bytes
itself), loads it with AutoModelForCausalLM in float32 with eager attention (the plain
softmax(QK^T)V, so nothing but fp32 rounding stands between it and the math), checks it loaded
as the expected class with no missing or unexpected weights, and runs each prompt as one causal
forward pass. Recorded per prompt and position: the argmax, the gap between the two largest
logits, the logsumexp of the whole row, and the logits of a fixed set of ids (every 1999th id
and the top 3 of every position of every prompt of that shape).

Usage:
  python3 scripts/make_arch_reference.py --binary build/infercept \
      [--out tests/fixtures/reference_arch_tiny.json] [--work /tmp/arch_ref]

Needs torch and transformers (CPU builds are enough: `pip install torch transformers`); run it
where the default model is (make-model takes the tokenizer from it). Nothing here is imported
by the build.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

SHAPES = {  # make-model shape -> the transformers class it must load as
    "tiny": "LlamaForCausalLM",
    "qwen2-tiny": "Qwen2ForCausalLM",
    "qwen3-tiny": "Qwen3ForCausalLM",
    "mistral-tiny": "MistralForCausalLM",
}
SEED = 0
STRIDE = 1999
TOP = 3
DIGITS = 7  # significant digits: far below the test's tolerance
TEXTS = [
    "The capital of France is",
    "<|im_start|>user\nWhat is 17 * 23? Answer briefly.<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True, help="the infercept binary (make-model)")
    ap.add_argument("--out", default="tests/fixtures/reference_arch_tiny.json")
    ap.add_argument("--work", default="/tmp/infercept_arch_ref", help="where checkpoints are written")
    args = ap.parse_args()

    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(2)
    out = {
        "tool": "scripts/make_arch_reference.py",
        "created": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "dtype": "float32",
        "attn_implementation": "eager",
        "seed": SEED,
        "models": {},
    }
    for shape, cls in SHAPES.items():
        d = os.path.join(args.work, shape)
        subprocess.run([args.binary, "make-model", "--shape", shape, "--out", d, "--seed", str(SEED)],
                       check=True, stdout=subprocess.DEVNULL)
        # The file's own tokenizer.json: transformers 5's AutoTokenizer substitutes its
        # Qwen2Tokenizer (Qwen's pre-tokenizer) for model_type qwen2/qwen3 whatever the file says.
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        model, info = AutoModelForCausalLM.from_pretrained(
            d, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
        if type(model).__name__ != cls:
            sys.exit(f"{shape}: loaded as {type(model).__name__}, expected {cls}")
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            bad = [k for k in info.get(key, []) if "rotary_emb" not in str(k)]
            if bad:
                sys.exit(f"{shape}: {key}: {bad[:8]}")
        model.eval()
        vocab = model.config.vocab_size
        prompts = []
        rows = []
        for text in TEXTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].double()
            prompts.append(ids)
            rows.append(logits)
        fixed = set(range(0, vocab, STRIDE))
        for logits in rows:
            fixed.update(torch.topk(logits, TOP, dim=-1).indices.flatten().tolist())
        fixed = sorted(fixed)
        entry = {"class": cls, "model_type": model.config.model_type, "vocab_size": vocab,
                 "ids": fixed, "prompts": []}
        for text, ids, logits in zip(TEXTS, prompts, rows):
            top2 = torch.topk(logits, 2, dim=-1).values
            entry["prompts"].append({
                "text": text,
                "tokens": ids,
                "argmax": logits.argmax(-1).tolist(),
                "top2_gap": [float(f"{v:.{DIGITS}g}") for v in (top2[:, 0] - top2[:, 1]).tolist()],
                "logsumexp": [float(f"{v:.{DIGITS}g}") for v in torch.logsumexp(logits, -1).tolist()],
                "logits": [[float(f"{v:.{DIGITS}g}") for v in row[fixed].tolist()] for row in logits],
            })
        out["models"][shape] = entry
        print(f"{shape}: {cls}, {len(fixed)} ids, prompts of {[len(p) for p in prompts]} tokens",
              file=sys.stderr)
    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 1e3:.0f} kB)", file=sys.stderr)


if __name__ == "__main__":
    main()
