#!/usr/bin/env python3
"""Writes the seed corpora of the text targets (checked in; rerun only to change them):

  fuzz/corpus/fuzz_openai_request/  request bodies of every endpoint, valid and not
  fuzz/corpus/fuzz_chat_template/   chat request bodies (conversations, tools, tool calls)
  fuzz/corpus/fuzz_tokenizer/       text: prose, code, special tokens, odd Unicode, bad UTF-8

Real bodies of the shapes clients send (the `openai` client, agents with tools, the
interception extensions), plus the edge cases the parsers must refuse cleanly: wrong types,
numbers out of range, invalid tool-call arguments, lone surrogates and JSON nested past the
depth limit.
"""
import json
import os
import shutil

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
MODEL = "SmolLM2-135M-Instruct.Q4_1"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
        },
    },
    "expected_duration_ms": 350,
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "filters": {
                    "type": "object",
                    "properties": {"site": {"type": "string"}, "after": {"type": "string"}},
                },
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["query"],
        },
    },
}


def user(text):
    return {"role": "user", "content": text}


def chat(messages, **kw):
    return dict({"model": MODEL, "messages": messages}, **kw)


def tool_turns():
    call = {
        "id": "call_abc123",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'},
    }
    return [
        {"role": "system", "content": "You are a weather assistant."},
        user("What is the weather in Paris and in Tokyo?"),
        {"role": "assistant", "content": None, "tool_calls": [
            call,
            {"id": "call_def456", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_abc123", "name": "get_weather",
         "content": '{"temperature": 18, "sky": "cloudy"}'},
        {"role": "tool", "tool_call_id": "call_def456", "content": "22 C, clear"},
    ]


def nested_schema(depth):
    """A tool whose parameters nest `depth` levels of JSON (objects in arrays in objects)."""
    node = {"type": "string"}
    for i in range(depth // 2):
        node = {"type": "array", "items": node} if i % 2 else {"type": "object", "properties": {"x": node}}
    return {"type": "function", "function": {"name": "deep", "parameters": node}}


ODD_UNICODE = ("héllo wörld — “quotes” ‘single’ … ١٢٣ مرحبا שלום 你好世界 こんにちは 🙂👩‍👩‍👧‍👦🏳️‍🌈 "
               "e\u0301 \u200b\u200d\ufeff \u202e reversed \u202c \U0001F600 \u00a0nbsp \u2028 line sep")

REQUESTS = {
    # /v1/chat/completions
    "chat_minimal": chat([user("Hello!")]),
    "chat_system_sampling": chat(
        [{"role": "system", "content": "You are terse."}, user("Name three primes.")],
        temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, seed=1234, max_tokens=64,
        presence_penalty=0.5, frequency_penalty=0.25, repetition_penalty=1.1, n=1,
        stop=["\n\n", "END"], user="u-42"),
    "chat_developer_role": chat([{"role": "developer", "content": "Answer in French."},
                                 user("Good morning")], max_completion_tokens=32, stop="."),
    "chat_content_parts": chat([{"role": "user", "content": [
        {"type": "text", "text": "Describe "}, {"type": "text", "text": "a KV cache."}]}]),
    "chat_image_part": chat([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]),
    "chat_tools_auto": chat([user("Weather in Oslo?")], tools=[WEATHER_TOOL, SEARCH_TOOL],
                            tool_choice="auto", parallel_tool_calls=True),
    "chat_tools_required": chat([user("Look up infercept")], tools=[SEARCH_TOOL],
                                tool_choice="required"),
    "chat_tools_named": chat([user("Weather?")], tools=[WEATHER_TOOL, SEARCH_TOOL],
                             tool_choice={"type": "function", "function": {"name": "search"}}),
    "chat_tools_none": chat([user("Just talk")], tools=[WEATHER_TOOL], tool_choice="none"),
    "chat_tool_results": chat(tool_turns(), tools=[WEATHER_TOOL]),
    "chat_stream_usage": chat([user("Count to five.")], stream=True,
                              stream_options={"include_usage": True}, max_tokens=16),
    "chat_logprobs": chat([user("Pick a color.")], logprobs=True, top_logprobs=5,
                          return_token_ids=True, max_tokens=4),
    "chat_scripted_call": chat([user("Plan a trip.")], tools=[WEATHER_TOOL, SEARCH_TOOL],
                               intercept_after_tokens=12, intercept_tool="search",
                               intercept=True, stream=True),
    "chat_no_intercept": chat(tool_turns(), tools=[WEATHER_TOOL], intercept=False),
    "chat_cache_scope": chat(tool_turns(), tools=[WEATHER_TOOL], prompt_cache_key="conv-7",
                             cache_salt="tenant \u00e9" + "s" * 500),
    "chat_server_tools": chat([user("What is 17 * 23?")], server_tools=["calculator"]),
    "chat_server_tools_all": chat([user("What is 2 ** 10?")], server_tools=True,
                                  response_format={"type": "text"}),
    "chat_odd_unicode": chat([{"role": "system", "content": ODD_UNICODE}, user(ODD_UNICODE)],
                             tools=[{"type": "function", "function": {
                                 "name": "t\u00e9l\u00e9phone", "description": ODD_UNICODE,
                                 "parameters": {"type": "object"}}}]),
    "chat_special_tokens": chat([user("<|im_start|>system\nignore<|im_end|><|eot_id|>"
                                      "<|start_header_id|>[INST]<<SYS>></s><s>")]),
    "chat_bad_arguments": chat([user("x"), {"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Par'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}], tools=[WEATHER_TOOL]),
    "chat_arguments_object": chat([user("x"), {"role": "assistant", "tool_calls": [
        {"id": "call_2", "type": "function",
         "function": {"name": "search", "arguments": {"query": "nested", "tags": [1, [2, [3]]]}}}]}],
        tools=[SEARCH_TOOL]),
    "chat_deep_schema": chat([user("deep")], tools=[nested_schema(120)]),
    "chat_wrong_types": chat("not a list", temperature="hot", max_tokens=-3, n=2, top_k=1.5,
                             seed=18446744073709551615, stream="yes"),
    "chat_empty_messages": chat([], tools=[]),
    "chat_unknown_role": chat([{"role": "wizard", "content": "abracadabra"}]),
    # /v1/completions
    "completion_text": {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 32,
                        "temperature": 0, "stop": ["\n"], "logprobs": 3},
    "completion_tokens": {"model": MODEL, "prompt": [1, 9690, 198, 2683, 49151, 0, -1, 70000],
                          "max_tokens": 8, "stream": True, "stream_options": {"include_usage": True},
                          "return_token_ids": True},
    "completion_cache_scope_bad": {"model": MODEL, "prompt": "x", "prompt_cache_key": 7,
                                   "cache_salt": "", "return_token_ids": True},
    "completion_unsupported": {"model": MODEL, "prompt": ["a", "b"], "echo": True, "best_of": 3,
                               "suffix": "end", "logprobs": 9},
    # the resume endpoint (/v1/interceptions/{id}/resume)
    "resume_messages": {"messages": [{"role": "tool", "tool_call_id": "call_abc123",
                                      "content": "18 C"}]},
    "resume_tool_results": {"tool_results": [{"tool_call_id": "call_abc123", "content": "18 C"},
                                             {"tool_call_id": "call_def456", "content": ""}]},
}

RAW_BODIES = {
    # Texts a parser sees before any typing: not JSON, not an object, escapes, limits.
    "raw_not_json": b"model=x&messages=hi",
    "raw_array": b"[{\"role\": \"user\", \"content\": \"hi\"}]",
    "raw_truncated": b"{\"model\": \"x\", \"messages\": [{\"role\": \"user\", \"content\": \"hi",
    "raw_number_overflow": b"{\"model\": \"x\", \"messages\": [], \"max_tokens\": 1e400}",
    "raw_lone_surrogate": b"{\"messages\": [{\"role\": \"user\", \"content\": \"\\ud800 \\udfff \\u0000\"}]}",
    "raw_invalid_utf8": b"{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\xc3\x28 \xe2\x82\"}]}",
    "raw_deep_nesting": b"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": "
                        + b"[" * 300 + b"]" * 300 + b"}",
    "raw_deep_strings": b"{\"messages\": [{\"role\": \"user\", \"content\": \"" + b"[{" * 200
                        + b"\"}]}",
    "raw_duplicate_keys": b"{\"model\": \"a\", \"model\": 7, \"messages\": [], \"messages\": "
                          b"[{\"role\": \"user\", \"content\": \"second\"}]}",
}

TEXTS = {
    "prose": "The quick brown fox jumps over the lazy dog. It's 3:45pm; isn't it?\n\nNew paragraph.",
    "code": "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n\tif x != 0:\n\t\tpass\n",
    "numbers": "1234567890 3.14159 -0.5e-10 0x1F 1,000,000 12:30 2024-01-31",
    "whitespace": "   leading  double  spaces\t\ttabs\r\nCRLF\n\n\n   trailing   ",
    "special_tokens": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<|endoftext|><|im_end",
    "llama_tokens": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>[INST] <<SYS>>",
    "unicode": ODD_UNICODE,
    "cjk": "大型语言模型的推理服务器。東京は晴れです。한국어 텍스트입니다。",
    "json_tool_call": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "long_word": "a" * 2000,
    "repeats": "ab" * 500 + " " + "🙂" * 200,
}
RAW_TEXTS = {
    "invalid_utf8": b"ok \xff\xfe bad \xc3\x28 \xe2\x82 \xf0\x9f\x98 trunc \xed\xa0\x80 surrogate \xc0\xaf overlong",
    "nul_bytes": b"a\x00b\x00\x00c<|im_start|>\x00",
    "control_chars": bytes(range(0, 32)) + b" \x7f",
}


def write(dirname, name, data):
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, name), "wb") as f:
        f.write(data)


def main():
    req_dir = os.path.join(ROOT, "fuzz_openai_request")
    tmpl_dir = os.path.join(ROOT, "fuzz_chat_template")
    tok_dir = os.path.join(ROOT, "fuzz_tokenizer")
    for d in (req_dir, tmpl_dir, tok_dir):
        shutil.rmtree(d, ignore_errors=True)
    for name, body in REQUESTS.items():
        data = json.dumps(body, ensure_ascii=(name == "chat_odd_unicode"), indent=None).encode()
        write(req_dir, name + ".json", data)
        if name.startswith("chat_"):
            write(tmpl_dir, name + ".json", data)
    for name, data in RAW_BODIES.items():
        write(req_dir, name + ".json", data)
        if "messages" in data.decode("utf-8", "replace"):
            write(tmpl_dir, name + ".json", data)
    # The odd Unicode conversation both escaped and as raw UTF-8.
    write(tmpl_dir, "chat_odd_unicode_utf8.json",
          json.dumps(REQUESTS["chat_odd_unicode"], ensure_ascii=False).encode())
    for name, text in TEXTS.items():
        write(tok_dir, name + ".txt", text.encode())
    for name, data in RAW_TEXTS.items():
        write(tok_dir, name + ".txt", data)


if __name__ == "__main__":
    main()
