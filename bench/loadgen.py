#!/usr/bin/env python3
"""Agent load generator for any OpenAI-compatible server: real multi-turn tool loops.

Each request of the workload is an agent: a prompt, then segments of generation each ending
in a tool call; the client "runs" the tool by sleeping for the scripted duration (times
--time-scale) and sends the tool's result back, until the last segment ends the request.
Workloads: the six augmentations of the InferCept paper (Table 1: math, qa, ve, chat, image,
tts), their uniform mix, or long agent sessions (sessions: tens of tool calls over a context
that grows to 10k-150k tokens, docs/TRACE.md), drawn exactly as `infercept bench` draws them
(bench/agent_workload.py mirrors src/workload/workload.cpp and sessions.cpp), or a JSON Lines
trace (docs/TRACE.md) replayed as it is.
Arrivals are open-loop (the trace's Poisson times), at most --max-concurrency agents run at
once (a later one waits, and the wait counts in its latency).

Client modes:
  standard  every turn after a tool call is a new chat completion carrying the whole history
            plus the tool result: what agent frameworks do (infercept resumes the paused
            request its call ids name; other servers prefill it again).
  native    infercept's explicit API: the turn after a tool call is
            POST /v1/interceptions/{id}/resume with the tool result only. A turn that the
            server did not leave paused (no interception id) falls back to a standard request.

How a segment ends in a tool call: the request carries the segment's tool (a function with
one string argument), tool_choice "required" (or "named", --call-style), max_tokens = the
segment's tokens (at least --min-call-tokens, so that a call fits), and --call-examples
earlier calls of that tool in the prompt (argument: --call-words words), which the model
copies. The model ends its turn itself, so a turn that ends in a call generates the call's
length, not the script's (SmolLM2-135M at temperature 0: 19 tokens per call, 29 on a native
resume where no call opening is forced; the JSON gives generated tokens, actual and scripted).
When the model does not close a call within max_tokens, the client makes the call up itself
(a synthesized call: the conversation goes on the same way, but the server did not pause);
the JSON counts both. infercept forces the opening of the call (tool_choice required or named); a
server that does not (llama.cpp's llama-server, whose grammar waits for the model to open a
call) gets it as an assistant message to continue, with --call-prefill.
--call-style synthetic sends no tools at all (lengths exact through
max_tokens unless the model stops early, every call made up by the client, no pause).
--call-style scripted uses infercept's intercept_after_tokens extension (docs/SERVER.md): each
turn generates exactly the segment's tokens and ends in a call to the segment's tool, paused
(the paper's setting; it also drives random-weight checkpoints, which never write a call).
The server is never told a tool's duration unless --hint is given (expected_duration_ms in
the tool definition; in native mode also POST /v1/interceptions/{id}/hint).

A shared prefix (--shared-prefix TOKENS, the prefix cache's workload): every conversation
starts with the same system message, a fixed text of TOKENS words drawn from WORDS by a
constant seed (about one token a word; the same text for every agent, run and server),
followed by the same tool definitions (every tool of the workload: the six of Table 1 for the
Table 1 workloads, the session tools for sessions, in that order, or a trace's tools sorted;
sessions start with a shared prefix by default: their system prompt's size x
--context-scale words, docs/TRACE.md), so that the rendered prompt's
system turn is one string for everyone (ChatML/Qwen2.5 put the tools after the system text).
The agent's own part, the drawn prompt (its filler words, the task and the example calls),
comes after, in the user message: the first turn's prompt is the drawn prompt plus the shared
prefix's tokens (measured at calibration with a text of the same length but other words, so
that the run starts with nothing of it cached; the JSON's shared_prefix). With a shared
prefix the tool definitions never carry --hint's expected_duration_ms (it would change the
shared part from turn to turn); native mode's hint endpoint still does.

Records per request: arrival, first token (TTFT: the first streamed chunk that carries a token:
content, a tool call or logprobs), end, total interception time (the client's tool waits),
output tokens (generated tokens from usage + the tool's returned tokens, as in the paper);
per turn: its prompt tokens and those the server reports as cached
(usage.prompt_tokens_details.cached_tokens: infercept's kept or prefix-cached KV,
llama-server's slot or prompt-cache reuse; llama-server's timings.prompt_n / cache_n too),
and its own TTFT (from sending the turn to its first token). The summary's prefix section
gives the hit rate the same way for any server: cached / prompt tokens over every turn, over
first turns (where only a prefix shared with other conversations can hit) and over
continuation turns; ttft_continuation_s is the TTFT of the turns after a tool call (ttft_s
is the first turn's, from the arrival).
Reads /metrics before and after (when the server has it) for server-side deltas: recomputed
tokens, swapped tokens and bytes, waste by cause, policy decisions, resumes, the prefix
cache's looked-up and hit prompt tokens (infercept);
prompt tokens computed and cached, generated tokens (llama.cpp's llama-server --metrics);
any other server's counters raw.

Output: the paper's metrics (normalized latency = (end - arrival - interception time) / output
tokens, mean/p50/p90/p99; TTFT; completed requests/s = completed / --duration) as a Markdown
table, and as JSON with --json (same keys as `infercept bench --json` where they overlap, so
bench/report.py plots both).

Example (a server started with `build/infercept serve --port 8000`):
  python3 bench/loadgen.py --base-url http://127.0.0.1:8000/v1 --workload mixed --rate 0.5 \\
      --duration 60 --time-scale 0.1 --context-scale 0.25 --mode native --json out.json
Needs httpx (Debian python3-httpx, or the venv `make` sets up): when the running interpreter
lacks it, the script re-runs itself with /usr/bin/python3 or build/venv/bin/python3.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ensure(module):
    """Re-runs this script under an interpreter that has `module` (pyenv shadows Debian's)."""
    try:
        __import__(module)
        return
    except ImportError:
        pass
    if os.environ.get("LOADGEN_REEXEC") != "1":
        for py in ("/usr/bin/python3", os.path.join(ROOT, "build", "venv", "bin", "python3")):
            if os.path.exists(py) and os.path.realpath(py) != os.path.realpath(sys.executable):
                os.environ["LOADGEN_REEXEC"] = "1"
                os.execv(py, [py] + sys.argv)
    sys.stderr.write(f"{os.path.basename(sys.argv[0])}: needs the Python package '{module}' "
                     "(apt-get install python3-httpx, or pip install httpx)\n")
    sys.exit(3)


if __name__ == "__main__":
    _ensure("httpx")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent_workload as wl  # noqa: E402

# Common English words that BPE tokenizers (GPT-2 style, SmolLM2, Llama) keep as one token
# each with their leading space: synthetic text of n words is about n tokens (calibrated
# against the server at start-up unless --no-calibrate).
WORDS = ("time year people way day man thing woman life child world school state family student "
         "group country problem hand part place case week company system program question work "
         "government number night point home water room mother area money story fact month lot "
         "right study book eye job word business issue side kind head house service friend father "
         "power hour game line end member law car city name team minute idea body information back "
         "parent face level office door health person art war history party result change morning "
         "reason research girl moment air teacher force education food road field river tree light "
         "music voice color paper table window market street letter rate price plan step age").split()

# --shared-prefix: the system text every conversation starts with (words drawn by a constant
# seed); the calibration probe uses the same number of words of another draw.
SHARED_PREFIX_HEAD = "You are an agent. Use the tools, then answer. "
SHARED_PREFIX_SEED, SHARED_PREFIX_SALT, SHARED_PREFIX_PROBE_SALT = 0x5eed, 0xf1, 0xf2

CALL_ARG = "lookup"  # the argument of the example calls in the prompt (one token)
CALL_OVERHEAD = 18  # tokens of a call with a one-word argument, ChatML/SmolLM2 (measured)


def synth_words(seed, salt, n):
    rng = random.Random((seed * 1000003 + salt) & ((1 << 63) - 1))
    return " ".join(rng.choice(WORDS) for _ in range(max(0, n)))


def tool_def(name, hint_s=None):
    d = {"type": "function", "function": {
        "name": name, "description": f"Runs the {name} tool on the input.",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}},
                       "required": ["input"]}}}
    if hint_s is not None:
        d["expected_duration_ms"] = hint_s * 1000.0
    return d


def percentile(values, q):
    """Linear interpolation at rank q*(n-1) (numpy's default; src/workload/metrics.cpp)."""
    if not values:
        return 0.0
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def stats(values):
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    return {"mean": sum(values) / len(values), "p50": percentile(values, 0.5),
            "p90": percentile(values, 0.9), "p99": percentile(values, 0.99)}


def summarize(records, duration_s):
    done = [r for r in records if r["completed"]]
    nl = [(r["end_s"] - r["arrival_s"] - r["interception_s"]) / r["output_tokens"] for r in done]
    ttft = [r["first_token_s"] - r["arrival_s"] for r in done]
    cont = [t["ttft_s"] for r in done for t in r.get("turns", [])[1:] if t.get("ttft_s") is not None]
    return {"submitted": len(records), "completed": len(done), "duration_s": duration_s,
            "throughput_rps": len(done) / duration_s,
            "normalized_latency_s_per_token": stats(nl), "ttft_s": stats(ttft),
            "ttft_continuation_s": dict(stats(cont), count=len(cont))}


def prefix_summary(records):
    """Prompt tokens and those the server reported cached, summed over every turn sent (of
    finished requests or not), over first turns and over continuation turns; hit = cached /
    prompt."""
    def part(turns):
        p = sum(t.get("prompt", 0) for t in turns)
        c = sum(t.get("cached", 0) for t in turns)
        out = {"turns": len(turns), "prompt_tokens": p, "cached_tokens": c,
               "hit_rate": c / p if p else 0.0}
        if any("server_cache_n" in t for t in turns):  # llama-server's timings
            out["server_prompt_n"] = sum(t.get("server_prompt_n", 0) for t in turns)
            out["server_cache_n"] = sum(t.get("server_cache_n", 0) for t in turns)
        return out
    turns = [t for r in records for t in r.get("turns", [])]
    first = [r["turns"][0] for r in records if r.get("turns")]
    cont = [t for r in records for t in r.get("turns", [])[1:]]
    return {"all": part(turns), "first_turns": part(first), "continuations": part(cont)}


# ---------------------------------------------------------------------------------------------
# Prometheus text

METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_LINE.match(line)
        if not m:
            continue
        try:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        except ValueError:
            pass
    return out


def metrics_report(before, after):
    """Server-side deltas (counters) and the engine's policy, from infercept's /metrics; keys
    mirror `infercept bench --json`. None when the server has no such metrics."""
    if before is None or after is None:
        return None
    d = {k: after[k] - before.get(k, 0.0) for k in after
         if k.split("{")[0].endswith(("_total", "_sum", "_count"))}

    def g(key):
        v = d.get(key)
        return None if v is None else (int(round(v)) if abs(v - round(v)) < 1e-6 else v)

    p = "infercept:"
    info = next((k for k in after if k.startswith(p + "engine_info{")), None)
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info)) if info else {}
    rep = {
        "policy": labels.get("policy"), "estimator": labels.get("estimator"),
        "interceptions": g(p + "engine_interceptions_total"),
        "recomputed_tokens": g(p + "recomputed_tokens_total"),
        "swapped_out_tokens": g(p + 'swapped_tokens_total{direction="out"}'),
        "swapped_in_tokens": g(p + 'swapped_tokens_total{direction="in"}'),
        "swapped_out_bytes": g(p + 'swapped_bytes_total{direction="out"}'),
        "swapped_in_bytes": g(p + 'swapped_bytes_total{direction="in"}'),
        "preemptions": g(p + "num_preemptions_total"),
        "cached_prompt_tokens": g(p + "prompt_tokens_cached_total"),
        "prompt_tokens_computed": g(p + "engine_prompt_tokens_computed_total"),
        "prefix_cache_query_tokens": g(p + "prefix_cache_queries_total"),
        "prefix_cache_hit_tokens": g(p + "prefix_cache_hits_total"),
        "resumes": {"prefix": g(p + 'interception_resumes_total{how="prefix"}'),
                    "explicit": g(p + 'interception_resumes_total{how="explicit"}')},
        "waste_byte_seconds": {c: d.get(p + f'waste_byte_seconds_total{{cause="{c}"}}')
                               for c in ("recompute", "preserve", "swap_stall")},
        "decisions": {s: g(p + f'policy_decisions_total{{strategy="{s}"}}')
                      for s in ("discard", "swap", "preserve")},
        "counters_delta": {k: v for k, v in sorted(d.items()) if v},
    }
    if not any(k.startswith(p) for k in after):
        rep = {"counters_delta": rep["counters_delta"]}  # another server: its raw counters
        if any(k.startswith("llamacpp:") for k in after):  # llama.cpp's llama-server --metrics
            rep.update(prompt_tokens_computed=g("llamacpp:prompt_tokens_total"),
                       cached_prompt_tokens=g("llamacpp:prompt_tokens_cached_total"),
                       generated_tokens=g("llamacpp:tokens_predicted_total"))
    return rep


# ---------------------------------------------------------------------------------------------
# One streamed chat completion


class ServerError(Exception):
    pass


async def stream_chat(client, url, body, headers):
    """POSTs a streamed chat completion. Returns a dict: content, calls, finish, usage,
    interception, timings (llama-server's), t_first (monotonic time of the first chunk
    carrying a token, or None)."""
    out = {"content": "", "calls": [], "finish": None, "usage": None, "interception": None,
           "t_first": None, "timings": None}
    calls = {}
    async with client.stream("POST", url, json=body, headers=headers) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode("utf-8", "replace")
            raise ServerError(f"HTTP {resp.status_code} from {url}: {text[:300]}")
        done = False
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            j = json.loads(data)
            if "error" in j:
                raise ServerError("stream error: " + json.dumps(j["error"])[:300])
            if j.get("usage"):
                out["usage"] = j["usage"]
            if j.get("interception"):
                out["interception"] = j["interception"]
            if j.get("timings"):  # llama-server: prompt_n, cache_n, prompt_ms, ...
                out["timings"] = j["timings"]
            for ch in j.get("choices") or []:
                delta = ch.get("delta") or {}
                lp = (ch.get("logprobs") or {}).get("content") if ch.get("logprobs") else None
                if out["t_first"] is None and (delta.get("content") or delta.get("tool_calls") or lp):
                    out["t_first"] = time.monotonic()
                out["content"] += delta.get("content") or ""
                for tc in delta.get("tool_calls") or []:
                    c = calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "arguments": ""})
                    c["id"] = tc.get("id") or c["id"]
                    fn = tc.get("function") or {}
                    c["name"] += fn.get("name") or ""
                    c["arguments"] += fn.get("arguments") or ""
                if ch.get("finish_reason"):
                    out["finish"] = ch["finish_reason"]
        if not done:
            raise ServerError("stream ended without [DONE]")
    out["calls"] = [calls[i] for i in sorted(calls)]
    return out


# ---------------------------------------------------------------------------------------------
# The load generator


class LoadGen:
    def __init__(self, args, requests, duration_s):
        self.a = args
        self.requests = requests
        self.duration_s = duration_s
        self.base = args.base_url.rstrip("/")
        self.root = re.sub(r"/v1$", "", self.base)
        self.headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        self.model = args.model
        self.overhead = 0  # template tokens around the prompt's filler (calibrated)
        self.tokens_per_word = 1.0
        self.call_prefill = args.call_prefill.encode("utf-8").decode("unicode_escape")
        self.counters = {k: 0 for k in (
            "segments", "server_tool_calls", "server_interceptions", "synthesized_calls",
            "native_resumes", "native_fallbacks", "cached_prompt_tokens", "deleted_interceptions",
            "hints_sent", "generated_tokens_scripted", "generated_tokens_actual",
            "returned_tokens", "prompt_tokens_scripted", "prompt_tokens_actual",
            "prompt_tokens_all_turns", "first_turn_cached_tokens", "errors")}
        self.errors = {}
        self.records = []
        # --shared-prefix: the system text (None: off) and the tool list every turn carries.
        self.shared_text = None
        self.shared_tools = shared_tool_names(requests, args.workload) if args.shared_prefix > 0 else None
        self.shared_info = None

    # -- the prompt ---------------------------------------------------------------------------
    def words_for(self, tokens):
        return max(0, int(round(tokens / self.tokens_per_word)))

    def call_arg(self, r):
        """The argument of this request's example calls: sized so that copying the call
        generates about the mean of its segments' tokens (--call-words auto), or fixed."""
        if self.a.call_words == "auto":
            gens = [s["generate_tokens"] for s in r["segments"] if s.get("tool")] or [1]
            n = int(round(sum(gens) / len(gens))) - CALL_OVERHEAD + 1
            n = max(1, min(n, self.a.max_call_words))
        else:
            n = max(1, int(self.a.call_words))
        if n == 1:
            return CALL_ARG
        return CALL_ARG + " " + synth_words(r["seed"], 999, self.words_for(n - 1))

    def initial_messages(self, r, filler_tokens):
        tool = r["segments"][0].get("tool") or "tool"
        filler = synth_words(r["seed"], 0, self.words_for(filler_tokens))
        if self.shared_text is not None:  # the shared system turn, then the agent's own part
            msgs = [{"role": "system", "content": self.shared_text},
                    {"role": "user", "content": f"Task {r['id']}: use {tool}. " + filler}]
        else:
            msgs = [{"role": "system", "content": "You are an agent. Use the tool, then answer. " + filler},
                    {"role": "user", "content": f"Task {r['id']}: use {tool}."}]
        if self.a.call_style != "synthetic":
            for k in range(self.a.call_examples):
                cid = f"call_example_{k}"
                msgs.append({"role": "assistant", "content": None, "tool_calls": [{
                    "id": cid, "type": "function",
                    "function": {"name": tool, "arguments": json.dumps({"input": self.call_arg(r)})}}]})
                # Results shaped like the real ones, so that the model learns to call again
                # after a long tool answer, not to copy the answer.
                msgs.append({"role": "tool", "tool_call_id": cid, "content": synth_words(
                    r["seed"], 1000 + k, self.words_for(r["segments"][0].get("return_tokens", 8)))})
        return msgs

    def chat_body(self, r, messages, seg, tools_for):
        body = {"model": self.model, "messages": messages, "temperature": self.a.temperature,
                "seed": r["seed"] % (1 << 31), "stream": True,
                "stream_options": {"include_usage": True}}
        last = not seg.get("tool")
        n = seg["generate_tokens"]
        if self.a.call_style != "synthetic" and tools_for:
            hint = seg.get("tool_seconds") if (self.a.hint and not last) else None
            if self.shared_text is not None:  # the same list on every turn (no hint in it)
                body["tools"] = [tool_def(t) for t in self.shared_tools]
            else:
                body["tools"] = [tool_def(tools_for, hint)]
            if last:
                body["tool_choice"] = "auto"
            elif self.a.call_style == "scripted":  # infercept's extension: exactly n, then the call
                body["tool_choice"] = "auto"
                body["intercept_after_tokens"] = n
                body["intercept_tool"] = tools_for
            elif self.a.call_style == "named":
                body["tool_choice"] = {"type": "function", "function": {"name": tools_for}}
            else:
                body["tool_choice"] = "required"
            if not last and self.a.call_style != "scripted":
                n = max(n, self.a.min_call_tokens)
            if not last and self.call_prefill:  # the call's opening, for the model to go on from
                body["messages"] = messages + [{"role": "assistant", "content": self.call_prefill}]
        body["max_tokens"] = n
        if self.a.logprobs:
            body["logprobs"] = True
        return body

    # -- set-up -------------------------------------------------------------------------------
    async def get_metrics(self, client):
        if self.a.no_metrics:
            return None
        try:
            r = await client.get(self.root + "/metrics", headers=self.headers)
            return parse_metrics(r.text) if r.status_code == 200 else None
        except Exception:
            return None

    async def setup(self, client):
        if not self.model:
            r = await client.get(self.base + "/models", headers=self.headers)
            r.raise_for_status()
            self.model = r.json()["data"][0]["id"]
        if self.a.shared_prefix > 0:
            self.shared_info = {"words": self.a.shared_prefix, "tools": list(self.shared_tools),
                                "tokens": None, "skeleton_tokens": None}
            if self.a.no_calibrate:
                self.shared_text = shared_prefix_text(self.a.shared_prefix, SHARED_PREFIX_SALT)
        if self.a.no_calibrate:
            return
        # Prompt tokens of the skeleton with no filler, and with 200 filler words: the template
        # overhead and the tokens per synthetic word.
        probe = {"id": 0, "seed": 1, "segments": [{"generate_tokens": 1, "tool": "wikipedia"}]}
        seg = {"generate_tokens": 1}
        counts = []
        for filler in (0, 200):
            self.tokens_per_word = 1.0
            msgs = self.initial_messages(probe, filler)
            body = self.chat_body(probe, msgs, seg, "wikipedia")
            body["max_tokens"] = 1
            body.pop("logprobs", None)
            res = await stream_chat(client, self.base + "/chat/completions", body, self.headers)
            if res["interception"]:
                await self.delete_interception(client, res["interception"]["id"])
            counts.append((res["usage"] or {}).get("prompt_tokens", 0))
        if counts[0] > 0 and counts[1] > counts[0]:
            self.overhead = counts[0]
            self.tokens_per_word = (counts[1] - counts[0]) / 200.0
        else:
            self.tokens_per_word = 1.0
        if self.a.shared_prefix > 0:
            # The skeleton with a shared prefix of the same length but other words (so that
            # nothing of the real one is cached before the run): what the prefix adds.
            self.shared_text = shared_prefix_text(self.a.shared_prefix, SHARED_PREFIX_PROBE_SALT)
            body = self.chat_body(probe, self.initial_messages(probe, 0), seg, "wikipedia")
            body["max_tokens"] = 1
            body.pop("logprobs", None)
            res = await stream_chat(client, self.base + "/chat/completions", body, self.headers)
            if res["interception"]:
                await self.delete_interception(client, res["interception"]["id"])
            n = (res["usage"] or {}).get("prompt_tokens", 0)
            self.shared_info["skeleton_tokens"] = n
            self.shared_info["tokens"] = n - counts[0] if counts[0] > 0 and n > 0 else None
        if self.shared_text is not None:
            self.shared_text = shared_prefix_text(self.a.shared_prefix, SHARED_PREFIX_SALT)

    async def delete_interception(self, client, iid):
        try:
            r = await client.delete(f"{self.base}/interceptions/{iid}", headers=self.headers)
            if r.status_code == 200:
                self.counters["deleted_interceptions"] += 1
        except Exception:
            pass

    # -- one agent ----------------------------------------------------------------------------
    async def agent(self, client, sem, r, t0):
        rec = {"id": r["id"], "augmentation": r["augmentation"], "arrival_s": r["arrival_s"],
               "first_token_s": 0.0, "end_s": 0.0, "interception_s": 0.0, "output_tokens": 0,
               "generated_tokens": 0, "queue_s": 0.0, "segments": len(r["segments"]),
               "server_calls": 0, "resumes": 0, "cached_tokens": 0, "completed": False,
               "turns": []}
        self.records.append(rec)
        async with sem:
            rec["queue_s"] = time.monotonic() - t0 - r["arrival_s"]
            try:
                await self.run_agent(client, r, t0, rec)
                rec["completed"] = True
            except asyncio.CancelledError:
                rec["error"] = "unfinished at the end of the run"
                iid = rec.pop("open_interception", None)
                if iid:  # do not leave it paused on the server for the next run
                    try:
                        await asyncio.wait_for(self.delete_interception(client, iid), 5)
                    except Exception:
                        pass
                raise
            except Exception as e:  # one failed agent does not stop the run
                rec.pop("open_interception", None)
                msg = f"{type(e).__name__}: {e}"
                rec["error"] = msg[:300]
                self.counters["errors"] += 1
                key = msg.split(":")[0] + (": " + msg.split("HTTP ")[1][:3] if "HTTP " in msg else "")
                self.errors[key] = self.errors.get(key, 0) + 1

    async def run_agent(self, client, r, t0, rec):
        a = self.a
        segs = r["segments"]
        filler = max(0, r["prompt_tokens"] - self.overhead)
        messages = self.initial_messages(r, filler)
        tool0 = segs[0].get("tool") or (segs[-1].get("tool") or "")
        pending = None  # (interception id, [call ids]) of the previous turn
        result_text = None
        self.counters["prompt_tokens_scripted"] += r["prompt_tokens"]
        self.counters["generated_tokens_scripted"] += sum(s["generate_tokens"] for s in segs)
        for i, seg in enumerate(segs):
            last = not seg.get("tool")
            tool = seg.get("tool") or tool0
            t_send = time.monotonic()
            if a.mode == "native" and pending is not None:
                scripted = a.call_style == "scripted" and not last
                body = {"tool_results": [{"tool_call_id": cid, "content": result_text if k == 0 else "ok"}
                                         for k, cid in enumerate(pending[1])],
                        "max_tokens": (seg["generate_tokens"] if last or scripted else
                                       max(seg["generate_tokens"], a.min_call_tokens)),
                        "stream": True, "stream_options": {"include_usage": True}}
                if scripted:
                    body["intercept_after_tokens"] = seg["generate_tokens"]
                    body["intercept_tool"] = tool
                try:
                    res = await stream_chat(client, f"{self.base}/interceptions/{pending[0]}/resume",
                                            body, self.headers)
                    self.counters["native_resumes"] += 1
                    rec["resumes"] += 1
                except ServerError as e:
                    if "HTTP 404" not in str(e) and "HTTP 410" not in str(e):
                        raise
                    self.counters["native_fallbacks"] += 1  # expired or unknown: resend it all
                    res = await stream_chat(client, self.base + "/chat/completions",
                                            self.chat_body(r, messages, seg, tool), self.headers)
                    res["resumed"] = False
            else:
                if a.mode == "native" and i > 0:
                    self.counters["native_fallbacks"] += 1
                res = await stream_chat(client, self.base + "/chat/completions",
                                        self.chat_body(r, messages, seg, tool), self.headers)
            t_end = time.monotonic()
            self.counters["segments"] += 1
            kind = "resume" if (a.mode == "native" and pending is not None and res.get("resumed", True)) else "chat"
            usage = res["usage"] or {}
            gen = int(usage.get("completion_tokens") or 0)
            cached = int(((usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0)
            n_prompt = int(usage.get("prompt_tokens") or 0)
            rec["generated_tokens"] += gen
            rec["cached_tokens"] += cached
            self.counters["generated_tokens_actual"] += gen
            self.counters["cached_prompt_tokens"] += cached
            self.counters["prompt_tokens_all_turns"] += n_prompt
            if i == 0:
                self.counters["prompt_tokens_actual"] += n_prompt
                self.counters["first_turn_cached_tokens"] += cached
                rec["first_token_s"] = (res["t_first"] or t_end) - t0
            if res["calls"]:
                self.counters["server_tool_calls"] += 1
                rec["server_calls"] += 1
            iid = (res["interception"] or {}).get("id")
            if iid:
                self.counters["server_interceptions"] += 1
            turn = {"kind": kind, "finish": res["finish"], "generated": gen, "max_tokens": (
                seg["generate_tokens"] if last else max(seg["generate_tokens"], a.min_call_tokens)),
                "prompt": n_prompt, "cached": cached, "call": bool(res["calls"]), "paused": bool(iid),
                "ttft_s": (res["t_first"] or t_end) - t_send}
            tm = res.get("timings") or {}
            if "cache_n" in tm:
                turn["server_prompt_n"] = int(tm.get("prompt_n") or 0)
                turn["server_cache_n"] = int(tm.get("cache_n") or 0)
                turn["server_prompt_ms"] = tm.get("prompt_ms")
            rec["turns"].append(turn)
            if a.verbose:
                print(f"request {r['id']} turn {i}: {rec['turns'][-1]} {json.dumps(res['content'][:160])} "
                      f"{json.dumps(res['calls'])[:160]}", file=sys.stderr, flush=True)
            if last:
                if iid:  # the model called a tool on its last turn: nobody will resume it
                    await self.delete_interception(client, iid)
                messages.append({"role": "assistant", "content": res["content"] or ""})
                rec["end_s"] = t_end - t0
                break
            # The turn ends in a call: the server's, or one made up here.
            if res["calls"]:
                call_ids = [c["id"] or f"call_lg_{r['id']}_{i}_{k}" for k, c in enumerate(res["calls"])]
                messages.append({"role": "assistant", "content": res["content"] or None, "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for cid, c in zip(call_ids, res["calls"])]})
            else:
                self.counters["synthesized_calls"] += 1
                if iid:
                    await self.delete_interception(client, iid)
                    iid = None
                call_ids = [f"call_lg_{r['id']}_{i}"]
                messages.append({"role": "assistant", "content": res["content"] or None, "tool_calls": [
                    {"id": call_ids[0], "type": "function",
                     "function": {"name": tool, "arguments": json.dumps({"input": self.call_arg(r)})}}]})
            pending = (iid, call_ids) if iid else None
            rec["open_interception"] = iid
            # The tool runs: the client waits; the server hears of the duration only with --hint.
            if a.hint and a.mode == "native" and iid:
                try:
                    await client.post(f"{self.base}/interceptions/{iid}/hint", headers=self.headers,
                                      json={"expected_duration_ms": seg["tool_seconds"] * 1000.0})
                    self.counters["hints_sent"] += 1
                except Exception:
                    pass
            wait = seg["tool_seconds"] * self.tool_scale - (time.monotonic() - t_end)
            if wait > 0:
                await asyncio.sleep(wait)
            result_text = synth_words(r["seed"], i + 1, self.words_for(seg["return_tokens"]))
            for k, cid in enumerate(call_ids):
                messages.append({"role": "tool", "tool_call_id": cid,
                                 "content": result_text if k == 0 else "ok"})
            rec["output_tokens"] += seg["return_tokens"]
            self.counters["returned_tokens"] += seg["return_tokens"]
            rec["interception_s"] += time.monotonic() - t_end
        rec.pop("open_interception", None)
        rec["output_tokens"] += rec["generated_tokens"]
        if rec["output_tokens"] <= 0:
            rec["output_tokens"] = 1  # an empty answer: keep the ratio finite

    # -- the run ------------------------------------------------------------------------------
    async def run(self):
        import httpx
        a = self.a
        self.tool_scale = a.trace_time_scale
        limits = httpx.Limits(max_connections=a.max_concurrency + 8,
                              max_keepalive_connections=a.max_concurrency + 8)
        async with httpx.AsyncClient(timeout=httpx.Timeout(a.timeout), limits=limits) as client:
            await self.setup(client)
            before = await self.get_metrics(client)
            sem = asyncio.Semaphore(a.max_concurrency)
            t0 = time.monotonic()
            tasks = []
            for r in self.requests:
                delay = t0 + r["arrival_s"] - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(self.agent(client, sem, r, t0)))
            deadline = t0 + self.duration_s + a.drain
            pending = [t for t in tasks if not t.done()]
            if pending:
                _, pending = await asyncio.wait(pending, timeout=max(0.0, deadline - time.monotonic()))
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=30)
            wall = time.monotonic() - t0
            after = await self.get_metrics(client)
        self.records.sort(key=lambda rec: rec["id"])
        return self.result(before, after, wall)

    def result(self, before, after, wall):
        a = self.a
        by_aug = {}
        for aug in sorted({rec["augmentation"] for rec in self.records}):
            by_aug[aug] = summarize([x for x in self.records if x["augmentation"] == aug], self.duration_s)
        server = metrics_report(before, after)
        res = {
            "tool": "loadgen", "workload": a.workload, "mode": a.mode, "call_style": a.call_style,
            "base_url": a.base_url, "model": self.model, "label": a.label,
            "rate_requested": a.rate if wl_is_builtin(a.workload) else None,
            "rate": len(self.requests) / self.duration_s, "duration_s": self.duration_s,
            "wall_s": wall, "seed": a.seed, "time_scale": a.time_scale,
            "context_scale": a.context_scale, "max_context": a.max_context,
            "max_concurrency": a.max_concurrency, "hint": a.hint,
            "calibration": {"template_tokens": self.overhead, "tokens_per_word": self.tokens_per_word},
            "shared_prefix": self.shared_info,
            "summary": summarize(self.records, self.duration_s), "by_augmentation": by_aug,
            "prefix": prefix_summary(self.records),
            "client": dict(self.counters, error_kinds=self.errors),
            "server": server,
        }
        if server:
            res["policy"] = server.get("policy")
            res["estimator"] = server.get("estimator")
            for k in ("interceptions", "recomputed_tokens", "swapped_out_tokens", "swapped_in_tokens",
                      "preemptions", "waste_byte_seconds", "decisions"):
                if k in server:
                    res[k] = server[k]
            if server.get("prefix_cache_query_tokens") is not None:
                q, h = server["prefix_cache_query_tokens"], server["prefix_cache_hit_tokens"] or 0
                res["prefix_cache"] = {"query_tokens": q, "hit_tokens": h, "hit_rate": h / q if q else 0.0}
        if not res["label"]:
            res["label"] = (res.get("policy") or "server") + ("" if a.mode == "standard" else f" ({a.mode})")
        res["requests"] = self.records
        return res


def wl_is_builtin(name):
    return name in wl.BUILTIN_WORKLOADS


def shared_prefix_text(words, salt):
    """The shared system message of --shared-prefix: the same for every agent and server."""
    return SHARED_PREFIX_HEAD + synth_words(SHARED_PREFIX_SEED, salt, words)


def shared_tool_names(requests, workload):
    """Every tool of the workload, in a fixed order: Table 1's for the Table 1 workloads, the
    session tools for sessions."""
    if workload == "sessions":
        return [t[0] for t in wl.DEFAULT_SESSION_TOOLS]
    if wl_is_builtin(workload):
        return [p[1] for p in wl.DEFAULT_PROFILES]
    return sorted({s["tool"] for r in requests for s in r["segments"] if s.get("tool")}) or ["tool"]


def ms(x):
    return f"{x * 1e3:.1f}"


def format_table(res):
    lines = [f"loadgen: {res['workload']} at {res['rate']:.2f} req/s for {res['duration_s']:g} s, "
             f"mode {res['mode']}, server {res['base_url']} ({res.get('policy') or 'policy unknown'}), "
             f"{res['wall_s']:.0f} s run", "",
             "| scope | done/submitted | completed/s | norm. latency mean / p50 / p90 / p99 (ms/token) "
             "| TTFT mean / p50 / p90 / p99 (ms) |", "|---|---|---|---|---|"]
    rows = [("all", res["summary"])] + sorted(res["by_augmentation"].items())
    for name, s in rows:
        nl, tt = s["normalized_latency_s_per_token"], s["ttft_s"]
        lines.append(f"| {name} | {s['completed']}/{s['submitted']} | {s['throughput_rps']:.3f} | "
                     f"{ms(nl['mean'])} / {ms(nl['p50'])} / {ms(nl['p90'])} / {ms(nl['p99'])} | "
                     f"{ms(tt['mean'])} / {ms(tt['p50'])} / {ms(tt['p90'])} / {ms(tt['p99'])} |")
    c = res["client"]
    cont = res["summary"].get("ttft_continuation_s")
    if cont:
        lines += ["", f"continuation turns' TTFT (send to first token, {cont['count']} turns of finished "
                  f"requests): mean / p50 / p90 / p99 {ms(cont['mean'])} / {ms(cont['p50'])} / "
                  f"{ms(cont['p90'])} / {ms(cont['p99'])} ms"]
    px = res.get("prefix")
    if px:
        def hr(k):
            return f"{100 * px[k]['hit_rate']:.1f}% ({px[k]['cached_tokens']}/{px[k]['prompt_tokens']})"
        sp = res.get("shared_prefix")
        lines.append((f"shared prefix: {sp['words']} words, {sp['tokens']} tokens measured; " if sp else "")
                     + f"cached/prompt tokens: all turns {hr('all')}, first turns {hr('first_turns')}, "
                     f"continuations {hr('continuations')}"
                     + (f"; server prefix cache hit {100 * res['prefix_cache']['hit_rate']:.1f}% of "
                        f"{res['prefix_cache']['query_tokens']} looked up" if res.get("prefix_cache") else ""))
    lines += ["", f"client: {c['segments']} turns, {c['server_tool_calls']} tool calls made by the model "
              f"({c['server_interceptions']} left paused by the server), {c['synthesized_calls']} made up "
              f"by the client; native resumes {c['native_resumes']}, fallbacks {c['native_fallbacks']}; "
              f"cached prompt tokens {c['cached_prompt_tokens']}; generated tokens "
              f"{c['generated_tokens_actual']} (script {c['generated_tokens_scripted']}), prompt tokens "
              f"{c['prompt_tokens_actual']} (script {c['prompt_tokens_scripted']}); errors {c['errors']}"
              + (f" {c['error_kinds']}" if c["errors"] else "")]
    s = res.get("server")
    if s and "recomputed_tokens" in s:
        w = s["waste_byte_seconds"]
        wtxt = " / ".join("n/a" if w[k] is None else f"{w[k] / 1e9:.3f}" for k in ("recompute", "preserve", "swap_stall"))
        lines.append(f"server ({s['policy']}, {s['estimator']}): interceptions {s['interceptions']}, "
                     f"resumes prefix/explicit {s['resumes']['prefix']}/{s['resumes']['explicit']}, "
                     f"recomputed tokens {s['recomputed_tokens']}, swapped out/in "
                     f"{s['swapped_out_tokens']}/{s['swapped_in_tokens']} tokens "
                     f"({(s['swapped_out_bytes'] or 0) / 1e6:.1f}/{(s['swapped_in_bytes'] or 0) / 1e6:.1f} MB), "
                     f"preemptions {s['preemptions']}, waste GB*s recompute / preserve / swap stall {wtxt}")
    elif s and s.get("prompt_tokens_computed") is not None:
        lines.append(f"server (llama.cpp): prompt tokens computed {s['prompt_tokens_computed']}, "
                     f"from its cache {s['cached_prompt_tokens']}; generated {s['generated_tokens']}")
    elif s is None:
        lines.append("server: no /metrics")
    return "\n".join(lines)


def build_parser():
    ap = argparse.ArgumentParser(
        prog="loadgen.py", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("server")
    g.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="the API root (default %(default)s)")
    g.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", ""),
                   help="Bearer key (default $OPENAI_API_KEY; none if empty)")
    g.add_argument("--model", default="", help="model name (default: the first of GET /models)")
    g.add_argument("--timeout", type=float, default=600.0, help="per HTTP request, seconds")
    g.add_argument("--no-metrics", action="store_true", help="do not read /metrics")
    g = ap.add_argument_group("workload")
    g.add_argument("--workload", default="mixed",
                   help="mixed, math, qa, ve, chat, image, tts (Table 1), sessions (long agent "
                        "sessions) or a JSONL trace file")
    g.add_argument("--rate", type=float, default=1.0, help="Poisson arrivals, requests/s")
    g.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--time-scale", type=float, default=1.0,
                   help="multiplies tool durations (built-in workloads: as `infercept bench`; "
                        "trace files: applied at replay)")
    g.add_argument("--context-scale", type=float, default=1.0, help="multiplies drawn context lengths")
    g.add_argument("--max-context", type=int, default=0,
                   help="clamp on the final context, sessions: shared prefix included (0: none)")
    g.add_argument("--tokens", action="append", default=[], metavar="AUG.FIELD=MIN-MAX",
                   help="token range override, e.g. '*.generate=8-16' (repeatable)")
    g.add_argument("--session", action="append", default=[], metavar="KEY=VALUE",
                   help="sessions: system=TOKENS, turns|task|generate=MEAN[,STD], "
                        "TOOL.seconds|TOOL.output=MEAN[,STD], TOOL.weight=W (repeatable; as "
                        "`infercept bench --session`)")
    g.add_argument("--trace-out", default="", help="write the replayed trace (docs/TRACE.md) here")
    g.add_argument("--shared-prefix", type=int, default=None, metavar="TOKENS",
                   help="every conversation starts with the same system message of TOKENS words "
                        "(about TOKENS tokens) and the same tool definitions, then its own part "
                        "(the prefix cache's workload; see below; default: sessions' system "
                        "prompt, else 0)")
    g = ap.add_argument_group("client")
    g.add_argument("--mode", choices=["standard", "native"], default="standard")
    g.add_argument("--max-concurrency", type=int, default=64, help="agents running at once")
    g.add_argument("--drain", type=float, default=None,
                   help="seconds after the last arrival to let agents finish (default 3 x duration, at least 60)")
    g.add_argument("--hint", action="store_true", help="tell the server each tool's duration")
    g.add_argument("--call-style", choices=["required", "named", "synthetic", "scripted"], default="required",
                   help="how a turn is made to end in a tool call (see below); scripted: infercept's "
                        "intercept_after_tokens extension, exactly the segment's tokens and then the "
                        "call, paused (works with random-weight checkpoints)")
    g.add_argument("--call-examples", type=int, default=2, help="example calls in each prompt")
    g.add_argument("--min-call-tokens", type=int, default=32,
                   help="max_tokens of a turn that must end in a call is at least this")
    g.add_argument("--call-words", default="1",
                   help="words in the example calls' argument: a number, or auto (sized to the "
                        "request's mean tokens per segment, up to --max-call-words)")
    g.add_argument("--max-call-words", type=int, default=64)
    g.add_argument("--call-prefill", default="", metavar="TEXT",
                   help="on a turn that must end in a call, end the messages with an assistant message "
                        "TEXT (backslash escapes decoded), the opening of a call in the model's format, "
                        "e.g. '<tool_call>\\n' (ChatML/Hermes): for a server that does not force the "
                        "opening itself (llama.cpp's llama-server; infercept does)")
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--no-logprobs", dest="logprobs", action="store_false",
                   help="do not ask for logprobs (they time the first token of a held-back tool call)")
    g.add_argument("--no-calibrate", action="store_true",
                   help="assume 1 token per synthetic word and no template overhead")
    g = ap.add_argument_group("output")
    g.add_argument("--json", default="", help="write the result (summary, counters, per request) here")
    g.add_argument("--label", default="", help="name of this line in bench/report.py plots")
    g.add_argument("--quiet", action="store_true", help="no table on stdout")
    g.add_argument("--verbose", action="store_true", help="one line per turn on stderr")
    return ap


def load_requests(a):
    """(requests, duration_s) for the arguments."""
    if a.session and a.workload != "sessions":
        raise ValueError("--session applies to --workload sessions only")
    if wl_is_builtin(a.workload):
        spec = wl.Spec(name=a.workload, rate=a.rate, duration_s=a.duration, seed=a.seed,
                       time_scale=a.time_scale, context_scale=a.context_scale, max_context=a.max_context)
        for o in a.tokens:
            wl.apply_token_override(spec, o)
        for o in a.session:
            wl.apply_session_override(spec, o)
        if a.shared_prefix is None and a.workload == "sessions":
            a.shared_prefix = wl.session_shared_prefix_tokens(spec)
        a.trace_time_scale = 1.0  # already in the draw
        return wl.generate_workload(spec), a.duration
    reqs = wl.read_trace(a.workload)
    a.trace_time_scale = a.time_scale
    duration = max([r["arrival_s"] for r in reqs] + [1.0])
    return reqs, duration


def main(argv=None):
    a = build_parser().parse_args(argv)
    if a.max_concurrency < 1:
        sys.exit("loadgen.py: --max-concurrency must be >= 1")
    if a.shared_prefix is not None and a.shared_prefix < 0:
        sys.exit("loadgen.py: --shared-prefix must be >= 0")
    try:
        requests, duration = load_requests(a)
    except (ValueError, OSError) as e:
        sys.exit(f"loadgen.py: {e}")
    if a.shared_prefix is None:
        a.shared_prefix = 0
    if a.drain is None:
        a.drain = max(60.0, 3.0 * duration)
    if a.trace_out:
        wl.write_trace(a.trace_out, requests)
    res = asyncio.run(LoadGen(a, requests, duration).run())
    if not a.quiet:
        print(format_table(res), flush=True)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
