#!/usr/bin/env python3
"""End to end: `infercept serve` driven by the official `openai` Python client (PyPI).

Models, plain and streamed chat, completions, errors, and a tool loop where the second turn
resumes the paused request (cached_tokens > 0) and answers token for token what a server
with interception off answers; then the explicit resume API; then SIGTERM (graceful stop,
exit 0). Run by ctest; exits 77 (skipped) when the `openai` package is not installed.
"""
import argparse
import json
import signal
import sys

import checks  # tests/checks.py: start_server

try:
    import openai
except ImportError:
    print("skipped: the openai package is not installed (make sets it up in build/venv)")
    sys.exit(77)

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
HISTORY = [
    {"role": "user", "content": "What is the weather in London?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": "{\"city\": \"London\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 12, \"sky\": \"rain\"}"},
    {"role": "assistant", "content": "It is 12 degrees and raining in London."},
    {"role": "user", "content": "What is the weather in Paris?"},
]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
RESULT = "{\"temperature\": 25, \"sky\": \"sunny\"}"


class Server:
    def __init__(self, binary, model, *extra):
        cmd = [binary, "serve", "--model", model, "--port", "0", "--temperature", "0", "--max-tokens", "16",
               "--kv-cache-tokens", "4096", "--swap-space-mb", "32", "--max-batch-tokens", "256", *extra]
        self.proc, self.port, self.log = checks.start_server(cmd)
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="none", max_retries=0,
                                    timeout=300)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what)


def tool_turn(client, model):
    return client.chat.completions.create(model=model, messages=HISTORY, tools=TOOLS, tool_choice=NAMED,
                                          temperature=0, max_tokens=40, extra_body={"return_token_ids": True})


def follow_up(first):
    msg = first.choices[0].message
    messages = HISTORY + [msg.model_dump(exclude_none=True)]
    for call in msg.tool_calls:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": RESULT})
    return messages


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()

    srv = Server(args.binary, args.model)
    off = None
    try:
        c = srv.client
        models = c.models.list()
        model = models.data[0].id
        check(len(models.data) == 1, "models.list has the served model")

        r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Name a color."}],
                                      max_tokens=8, temperature=0)
        check(r.choices[0].message.content and r.usage.completion_tokens <= 8, "chat completion")
        text = ""
        usage = None
        for chunk in c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Name a color."}],
                                               max_tokens=8, temperature=0, stream=True,
                                               stream_options={"include_usage": True}):
            if chunk.usage:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        check(text == r.choices[0].message.content, "streamed chat equals the plain one (greedy)")
        check(usage is not None and usage.completion_tokens == r.usage.completion_tokens, "stream usage chunk")

        comp = c.completions.create(model=model, prompt="The capital of France is", max_tokens=5, temperature=0)
        check(comp.choices[0].text and comp.object == "text_completion", "completions")

        try:
            c.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
            check(False, "unknown model is an error")
        except openai.NotFoundError as e:
            check(e.status_code == 404, "unknown model: 404 NotFoundError")
        try:
            c.chat.completions.create(model=model, messages=[{"role": "user", "content": "cat " * 5000}])
            check(False, "too long a prompt is an error")
        except openai.BadRequestError as e:
            check(e.code == "context_length_exceeded", "too long a prompt: 400 context_length_exceeded")

        # The tool loop, with an unmodified client.
        first = tool_turn(c, model)
        check(first.choices[0].finish_reason == "tool_calls", "tool call -> finish_reason tool_calls")
        call = first.choices[0].message.tool_calls[0]
        check(call.function.name == "get_weather" and isinstance(json.loads(call.function.arguments), dict),
              "the tool call is parsed")
        check((first.model_extra or {}).get("interception") is not None, "the response says it is paused")
        second = c.chat.completions.create(model=model, messages=follow_up(first), tools=TOOLS, temperature=0,
                                           max_tokens=24, extra_body={"return_token_ids": True})
        cached = second.usage.prompt_tokens_details.cached_tokens
        check(cached > 0, f"the follow-up resumed the paused request (cached_tokens = {cached})")

        # The same tool turn streamed, through the SDK's stream helper: the call's name comes
        # first, its arguments in pieces; what accumulates is the plain answer's call.
        stream_api = getattr(c.chat.completions, "stream", None) or c.beta.chat.completions.stream
        kinds = []
        with stream_api(model=model, messages=HISTORY, tools=TOOLS, tool_choice=NAMED, temperature=0,
                        max_tokens=40) as st:
            for ev in st:
                if ev.type == "tool_calls.function.arguments.delta":
                    kinds.append(("args", ev.name, ev.arguments_delta))
                elif ev.type == "tool_calls.function.arguments.done":
                    kinds.append(("done", ev.name, ev.arguments))
            streamed = st.get_final_completion()
        deltas = [k for k in kinds if k[0] == "args"]
        check(len(deltas) > 1 and all(k[1] == "get_weather" for k in deltas),
              f"streamed: the name first, the arguments in {len(deltas)} pieces")
        check(kinds[-1][0] == "done" and isinstance(json.loads(kinds[-1][2]), dict), "streamed arguments parse")
        scall = streamed.choices[0].message.tool_calls[0]
        check(streamed.choices[0].finish_reason == "tool_calls" and scall.function.name == call.function.name
              and scall.function.arguments == call.function.arguments,
              "the streamed call is the plain one")
        resumed_stream = c.chat.completions.create(model=model, messages=follow_up(streamed), tools=TOOLS,
                                                   temperature=0, max_tokens=24)
        check(resumed_stream.usage.prompt_tokens_details.cached_tokens > 0,
              "the streamed call's id resumes the paused request")

        off = Server(args.binary, args.model, "--no-interception", "--prefix-cache", "off")
        f1 = tool_turn(off.client, model)
        f2 = off.client.chat.completions.create(model=model, messages=follow_up(f1), tools=TOOLS, temperature=0,
                                                max_tokens=24, extra_body={"return_token_ids": True})
        check(f2.usage.prompt_tokens_details.cached_tokens == 0, "interception and prefix cache off: nothing reused")
        check(f2.choices[0].model_extra["token_ids"] == second.choices[0].model_extra["token_ids"],
              "the resumed answer is token-identical to a server with interception off")

        # The explicit API.
        p = tool_turn(c, model)
        iid = p.model_extra["interception"]["id"]
        listed = c.get("/interceptions", cast_to=object)
        check(any(i["id"] == iid for i in listed["data"]), "GET /v1/interceptions lists it")
        resumed = c.post(f"/interceptions/{iid}/resume", cast_to=object, body={
            "tool_results": [{"tool_call_id": p.choices[0].message.tool_calls[0].id, "content": RESULT}],
            "max_tokens": 24})
        check(resumed["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, "explicit resume reuses the KV")
        check(resumed["choices"][0]["message"]["content"] == second.choices[0].message.content,
              "explicit resume answers like the unmodified follow-up")
        try:
            c.post(f"/interceptions/{iid}/resume", cast_to=object,
                   body={"tool_results": [{"tool_call_id": "x", "content": "y"}]})
            check(False, "a second resume is an error")
        except openai.APIStatusError as e:
            check(e.status_code == 409, "a second resume: 409")
    finally:
        code = srv.stop()
        if off is not None:
            off.stop()
    check(code == 0, "SIGTERM: graceful stop, exit 0")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - report and fail
        print("FAILED:", type(e).__name__, e)
        sys.exit(1)
