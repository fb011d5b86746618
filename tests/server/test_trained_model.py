"""End-to-end tool calls and reasoning, against the embedded default model (kjv-tiny, trained on
the King James Bible and a generated chat set, tools/train/): they need a model that has learnt
the V4.1 chat format, which the random checkpoints have not. The model is 10 MB: it knows the chat
set's tools and phrasings, so the tools below are described as there, and it has the format, not
the arithmetic (its answer is checked for a number, not for the right one). If the default is ever
a model whose vocabulary does not cover its tokenizer (the random tiny-a was), these tests skip,
saying so. The structure of tool calls and reasoning is also tested without a model in
tests/server/openai_api_test.cc (ResponseBuilder) and the streaming parser's own tests."""

import json
import re

import pytest
from openai import OpenAI

from conftest import API_KEY, Server

MODEL_NAME = "default"
UNTRAINED_NOTE = "is smaller than its tokenizer's"


@pytest.fixture(scope="module")
def default_server(deepinfer):
    s = Server(deepinfer, ["--served-model-name", MODEL_NAME, "--api-key", API_KEY, "--seed", "7"])
    yield s
    s.assert_clean_exit()


@pytest.fixture
def client(default_server):
    if UNTRAINED_NOTE in default_server.text_log():
        pytest.skip("the embedded default model's vocabulary does not cover its tokenizer (a random test "
                    "model?); tool calls and reasoning need the trained default model")
    return OpenAI(base_url=default_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.mark.parametrize("stream", [False, True])
def test_tool_call_round_trip(client, stream):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    if stream:
        calls = {}
        finish = None
        for chunk in client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=TOOLS, stream=True,
                                                    temperature=0, max_tokens=200):
            for choice in chunk.choices:
                for delta in choice.delta.tool_calls or []:
                    call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                    call["id"] = delta.id or call["id"]
                    if delta.function and delta.function.name:
                        call["name"] = delta.function.name
                    if delta.function and delta.function.arguments:
                        call["arguments"] += delta.function.arguments
                finish = choice.finish_reason or finish
        assert finish == "tool_calls"
        call = calls[0]
    else:
        r = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=TOOLS, temperature=0,
                                           max_tokens=200)
        assert r.choices[0].finish_reason == "tool_calls"
        c = r.choices[0].message.tool_calls[0]
        call = {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
    assert call["name"] == "get_weather" and call["id"]
    assert json.loads(call["arguments"])["city"]
    messages += [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call["id"], "type": "function",
                         "function": {"name": call["name"], "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"city": "Paris", "sky": "sunny"})}]
    final = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=TOOLS, temperature=0,
                                           max_tokens=200)
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_is_split_from_the_answer(client, stream):
    messages = [{"role": "user", "content": "What is 12 + 30?"}]
    extra = {"chat_template_kwargs": {"thinking": True}}
    if stream:
        reasoning, content = "", ""
        for chunk in client.chat.completions.create(model=MODEL_NAME, messages=messages, stream=True, temperature=0,
                                                    max_tokens=300, extra_body=extra):
            for choice in chunk.choices:
                reasoning += getattr(choice.delta, "reasoning_content", None) or ""
                content += choice.delta.content or ""
    else:
        r = client.chat.completions.create(model=MODEL_NAME, messages=messages, temperature=0, max_tokens=300,
                                           extra_body=extra)
        reasoning, content = r.choices[0].message.reasoning_content, r.choices[0].message.content
    assert reasoning.strip() and content.strip()
    assert "</think>" not in reasoning + content
    assert re.search(r"[0-9]", content)


@pytest.fixture(scope="module")
def speculative_server(deepinfer):
    s = Server(deepinfer, ["--served-model-name", MODEL_NAME, "--api-key", API_KEY, "--seed", "7",
                           "--speculative", "dspark", "--speculative-length", "5"])
    yield s
    s.assert_clean_exit()


def test_speculative_server_streams_the_plain_greedy_text_and_counts_its_drafts(default_server, speculative_server):
    """serve --speculative dspark: streamed and whole greedy completions equal the plain server's, a
    request can opt out, and /metrics counts the verify steps and the accepted drafts by position."""
    from conftest import metrics

    prompt = "Revelation 2\nUnto the angel of the church of Ephesus write; These things saith"
    plain = OpenAI(base_url=default_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    spec = OpenAI(base_url=speculative_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    body = dict(model=MODEL_NAME, prompt=prompt, max_tokens=96, temperature=0)
    expected = plain.completions.create(**body).choices[0].text
    assert spec.completions.create(**body).choices[0].text == expected
    streamed = "".join(c.choices[0].text for c in spec.completions.create(**body, stream=True) if c.choices)
    assert streamed == expected
    before = metrics(speculative_server)["deepinfer_spec_verify_steps_total"]
    opted_out = spec.completions.create(**body, extra_body={"speculative": False}).choices[0].text
    assert opted_out == expected
    after = metrics(speculative_server)
    assert after["deepinfer_spec_verify_steps_total"] == before  # the opt-out verified nothing
    assert after["deepinfer_spec_verify_steps_total"] > 0
    assert after['deepinfer_spec_verified_by_position_total{position="1"}'] >= after[
        'deepinfer_spec_accepted_by_position_total{position="1"}']
    assert after["deepinfer_spec_emitted_tokens_total"] >= after["deepinfer_spec_verify_steps_total"]
