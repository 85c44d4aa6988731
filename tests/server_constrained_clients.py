#!/usr/bin/env python3
"""End to end: constrained decoding under real clients. `infercept serve` on the default model
(SmolLM2-135M, which follows instructions poorly: unconstrained, tool_choice "required" came
back with calls named "Paris" and arguments the schema does not have) is asked, at
temperature 1, through the official `openai` SDK:
  - tool_choice "required": every call names a declared tool, its arguments valid for that
    tool's schema (checked with jsonschema);
  - a named tool_choice: every call is of that tool, arguments valid;
  - response_format json_schema: the content is JSON valid for the schema (bounds and a
    pattern included);
  - a schema the engine cannot compile: a 400 naming the parameter;
and through an `openai-agents` Agent with ModelSettings(tool_choice="required"): every run
calls a declared tool with schema-valid arguments (no ModelBehaviorError).

--runs N sets how many runs of each (the issue's figure is 100 agents runs; ctest runs fewer).
Exits 77 (skipped) when the packages are missing (make installs them in build/venv).
"""
import argparse
import asyncio
import json
import sys

import checks

try:
    import openai
except ImportError as e:
    print(f"skipped: {e.name} is not installed (make sets up openai in build/venv)")
    sys.exit(77)
try:
    import jsonschema
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")  # Debian's python3-jsonschema
    try:
        import jsonschema
    except ImportError:
        print("skipped: jsonschema is not installed (make installs python3-jsonschema)")
        sys.exit(77)

WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city"], "additionalProperties": False}
MULTIPLY = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"], "additionalProperties": False}
EVENT = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 40},
    "attendees": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 30}, "role": {"enum": ["host", "guest"]}},
        "required": ["name", "role"], "additionalProperties": False}, "minItems": 1, "maxItems": 3},
    "remote": {"type": "boolean"}, "day": {"type": "integer", "minimum": 1, "maximum": 31},
    "room": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}},
    "required": ["title", "attendees", "remote", "day", "room"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "multiply", "description": "Multiply two integers",
                                      "parameters": MULTIPLY, "strict": True}},
    {"type": "function", "function": {"name": "plan_event", "description": "Plan an event",
                                      "parameters": EVENT}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTION = [{"role": "user", "content": "What is the weather in Paris, and what is 17 * 23?"}]


class Server:
    def __init__(self, binary, model):
        cmd = [binary, "serve", "--model", model, "--port", "0", "--temperature", "1",
               "--max-tokens", "200", "--kv-cache-tokens", "16384"]
        self.proc, self.port, self.log = checks.start_server(cmd)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def valid(schema, text):
    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def check_calls(msg, allowed, what):
    calls = msg.tool_calls or []
    bad = [(c.function.name, c.function.arguments) for c in calls
           if c.function.name not in allowed or not valid(SCHEMAS[c.function.name], c.function.arguments)]
    return checks.check(calls and not bad, f"{what}: {len(calls)} call(s), all declared and schema-valid"
                        + (f" (bad: {bad})" if bad else ""))


def sdk_checks(client, model, runs):
    for i in range(runs):
        r = client.chat.completions.create(model=model, messages=QUESTION, tools=TOOLS, tool_choice="required",
                                           seed=i, max_tokens=200)
        check_calls(r.choices[0].message, set(SCHEMAS), f"required, seed {i}")
    for i in range(runs):
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Plan a party for Ann and Bob."}], tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "plan_event"}}, seed=i, max_tokens=200)
        check_calls(r.choices[0].message, {"plan_event"}, f"named plan_event, seed {i}")
    # Streamed: the same calls arrive as deltas.
    stream = client.chat.completions.create(model=model, messages=QUESTION, tools=TOOLS, tool_choice="required",
                                            seed=99, stream=True, max_tokens=200)
    names, args = {}, {}
    for chunk in stream:
        for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if d.function.name:
                names[d.index] = d.function.name
            args[d.index] = args.get(d.index, "") + (d.function.arguments or "")
    checks.check(names and all(names[k] in SCHEMAS and valid(SCHEMAS[names[k]], args[k]) for k in names),
                 f"required, streamed: {names}")
    for i in range(runs):
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Describe a team event as JSON."}], seed=i,
            response_format={"type": "json_schema", "json_schema": {"name": "event", "schema": EVENT,
                                                                     "strict": True}}, max_tokens=400)
        text = r.choices[0].message.content
        checks.check(r.choices[0].finish_reason == "stop" and valid(EVENT, text),
                     f"response_format json_schema, seed {i}: {text[:60]!r}")
    # A schema that cannot be compiled: a 400 naming the parameter, before any generation.
    bad = [TOOLS[0], {"type": "function", "function": {"name": "code", "parameters": {
        "type": "object", "properties": {"zip": {"type": "string", "pattern": "^(?=9)[0-9]{5}$"}}}}}]
    try:
        client.chat.completions.create(model=model, messages=QUESTION, tools=bad, tool_choice="required")
        checks.check(False, "an uncompilable schema is refused")
    except openai.BadRequestError as e:
        err = e.body if isinstance(e.body, dict) else {}
        checks.check(e.status_code == 400 and err.get("param") == "tools[1].function.parameters"
                     and "lookahead" in err.get("message", ""), f"an uncompilable schema is a 400: {err}")


def agents_checks(base_url, model, runs):
    try:
        from agents import (Agent, ModelBehaviorError, ModelSettings, OpenAIChatCompletionsModel, Runner,
                            function_tool, set_tracing_disabled)
    except ImportError:
        print("skipped: openai-agents is not installed (make sets it up in build/venv)")
        return
    set_tracing_disabled(True)
    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather in a city."""
        calls.append(("get_weather", {"city": city}))
        return f"20 degrees and sunny in {city}"

    @function_tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        calls.append(("multiply", {"a": a, "b": b}))
        return a * b

    client = openai.AsyncOpenAI(base_url=base_url, api_key="none")
    agent = Agent(name="assistant", instructions="Use the tools to answer.",
                  model=OpenAIChatCompletionsModel(model=model, openai_client=client),
                  tools=[get_weather, multiply], tool_use_behavior="stop_on_first_tool",
                  model_settings=ModelSettings(tool_choice="required", temperature=1.0))
    schemas = {t.name: t.params_json_schema for t in agent.tools}

    async def run_all():
        ok = 0
        for i in range(runs):
            before = len(calls)
            try:
                result = await Runner.run(agent, "What is the weather in Paris, and what is 17 * 23?", max_turns=2)
                raw = [it.raw_item for it in result.new_items if type(it).__name__ == "ToolCallItem"]
                good = (len(calls) > before and raw and
                        all(r.name in schemas and valid(schemas[r.name], r.arguments) for r in raw))
            except ModelBehaviorError as e:
                print(f"run {i}: ModelBehaviorError: {e}")
                good = False
            ok += bool(good)
        return ok

    ok = asyncio.run(run_all())
    checks.check(ok == runs, f"openai-agents, tool_choice required: {ok} of {runs} runs called a declared "
                             f"tool with schema-valid arguments")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--agent-runs", type=int, default=10)
    args = ap.parse_args()
    server = Server(args.binary, args.model)
    try:
        base = f"http://127.0.0.1:{server.port}/v1"
        client = openai.OpenAI(base_url=base, api_key="none")
        model = client.models.list().data[0].id
        sdk_checks(client, model, args.runs)
        agents_checks(base, model, args.agent_runs)
    finally:
        server.stop()
    checks.finish()


if __name__ == "__main__":
    main()
