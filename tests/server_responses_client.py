#!/usr/bin/env python3
"""End to end: the Responses API (POST /v1/responses) under the official `openai` SDK and an
`openai-agents` Agent on its default model class, OpenAIResponsesModel. `infercept serve` on
the default model, temperature 0:

- a text turn: the Response's output_text is the chat completion's content for the same
  conversation, token for token (the same chat turn underneath), and usage counts its tokens;
- a tool turn (tool_choice required): one function_call item with a declared name and JSON
  arguments, and the request stays paused (the Response's `interception`);
- its follow-up (the SDK's output items sent back as input, then a function_call_output)
  continues that paused request (X-Infercept-Resumed names it) and finds the earlier turn's
  prompt cached;
- the same two turns streamed: events numbered from 0, response.created first and
  response.completed last, every item added before its deltas and done after them, the
  argument deltas adding up to the call's arguments, the final output the items as streamed
  (same ids), the streamed follow-up resumed too; the SDK's responses.stream() helper gives
  the whole answer's text;
- chained: the follow-up names the paused turn's Response in previous_response_id and sends
  only the tool's output, and still continues the paused request with its prompt cached; the
  stored Response comes back from GET /v1/responses/{id} and is gone after DELETE; with
  store false nothing is kept (a 404 naming previous_response_id);
- what it cannot do is a 400 naming the parameter (conversation, an image, a web_search
  tool), an unknown model a 404;
- LangChain's ChatOpenAI with use_responses_api: a forced call, and its follow-up (the
  AIMessage and a ToolMessage) resumes the paused request;
- an Agent (OpenAIResponsesModel, tool_choice required), run whole, streamed, and chained by
  previous_response_id (auto_previous_response_id): its tool is
  called with the model's arguments and each run's follow-up resumed its paused request (the
  server's resume counter), and no interception is left open (but a follow-up's that called
  the tool again).

Exits 77 (skipped) when the packages are missing (make installs them in build/venv).
"""
import argparse
import asyncio
import json
import sys
import urllib.request

import checks

try:
    import openai
except ImportError as e:
    print(f"skipped: {e.name} is not installed (make sets up openai in build/venv)")
    sys.exit(77)

BLOCK = 16  # the server's KV block size (--block-size default)
WEATHER = {"type": "function", "name": "get_weather", "description": "Get the weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": False}}
INSTRUCTIONS = "You are a weather assistant. Use the get_weather tool, then answer in one sentence."
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
# Interceptions of follow-ups that called a tool again (never followed up here): the only ones
# that may be left open at the end.
LEFT_PAUSED = set()


def metric(port, name):
    """The sum of a counter's series in /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def open_interceptions(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/interceptions", timeout=30) as r:
        return json.load(r)["data"]


def text_turn(client, model):
    r = client.responses.create(model=model, instructions="Answer in one short sentence.",
                                input="Say hello.", max_output_tokens=40, temperature=0)
    c = client.chat.completions.create(model=model, messages=[
        {"role": "system", "content": "Answer in one short sentence."}, {"role": "user", "content": "Say hello."}],
        max_tokens=40, temperature=0)
    checks.check(r.object == "response" and r.id.startswith("resp_") and r.model == model,
                 f"a text turn: a Response ({r.id})")
    checks.check(r.output_text and r.output_text == c.choices[0].message.content,
                 f"its text is the chat completion's for the same conversation ({r.output_text!r})")
    checks.check(r.usage.input_tokens == c.usage.prompt_tokens and r.usage.output_tokens == c.usage.completion_tokens
                 and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens,
                 f"usage counts the same tokens ({r.usage.input_tokens} + {r.usage.output_tokens})")
    checks.check(r.status == ("incomplete" if c.choices[0].finish_reason == "length" else "completed"),
                 f"status {r.status} for finish_reason {c.choices[0].finish_reason}")


def tool_turn(client, model):
    """The paused turn; returns (its input items, the Response)."""
    r = client.responses.create(model=model, instructions=INSTRUCTIONS, input=QUESTION, tools=[WEATHER],
                                tool_choice="required", parallel_tool_calls=False, temperature=0,
                                max_output_tokens=200)
    calls = [o for o in r.output if o.type == "function_call"]
    ok = len(calls) == 1 and calls[0].name == "get_weather"
    try:
        args = json.loads(calls[0].arguments) if ok else None
    except ValueError:
        args = None
    checks.check(ok and isinstance(args, dict) and calls[0].call_id and calls[0].id.startswith("fc_"),
                 f"a tool turn: one function_call item with JSON arguments ({[o.type for o in r.output]})")
    icpt = (r.model_extra or {}).get("interception")
    checks.check(r.status == "completed" and icpt and icpt["id"].startswith("icpt_"),
                 f"the request stays paused ({icpt})")
    return calls, r, icpt


def follow_up_input(r, calls):
    items = QUESTION + [o.model_dump(exclude_none=True) for o in r.output]
    return items + [{"type": "function_call_output", "call_id": c.call_id,
                     "output": json.dumps({"temperature": 21, "sky": "clear"})} for c in calls]


def check_follow_up(what, resumed, icpt, usage, first, second):
    again = (second.model_extra or {}).get("interception")
    if again:
        LEFT_PAUSED.add(again["id"])
    checks.check(resumed == icpt["id"], f"{what}: continues the paused request ({resumed})")
    floor = first.usage.input_tokens // BLOCK * BLOCK
    checks.check(usage.input_tokens_details.cached_tokens >= floor,
                 f"{what}: finds the earlier turn's prompt cached "
                 f"({usage.input_tokens_details.cached_tokens} >= {floor} of {usage.input_tokens})")


def tool_round_trip(client, model):
    calls, r, icpt = tool_turn(client, model)
    if not calls or not icpt:
        return
    raw = client.responses.with_raw_response.create(model=model, instructions=INSTRUCTIONS,
                                                    input=follow_up_input(r, calls), tools=[WEATHER],
                                                    temperature=0, max_output_tokens=60)
    r2 = raw.parse()
    check_follow_up("the follow-up", raw.headers.get("x-infercept-resumed"), icpt, r2.usage, r, r2)
    checks.check(r2.status in ("completed", "incomplete") and r2.output,
                 f"the follow-up answers ({[o.type for o in r2.output]})")


def chained_round_trip(client, model):
    """The same tool turn, its follow-up by previous_response_id with only the tool's output."""
    calls, r, icpt = tool_turn(client, model)
    if not calls or not icpt:
        return
    got = client.responses.retrieve(r.id)
    checks.check(got.id == r.id and [o.id for o in got.output] == [o.id for o in r.output],
                 "GET /v1/responses/{id}: the stored Response")
    raw = client.responses.with_raw_response.create(
        model=model, instructions=INSTRUCTIONS, previous_response_id=r.id, tools=[WEATHER], temperature=0,
        max_output_tokens=60, input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                      "output": json.dumps({"temperature": 21, "sky": "clear"})}])
    r2 = raw.parse()
    check_follow_up("a follow-up by previous_response_id", raw.headers.get("x-infercept-resumed"), icpt,
                    r2.usage, r, r2)
    checks.check(r2.previous_response_id == r.id, "it names the response it follows")
    client.responses.delete(r2.id)
    try:
        client.responses.retrieve(r2.id)
        gone = False
    except openai.NotFoundError:
        gone = True
    checks.check(gone, "after DELETE the response is gone (404)")
    unstored = client.responses.create(model=model, input="Say hello.", max_output_tokens=8, temperature=0,
                                       store=False)
    try:
        client.responses.create(model=model, input="Again.", previous_response_id=unstored.id,
                                max_output_tokens=8)
        checks.check(False, "store: false keeps nothing")
    except openai.NotFoundError as e:
        err = e.body if isinstance(e.body, dict) else {}
        checks.check(err.get("param") == "previous_response_id",
                     f"store: false keeps nothing: a 404 naming previous_response_id ({err.get('message')})")


def read_stream(stream):
    """(events, final Response, problems) of a Responses stream."""
    events, problems = [], []
    open_items, args = {}, {}
    for ev in stream:
        events.append(ev)
        if ev.type == "response.output_item.added":
            open_items[ev.output_index] = ev.item.id
            args[ev.item.id] = ""
        elif ev.type in ("response.output_text.delta", "response.function_call_arguments.delta"):
            if open_items.get(ev.output_index) != ev.item_id:
                problems.append(f"{ev.type} for an item not open: {ev.item_id}")
            if ev.type == "response.function_call_arguments.delta":
                args[ev.item_id] += ev.delta
        elif ev.type == "response.function_call_arguments.done":
            if args.get(ev.item_id) != ev.arguments:
                problems.append(f"the deltas add up to {args.get(ev.item_id)!r}, done says {ev.arguments!r}")
        elif ev.type == "response.output_item.done":
            if open_items.pop(ev.output_index, None) != ev.item.id:
                problems.append(f"an item done that was not open: {ev.item.id}")
    seq = [ev.sequence_number for ev in events]
    if seq != list(range(len(events))):
        problems.append(f"sequence numbers {seq[:5]}...")
    if not events or events[0].type != "response.created":
        problems.append("the first event is not response.created")
    final = events[-1].response if events and events[-1].type in ("response.completed",
                                                                  "response.incomplete") else None
    if final is None:
        problems.append("no response.completed at the end")
    if open_items:
        problems.append(f"items never done: {open_items}")
    done_ids = [ev.item.id for ev in events if ev.type == "response.output_item.done"]
    if final is not None and [o.id for o in final.output] != done_ids:
        problems.append("the final output is not the items as streamed")
    return events, final, problems


def streamed_round_trip(client, model):
    stream = client.responses.create(model=model, instructions=INSTRUCTIONS, input=QUESTION, tools=[WEATHER],
                                     tool_choice="required", parallel_tool_calls=False, temperature=0,
                                     max_output_tokens=200, stream=True)
    events, final, problems = read_stream(stream)
    checks.check(not problems, f"a streamed tool turn: {len(events)} events in order" +
                 (f" ({problems})" if problems else ""))
    if final is None:
        return
    calls = [o for o in final.output if o.type == "function_call"]
    icpt = (final.model_extra or {}).get("interception")
    checks.check(len(calls) == 1 and calls[0].name == "get_weather" and icpt,
                 f"its final Response has the call and the interception ({icpt})")
    if not calls or not icpt:
        return
    raw = client.responses.with_raw_response.create(model=model, instructions=INSTRUCTIONS,
                                                    input=follow_up_input(final, calls), tools=[WEATHER],
                                                    temperature=0, max_output_tokens=60, stream=True)
    events2, final2, problems2 = read_stream(raw.parse())
    checks.check(not problems2 and final2 is not None and any(ev.type == "response.output_text.delta"
                                                              for ev in events2),
                 f"the streamed follow-up: text deltas, in order" + (f" ({problems2})" if problems2 else ""))
    if final2 is not None:
        check_follow_up("the streamed follow-up", raw.headers.get("x-infercept-resumed"), icpt, final2.usage,
                        final, final2)
    whole = client.responses.create(model=model, input="Say hello.", max_output_tokens=40, temperature=0)
    with client.responses.stream(model=model, input="Say hello.", max_output_tokens=40, temperature=0) as s:
        for _ in s:
            pass
        # get_final_response() needs response.completed: the prompt ends well within 40 tokens.
        helper = s.get_final_response() if whole.status == "completed" else None
    checks.check(helper is not None and helper.output_text == whole.output_text,
                 f"responses.stream() gives the whole answer's text "
                 f"({whole.status}: {helper.output_text if helper else None!r})")


def refusals(client, model):
    cases = [
        ("conversation", dict(input="Hi", conversation="conv_x")),
        ("input[0].content[0].type", dict(input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "http://example.com/a.png"}]}])),
        ("tools[0].type", dict(input="Hi", tools=[{"type": "web_search"}])),
    ]
    for param, kw in cases:
        try:
            client.responses.create(model=model, **kw)
            checks.check(False, f"{param}: refused")
        except openai.BadRequestError as e:
            err = e.body if isinstance(e.body, dict) else {}
            checks.check(e.status_code == 400 and err.get("param") == param and err.get("message"),
                         f"{param}: a 400 naming it ({err.get('message')})")
    try:
        client.responses.create(model="no-such-model", input="Hi")
        checks.check(False, "an unknown model: refused")
    except openai.NotFoundError as e:
        checks.check(e.status_code == 404, "an unknown model: 404")


def langchain_turns(base_url, model, port):
    """LangChain's ChatOpenAI on the Responses API: a forced call, then the tool's result sent
    back as LangChain does (the AIMessage and a ToolMessage) resumes the paused request."""
    try:
        from langchain_core.messages import HumanMessage, ToolMessage
        from langchain_openai import ChatOpenAI
    except ImportError:
        print("skipped: langchain-openai is not installed (make sets it up in build/venv)")
        return
    llm = ChatOpenAI(base_url=base_url, api_key="none", model=model, use_responses_api=True, temperature=0,
                     max_tokens=120)
    forced = llm.bind_tools([WEATHER], tool_choice="required", parallel_tool_calls=False)
    msgs = [HumanMessage("What is the weather in Paris?")]
    ai = forced.invoke(msgs)
    checks.check(len(ai.tool_calls) == 1 and ai.tool_calls[0]["name"] == "get_weather",
                 f"LangChain on the Responses API: a call ({ai.tool_calls})")
    if len(ai.tool_calls) != 1:
        return
    before = metric(port, "infercept:interception_resumes_total")
    msgs += [ai, ToolMessage(content="21 degrees and clear", tool_call_id=ai.tool_calls[0]["id"])]
    answer = llm.bind_tools([WEATHER]).invoke(msgs)
    resumed = metric(port, "infercept:interception_resumes_total") - before
    cached = (answer.usage_metadata or {}).get("input_token_details", {}).get("cache_read", 0)
    checks.check(resumed == 1 and cached > 0,
                 f"LangChain on the Responses API: the follow-up resumed it ({resumed:.0f}, {cached} cached)")


def agents_runs(base_url, model, port):
    try:
        from agents import (Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool,
                            set_tracing_disabled)
    except ImportError:
        print("skipped: openai-agents is not installed (make sets it up in build/venv)")
        return
    set_tracing_disabled(True)
    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather in a city."""
        calls.append(city)
        return f"21 degrees and clear in {city}"

    client = openai.AsyncOpenAI(base_url=base_url, api_key="none")
    agent = Agent(name="weather", instructions=INSTRUCTIONS,
                  model=OpenAIResponsesModel(model=model, openai_client=client), tools=[get_weather],
                  model_settings=ModelSettings(tool_choice="required", temperature=0.0, max_tokens=120,
                                               parallel_tool_calls=False))

    async def run(streamed, chained):
        if not streamed:
            return await Runner.run(agent, "What is the weather in Paris?", max_turns=3,
                                    auto_previous_response_id=chained)
        r = Runner.run_streamed(agent, "What is the weather in Paris?", max_turns=3,
                                auto_previous_response_id=chained)
        async for _ in r.stream_events():
            pass
        return r

    async def both():
        for streamed, chained in ((False, False), (True, False), (False, True)):
            what = ("an Agent on OpenAIResponsesModel" + (", streamed" if streamed else "") +
                    (", chained by previous_response_id" if chained else ""))
            before_calls, before = len(calls), metric(port, "infercept:interception_resumes_total")
            result = await run(streamed, chained)
            kinds = [type(i).__name__ for i in result.new_items]
            checks.check(len(calls) > before_calls and "ToolCallOutputItem" in kinds and result.final_output,
                         f"{what}: its tool ran ({calls[before_calls:]}) and it answered ({kinds})")
            resumed = metric(port, "infercept:interception_resumes_total") - before
            checks.check(resumed >= 1, f"{what}: its follow-up resumed the paused request ({resumed:.0f})")

    asyncio.run(both())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    proc, port, log = checks.start_server([args.binary, "serve", "--model", args.model, "--port", "0",
                                           "--kv-cache-tokens", "16384"])
    try:
        base = f"http://127.0.0.1:{port}/v1"
        client = openai.OpenAI(base_url=base, api_key="none", timeout=300)
        model = client.models.list().data[0].id
        text_turn(client, model)
        tool_round_trip(client, model)
        chained_round_trip(client, model)
        streamed_round_trip(client, model)
        refusals(client, model)
        langchain_turns(base, model, port)
        agents_runs(base, model, port)
        left = {i["id"] for i in open_interceptions(port)}
        checks.check(left == LEFT_PAUSED, f"no interception left open but the follow-ups' own ({left})")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    checks.finish()


if __name__ == "__main__":
    main()
