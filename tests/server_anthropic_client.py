#!/usr/bin/env python3
"""End to end: Anthropic's Messages API (POST /v1/messages, what Claude Code and the
`anthropic` SDKs speak) under the official `anthropic` SDK. `infercept serve` on the default
model with an API key, which the SDK sends as x-api-key; temperature 0:

- a text turn: its text is the chat completion's for the same conversation, token for token
  (the same chat turn underneath), and input_tokens + cache_read_input_tokens is the chat
  completion's prompt_tokens;
- a tool turn (tool_choice any, no parallel calls): one tool_use block with an object input,
  stop_reason tool_use, the request kept paused (`interception`);
- its follow-up (the SDK's content blocks sent back, then a tool_result) continues that paused
  request (X-Infercept-Resumed names it) with the earlier prompt read from the cache;
- the same streamed: message_start first and message_stop last, every block started, filled
  and stopped in index order, the input_json_delta pieces adding up to the tool_use input;
  messages.stream()'s final message has the call; the streamed follow-up resumes too;
- count_tokens counts the prompt the same request runs;
- errors are Anthropic's error object: an image block and a missing max_tokens a 400
  (invalid_request_error), an unknown model a 404, a wrong key a 401.

Exits 77 (skipped) when the packages are missing (make installs them in build/venv).
"""
import argparse
import json
import sys
import urllib.error
import urllib.request

import checks

try:
    import anthropic
    import openai
except ImportError as e:
    print(f"skipped: {e.name} is not installed (make sets it up in build/venv)")
    sys.exit(77)

BLOCK = 16  # the server's KV block size (--block-size default)
KEY = "test-key"
GREEDY = {"temperature": 0}  # the SDK no longer takes temperature as an argument
WEATHER = {"name": "get_weather", "description": "Get the weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"], "additionalProperties": False}}
SYSTEM = "You are a weather assistant. Use the get_weather tool, then answer in one sentence."
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
FORCED = {"type": "any", "disable_parallel_tool_use": True}


def post(port, path, body, key=KEY):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "x-api-key": key})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def text_turn(client, chat, model):
    r = client.messages.create(model=model, max_tokens=40, system="Answer in one short sentence.",
                               messages=[{"role": "user", "content": "Say hello."}], extra_body=GREEDY)
    c = chat.chat.completions.create(model=model, max_tokens=40, temperature=0, messages=[
        {"role": "system", "content": "Answer in one short sentence."}, {"role": "user", "content": "Say hello."}])
    text = "".join(b.text for b in r.content if b.type == "text")
    checks.check(r.type == "message" and r.id.startswith("msg_") and r.role == "assistant",
                 f"a text turn: a Message ({r.id})")
    checks.check(text and text == c.choices[0].message.content,
                 f"its text is the chat completion's for the same conversation ({text!r})")
    checks.check(r.usage.input_tokens + r.usage.cache_read_input_tokens == c.usage.prompt_tokens
                 and r.usage.output_tokens == c.usage.completion_tokens,
                 f"usage counts the same tokens ({r.usage.input_tokens} + {r.usage.cache_read_input_tokens} "
                 f"cached, {r.usage.output_tokens} out)")
    checks.check(r.stop_reason == ("max_tokens" if c.choices[0].finish_reason == "length" else "end_turn"),
                 f"stop_reason {r.stop_reason} for finish_reason {c.choices[0].finish_reason}")


def follow_up(r, tool_uses):
    return QUESTION + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": t.id,
                                                     "content": "21 degrees and clear"} for t in tool_uses]}]


def check_resumed(what, raw_headers, icpt, usage, first):
    resumed = raw_headers.get("x-infercept-resumed")
    checks.check(icpt and resumed == icpt["id"], f"{what}: continues the paused request ({resumed})")
    floor = (first.usage.input_tokens + first.usage.cache_read_input_tokens) // BLOCK * BLOCK
    checks.check(usage.cache_read_input_tokens >= floor,
                 f"{what}: reads the earlier prompt from the cache ({usage.cache_read_input_tokens} >= {floor})")


def tool_round_trip(client, model, port):
    r = client.messages.create(model=model, max_tokens=200, system=SYSTEM, messages=QUESTION, tools=[WEATHER],
                               tool_choice=FORCED, extra_body=GREEDY)
    uses = [b for b in r.content if b.type == "tool_use"]
    icpt = (r.model_extra or {}).get("interception")
    checks.check(len(uses) == 1 and uses[0].name == "get_weather" and isinstance(uses[0].input, dict)
                 and r.stop_reason == "tool_use",
                 f"a tool turn: one tool_use block with an object input ({[b.type for b in r.content]}, "
                 f"{r.stop_reason})")
    checks.check(bool(icpt), f"the request stays paused ({icpt})")
    status, counted = post(port, "/v1/messages/count_tokens", {
        "model": model, "system": SYSTEM, "messages": QUESTION, "tools": [WEATHER], "tool_choice": FORCED})
    checks.check(status == 200 and counted.get("input_tokens") ==
                 r.usage.input_tokens + r.usage.cache_read_input_tokens,
                 f"count_tokens counts the prompt the request ran ({counted})")
    if len(uses) != 1:
        return
    raw = client.messages.with_raw_response.create(model=model, max_tokens=60, system=SYSTEM,
                                                   messages=follow_up(r, uses), tools=[WEATHER],
                                                   extra_body=GREEDY)
    r2 = raw.parse()
    check_resumed("the follow-up", raw.headers, icpt, r2.usage, r)


def read_stream(events):
    """(problems, tool inputs by block index) of raw Messages stream events."""
    problems, open_blocks, inputs, last_index = [], {}, {}, -1
    if not events or events[0].type != "message_start":
        problems.append("the first event is not message_start")
    if not events or events[-1].type != "message_stop":
        problems.append("the last event is not message_stop")
    for ev in events:
        if ev.type == "content_block_start":
            if ev.index != last_index + 1 or open_blocks:
                problems.append(f"block {ev.index} started out of order")
            last_index = ev.index
            open_blocks[ev.index] = ev.content_block.type
            if ev.content_block.type == "tool_use":
                inputs[ev.index] = ""
        elif ev.type == "content_block_delta":
            if ev.index not in open_blocks:
                problems.append(f"a delta for block {ev.index}, not open")
            if ev.delta.type == "input_json_delta":
                inputs[ev.index] += ev.delta.partial_json
        elif ev.type == "content_block_stop":
            if open_blocks.pop(ev.index, None) is None:
                problems.append(f"block {ev.index} stopped, not open")
    if open_blocks:
        problems.append(f"blocks never stopped: {open_blocks}")
    return problems, inputs


def streamed_round_trip(client, model):
    raw = client.messages.create(model=model, max_tokens=200, system=SYSTEM, messages=QUESTION, tools=[WEATHER],
                                 tool_choice=FORCED, extra_body=GREEDY, stream=True)
    events = list(raw)
    problems, inputs = read_stream(events)
    delta = [ev for ev in events if ev.type == "message_delta"]
    icpt = (delta[-1].model_extra or {}).get("interception") if delta else None
    try:
        parsed = [json.loads(v) for v in inputs.values()]
    except ValueError:
        parsed = None
    checks.check(not problems and parsed and all(isinstance(p, dict) for p in parsed),
                 f"a streamed tool turn: {len(events)} events in order, the input deltas adding up to "
                 f"{parsed}" + (f" ({problems})" if problems else ""))
    checks.check(delta and delta[-1].delta.stop_reason == "tool_use" and icpt,
                 f"its message_delta: stop_reason tool_use, the interception ({icpt})")
    with client.messages.stream(model=model, max_tokens=200, system=SYSTEM, messages=QUESTION, tools=[WEATHER],
                                tool_choice=FORCED, extra_body=GREEDY) as s:
        for _ in s:
            pass
        final = s.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    checks.check(len(uses) == 1 and bool(parsed) and uses[0].input == parsed[0],
                 f"messages.stream(): the final message has the same call ({[b.type for b in final.content]})")
    if len(uses) != 1:
        return
    # The helper's final message has no interception field (it is built from the events): the
    # paused request is the one message_delta named; the streamed follow-up continues it.
    resp = client.messages.with_raw_response.create(model=model, max_tokens=60, system=SYSTEM,
                                                    messages=follow_up(final, uses), tools=[WEATHER],
                                                    extra_body=GREEDY, stream=True)
    events2 = list(resp.parse())
    problems2, _ = read_stream(events2)
    checks.check(not problems2 and any(ev.type == "content_block_delta" and ev.delta.type == "text_delta"
                                       for ev in events2),
                 "the streamed follow-up: text deltas, in order" + (f" ({problems2})" if problems2 else ""))
    start = events2[0].message if events2 and events2[0].type == "message_start" else None
    resumed = resp.headers.get("x-infercept-resumed")
    checks.check(resumed and resumed.startswith("icpt_") and resumed != (icpt or {}).get("id")
                 and start is not None and start.usage.cache_read_input_tokens > 0,
                 f"the streamed follow-up continues the helper's paused request ({resumed}, "
                 f"{start.usage.cache_read_input_tokens if start else None} cached at message_start)")


def errors(client, model, port):
    try:
        client.messages.create(model=model, max_tokens=10, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "http://example.com/a.png"}}]}])
        checks.check(False, "an image block: refused")
    except anthropic.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        checks.check(e.status_code == 400 and body.get("type") == "error"
                     and body.get("error", {}).get("type") == "invalid_request_error",
                     f"an image block: a 400 in Anthropic's shape ({body})")
    status, body = post(port, "/v1/messages", {"model": model, "messages": QUESTION})
    checks.check(status == 400 and body.get("error", {}).get("type") == "invalid_request_error"
                 and "max_tokens" in body["error"].get("message", ""),
                 f"no max_tokens: a 400 naming it ({body})")
    try:
        client.messages.create(model="no-such-model", max_tokens=5, messages=QUESTION)
        checks.check(False, "an unknown model: refused")
    except anthropic.NotFoundError as e:
        checks.check(e.status_code == 404 and (e.body or {}).get("error", {}).get("type") == "not_found_error",
                     "an unknown model: a 404 (not_found_error)")
    status, _ = post(port, "/v1/messages", {"model": model, "max_tokens": 5, "messages": QUESTION}, key="wrong")
    checks.check(status == 401, f"a wrong x-api-key: 401 ({status})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    proc, port, log = checks.start_server([args.binary, "serve", "--model", args.model, "--port", "0",
                                           "--kv-cache-tokens", "16384", "--api-key", KEY])
    try:
        client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=KEY, timeout=300)
        chat = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, timeout=300)
        model = chat.models.list().data[0].id
        text_turn(client, chat, model)
        tool_round_trip(client, model, port)
        streamed_round_trip(client, model)
        errors(client, model, port)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    checks.finish()


if __name__ == "__main__":
    main()
