#!/usr/bin/env python3
"""llama.cpp side of bench/cpu_bench.sh: one measurement per process, JSON on stdout.

Runs llama.cpp through llama-cpp-python's low-level C API (the same llama_decode calls
that llama-bench and llama-batched-bench make), so no llama.cpp tools need to be built.

  prompt  --prompt-ids F.json           prefill of the whole token list as one batch
                                        (n_batch = n_ubatch = 512), one sequence. Same as
                                        llama-bench's pp512. 1 warm-up + --reps timed runs,
                                        the KV cache cleared before each; reports the median.
  decode  --batch B --prompt-tokens P --decode-tokens N
                                        B sequences holding the first P ids of the prompt
                                        (prefilled once, KV copied; untimed), then N + 1 decode steps of one
                                        token per sequence in a single llama_decode (B tokens
                                        per step, logits for all B), the next token being
                                        the argmax of each sequence's row (numpy, included
                                        in the time, as a server samples). The first step is
                                        a warm-up; decode_tokens_per_s = B * N / time of the
                                        other N steps. Like llama-batched-bench's S_TG with
                                        PP = P, TG = N, PL = B, plus greedy sampling.
                                        KV: llama.cpp's default of one stream per sequence
                                        (--kv-unified shares one buffer; on this build that
                                        made batch-8 decode ~40x slower).

Both modes print {"prompt_tokens_per_s" | "decode_tokens_per_s", "batch", ...}; peak RSS
is measured by the caller (bench/cpu_bench.py) with wait4.
"""

import argparse
import ctypes
import json
import statistics
import sys
import time

import numpy as np


def flash_attn_type(llama_cpp, name):
    return {
        "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
        "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    }[name]


class Runner:
    def __init__(self, args, n_ctx, n_seq_max):
        import llama_cpp

        self.l = llama_cpp
        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        self.model = llama_cpp.llama_model_load_from_file(args.model.encode(), mparams)
        if not self.model:
            sys.exit(f"cannot load {args.model}")
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = 512
        cparams.n_ubatch = 512
        cparams.n_seq_max = n_seq_max
        cparams.n_threads = args.threads
        cparams.n_threads_batch = args.threads
        cparams.flash_attn_type = flash_attn_type(llama_cpp, args.flash_attn)
        cparams.kv_unified = args.kv_unified
        cparams.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            sys.exit("cannot create the llama.cpp context")
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        self.batch = llama_cpp.llama_batch_init(512, 0, n_seq_max)

    def clear(self):
        self.l.llama_memory_clear(self.l.llama_get_memory(self.ctx), True)

    def decode(self, entries):
        """entries: [(token, pos, seq_id, want_logits)]."""
        b = self.batch
        b.n_tokens = len(entries)
        for i, (tok, pos, seq, want) in enumerate(entries):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = 1 if want else 0
        rc = self.l.llama_decode(self.ctx, b)
        if rc != 0:
            sys.exit(f"llama_decode returned {rc}")

    def logits_row(self, i):
        ptr = self.l.llama_get_logits_ith(self.ctx, i)
        return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                     shape=(self.n_vocab,))

    def prefill(self, ids, seq):
        for start in range(0, len(ids), 512):
            chunk = ids[start:start + 512]
            last = start + len(chunk) == len(ids)
            self.decode([(t, start + j, seq, last and j == len(chunk) - 1)
                         for j, t in enumerate(chunk)])


def cmd_prompt(args, ids):
    r = Runner(args, n_ctx=max(1024, len(ids) + 64), n_seq_max=1)
    times = []
    for rep in range(args.reps + 1):
        r.clear()
        t0 = time.perf_counter()
        r.prefill(ids, 0)
        r.l.llama_synchronize(r.ctx)
        dt = time.perf_counter() - t0
        if rep > 0:
            times.append(dt)
    med = statistics.median(times)
    return {"mode": "prompt", "batch": 1, "prompt_tokens": len(ids),
            "prompt_tokens_per_s": len(ids) / med,
            "runs_s": [round(t, 4) for t in times]}


def cmd_decode(args, ids):
    B, P, N = args.batch, args.prompt_tokens, args.decode_tokens
    if P > len(ids):
        sys.exit(f"--prompt-tokens {P} > {len(ids)} ids in the prompt file")
    per_seq = P + N + 2
    n_ctx = ((B * per_seq + 255) // 256) * 256
    r = Runner(args, n_ctx=n_ctx, n_seq_max=B)
    r.clear()
    t0 = time.perf_counter()
    r.prefill(ids[:P], 0)
    # Every sequence starts from the same prompt: copy sequence 0's cells instead of
    # prefilling B times (the decode steps still attend over B separate histories).
    first = int(np.argmax(r.logits_row(-1)))
    mem = r.l.llama_get_memory(r.ctx)
    for s in range(1, B):
        r.l.llama_memory_seq_cp(mem, 0, s, -1, -1)
    prefill_s = time.perf_counter() - t0
    nxt = [first] * B
    step_times = []
    for step in range(N + 1):
        t = time.perf_counter()
        r.decode([(nxt[s], P + step, s, True) for s in range(B)])
        nxt = [int(np.argmax(r.logits_row(s))) for s in range(B)]
        step_times.append(time.perf_counter() - t)
    timed = sum(step_times[1:])
    return {"mode": "decode", "batch": B, "prompt_tokens": P, "decode_tokens": N,
            "decode_tokens_per_s": B * N / timed,
            "step_ms_median": round(1000 * statistics.median(step_times[1:]), 3),
            # Less sensitive to other processes stealing the cores than the mean above.
            "decode_tokens_per_s_median_step": B / statistics.median(step_times[1:]),
            "prefill_s": round(prefill_s, 3), "n_ctx": n_ctx}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["prompt", "decode"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", required=True, help="JSON list of token ids")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--kv-unified", action="store_true",
                    help="one KV buffer for all sequences (attention then spans every "
                         "sequence's cells, masked); default: llama.cpp's default, one "
                         "stream per sequence")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    args = ap.parse_args()
    with open(args.prompt_ids) as f:
        ids = json.load(f)
    out = cmd_prompt(args, ids) if args.mode == "prompt" else cmd_decode(args, ids)
    import llama_cpp

    out.update({"engine": "llama.cpp", "llama_cpp_python_version": llama_cpp.__version__,
                "threads": args.threads, "flash_attn": args.flash_attn,
                "kv_unified": args.kv_unified})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
