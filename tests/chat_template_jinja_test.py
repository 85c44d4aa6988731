#!/usr/bin/env python3
"""infercept's Jinja interpreter against Python's jinja2 on real models' chat templates.

Each template (llama.cpp's models/templates/*.jinja, which the Makefile extracts from the
llama-cpp-python source distribution on PyPI into build/chat-templates) renders the same
conversations twice: with jinja2 in the environment transformers' apply_chat_template uses
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
raise_exception and strftime_now) and with `infercept render-template`. The texts must be
equal byte for byte; where jinja2 raises (a template refusing a conversation, e.g. Llama 3.1
and two calls in one turn), infercept must fail too, with the template's own message.
Conversations: plain chat, a system prompt, tools with a call, its result and the answer,
two calls in one turn, the generation prompt on and off, text with quotes, newlines and
non-ASCII characters, and Qwen3's enable_thinking=False.

Skipped (exit 77) only when the templates were not fetched (no network at set-up).
Prints 'N passed, N failed'; exits non-zero on a failure.
"""
import argparse
import copy
import datetime
import json
import os
import subprocess
import sys
import tempfile

from checks import check, finish

# The templates that must match: popular instruct models (file names as in llama.cpp).
TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct": ("<|endoftext|>", "<|im_end|>"),
    "Qwen-Qwen3-0.6B": ("<|endoftext|>", "<|im_end|>"),
    "Qwen-QwQ-32B": ("<|endoftext|>", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
    "Mistral-Small-3.2-24B-Instruct-2506": ("<s>", "</s>"),
    "unsloth-mistral-Devstral-Small-2507": ("<s>", "</s>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-V3.1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "HuggingFaceTB-SmolLM3-3B": ("<|im_start|>", "<|im_end|>"),
    "ibm-granite-granite-3.3-2B-Instruct": ("<|end_of_text|>", "<|end_of_text|>"),
    "fireworks-ai-llama-3-firefunction-v2": ("<|begin_of_text|>", "<|eot_id|>"),
    "meetkai-functionary-medium-v3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "CohereForAI-c4ai-command-r-plus-tool_use": ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    "moonshotai-Kimi-K2": ("[BOS]", "[EOS]"),
}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
CALC = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"], "additionalProperties": False}}}


def call(cid, name, args):
    return {"type": "function", "id": cid, "function": {"name": name, "arguments": args}}


SYSTEM = {"role": "system", "content": "You are a terse assistant.\nAnswer in one line."}
USER = {"role": "user", "content": "What's the weather in Zürich? Say \"hi\" — then stop."}
CONVERSATIONS = {
    "plain": ([{"role": "user", "content": "Hello!"}], None),
    "multi_turn": ([SYSTEM, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello, how can I help?"},
                    {"role": "user", "content": "Tell me a {joke} with 'quotes'.\n\nThanks"}],
                   None),
    "tools_first_turn": ([SYSTEM, USER], [WEATHER, CALC]),
    "tool_round": ([SYSTEM, USER,
                    {"role": "assistant", "content": "",
                     "tool_calls": [call("abc123XYZ", "get_weather",
                                         {"city": "Zürich", "unit": "celsius"})]},
                    {"role": "tool", "tool_call_id": "abc123XYZ", "name": "get_weather",
                     "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
                    {"role": "assistant", "content": "It is 21.5 °C and clear."},
                    {"role": "user", "content": "And 17 * 23?"}], [WEATHER, CALC]),
    "two_calls": ([USER,
                   {"role": "assistant", "content": "",
                    "tool_calls": [call("abc123XYZ", "get_weather", {"city": "Paris"}),
                                   call("def456UVW", "calculator", {"expression": "17 * 23"})]},
                   {"role": "tool", "tool_call_id": "abc123XYZ", "name": "get_weather",
                    "content": "sunny"},
                   {"role": "tool", "tool_call_id": "def456UVW", "name": "calculator",
                    "content": "391"}], [WEATHER, CALC]),
    "no_tools_after_tools": ([{"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": "Hello! <think>no</think> ok"},
                              {"role": "user", "content": "Bye"}], None),
}


def transformers_env():
    """jinja2 as transformers' _compile_jinja_template sets it up."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class AssistantTracker(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body) \
                .set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_python(env, source, context):
    try:
        return True, env.from_string(source).render(**copy.deepcopy(context))
    except Exception as e:  # noqa: BLE001 - any template error is an expected outcome
        return False, f"{type(e).__name__}: {e}"


def render_infercept(binary, template_path, context, tmp):
    ctx_path = os.path.join(tmp, "context.json")
    with open(ctx_path, "w", encoding="utf-8") as f:
        json.dump(context, f, ensure_ascii=False)
    r = subprocess.run([binary, "render-template", "--template", template_path, "--context",
                        ctx_path], capture_output=True, timeout=60)
    if r.returncode != 0:
        return False, r.stderr.decode("utf-8", "replace").strip()
    return True, r.stdout.decode("utf-8")


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"at {i}: python {a[max(0, i - 40):i + 40]!r} vs infercept {b[max(0, i - 40):i + 40]!r}"
    return f"lengths {len(a)} vs {len(b)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--templates", required=True, help="folder of .jinja files")
    ap.add_argument("--all", action="store_true", help="every template in the folder")
    args = ap.parse_args()
    if not os.path.isdir(args.templates) or not os.listdir(args.templates):
        print(f"SKIP: no chat templates in {args.templates}: `make chat-templates` fetches them "
              "from PyPI (llama-cpp-python's source) and could not (no network at set-up?)")
        sys.exit(77)
    env = transformers_env()
    names = dict(TEMPLATES)
    if args.all:
        for f in sorted(os.listdir(args.templates)):
            if f.endswith(".jinja"):
                names.setdefault(f[:-len(".jinja")], ("<s>", "</s>"))
    with tempfile.TemporaryDirectory() as tmp:
        for name, (bos, eos) in names.items():
            path = os.path.join(args.templates, name + ".jinja")
            if not check(os.path.exists(path), f"{name}: template present"):
                continue
            with open(path, encoding="utf-8") as f:
                source = f.read()
            matched = total = 0
            for conv, (messages, tools) in CONVERSATIONS.items():
                for gen in (True, False):
                    extras = [{}]
                    if "enable_thinking" in source:
                        extras.append({"enable_thinking": False})
                    for extra in extras:
                        context = {"messages": messages, "tools": tools,
                                   "add_generation_prompt": gen, "bos_token": bos,
                                   "eos_token": eos, **extra}
                        what = f"{name} / {conv} / gen={gen}" + \
                            (f" / {extra}" if extra else "")
                        ok_py, out_py = render_python(env, source, context)
                        ok_ic, out_ic = render_infercept(args.binary, path, context, tmp)
                        total += 1
                        if ok_py:
                            same = ok_ic and out_py == out_ic
                            detail = "" if same else (
                                f": infercept failed: {out_ic}" if not ok_ic
                                else ": " + first_difference(out_py, out_ic))
                            matched += check(same, f"{what}: same text{detail}")
                        else:
                            # The template's own raise_exception message, or any error for
                            # a Python-level failure (both refuse the conversation).
                            raised = out_py.split(": ", 1)[1] if out_py.startswith(
                                "TemplateError") else None
                            same = not ok_ic and (raised is None or raised in out_ic)
                            matched += check(same, f"{what}: both refuse ({out_py[:100]!r} / "
                                             f"{out_ic[:100]!r})")
            print(f"  {name}: {matched}/{total}")
    finish()


if __name__ == "__main__":
    main()
