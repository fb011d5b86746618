"""Structured output through `deepinfer serve` with the official `openai` client: response_format
json_schema (also `client.beta.chat.completions.parse` with a pydantic model) and json_object,
vLLM's regex and choice (structured_outputs and the older guided_* spellings), forced tool calls
(tool_choice "required" and a named function), with streaming, n > 1, logprobs and thinking.

The server's model is random, so only the constraint makes its output parse. Its strings end only
when a schema bounds them (maxLength) or a logit_bias favours the quote token; the bias changes which
valid document comes out, never whether it is valid (the mask is applied after it)."""

import json

import jsonschema
import pytest
from pydantic import BaseModel, Field

from conftest import MODEL_NAME

MESSAGES = [{"role": "user", "content": "Answer in JSON."}]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
                   "required": ["city"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "a + b",
    "parameters": {"type": "object",
                   "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                  "b": {"type": "integer", "minimum": 0, "maximum": 99}},
                   "required": ["a", "b"], "additionalProperties": False}}}


def token_id(http, server, text):
    response = http.post(server.url + "/tokenize", json={"prompt": text, "add_special_tokens": False}, timeout=60)
    assert response.status_code == 200, response.text
    tokens = response.json()["tokens"]
    assert len(tokens) == 1, (text, tokens)
    return tokens[0]


@pytest.fixture(scope="module")
def quote_bias(http, server):
    """logit_bias that makes the random model close its strings at once."""
    return {str(token_id(http, server, '"')): 20}


def schema_format(schema, name="person"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def test_json_schema_choices_validate(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, n=3, max_tokens=200, temperature=1,
                                       seed=5, response_format=schema_format(PERSON))
    assert len(r.choices) == 3
    for choice in r.choices:
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), PERSON)
    assert len({c.message.content for c in r.choices}) > 1  # sampled, not one forced document


def test_json_schema_streamed_equals_not_streamed_with_logprobs(client):
    args = dict(model=MODEL_NAME, messages=MESSAGES, max_tokens=200, temperature=1, seed=9,
                response_format=schema_format(PERSON), logprobs=True, top_logprobs=2)
    whole = client.chat.completions.create(**args)
    stream = client.chat.completions.create(stream=True, **args)
    text, logprobs, finish = "", [], None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        text += choice.delta.content or ""
        if choice.logprobs and choice.logprobs.content:
            logprobs += choice.logprobs.content
        finish = choice.finish_reason or finish
    assert finish == "stop" and text == whole.choices[0].message.content
    jsonschema.validate(json.loads(text), PERSON)
    entries = whole.choices[0].logprobs.content
    assert [e.token for e in logprobs] == [e.token for e in entries]
    assert len(entries) == whole.usage.completion_tokens  # the end-of-sentence token's entry included
    # Log-probabilities are those of the masked distribution: a forced token has probability 1 and
    # no runner-up.
    assert all(1 <= len(e.top_logprobs) <= 2 for e in entries)
    assert all(e.logprob == 0.0 for e in entries if len(e.top_logprobs) == 1)


class Verse(BaseModel):
    book: str = Field(max_length=10)
    chapter: int = Field(ge=1, le=150)
    verse: int = Field(ge=1, le=176)


def test_beta_parse_with_a_pydantic_model(client):
    completion = client.beta.chat.completions.parse(model=MODEL_NAME, messages=MESSAGES, response_format=Verse,
                                                    max_tokens=100, temperature=1, seed=3)
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, Verse)
    assert 1 <= message.parsed.chapter <= 150 and len(message.parsed.book) <= 10


def test_json_object(client, quote_bias):
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, n=4, max_tokens=300, temperature=1,
                                       seed=2, response_format={"type": "json_object"}, logit_bias=quote_bias)
    for choice in r.choices:
        assert choice.finish_reason == "stop", choice
        assert isinstance(json.loads(choice.message.content), dict)


def test_regex_and_choice_in_both_spellings(client):
    for extra in ({"structured_outputs": {"regex": "[0-9]{3}-[a-z]{2}"}}, {"guided_regex": "[0-9]{3}-[a-z]{2}"}):
        r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, n=2, max_tokens=20, temperature=1,
                                           seed=4, extra_body=extra)
        for choice in r.choices:
            text = choice.message.content
            assert len(text) == 6 and text[:3].isdigit() and text[3] == "-" and text[4:].isalpha(), text
    options = ["yes", "no", "maybe later"]
    for extra in ({"structured_outputs": {"choice": options}}, {"guided_choice": options}):
        r = client.completions.create(model=MODEL_NAME, prompt="Yes or no?", n=4, max_tokens=20, temperature=1,
                                      seed=6, extra_body=extra)
        assert all(c.text in options and c.finish_reason == "stop" for c in r.choices), r.choices


def test_thinking_comes_before_the_constraint(client, http, server):
    # The bias makes the random model close its reasoning soon; the document follows it.
    think_end = token_id(http, server, "</think>")
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=200, temperature=1, seed=8,
                                       response_format=schema_format(PERSON), logit_bias={str(think_end): 8},
                                       extra_body={"chat_template_kwargs": {"thinking": True}})
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "stop"
    assert message.reasoning_content
    jsonschema.validate(json.loads(message.content), PERSON)


def test_tool_choice_required_and_named(client):
    tools = [WEATHER, ADD]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                       tools=tools, tool_choice="required", n=3, max_tokens=400, temperature=1,
                                       seed=1)
    for choice in r.choices:
        assert choice.finish_reason == "tool_calls", choice
        for call in choice.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
    named = {"type": "function", "function": {"name": "add"}}
    for stream in (False, True):
        args = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "2 + 3?"}], tools=tools,
                    tool_choice=named, parallel_tool_calls=False, max_tokens=400, temperature=1, seed=2)
        if not stream:
            calls = client.chat.completions.create(**args).choices[0].message.tool_calls
            names = [c.function.name for c in calls]
            arguments = [c.function.arguments for c in calls]
        else:
            names, arguments = [], []
            for chunk in client.chat.completions.create(stream=True, **args):
                for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                    if delta.function.name:
                        names.append(delta.function.name)
                        arguments.append("")
                    arguments[-1] += delta.function.arguments or ""
        assert names == ["add"], names  # parallel_tool_calls false: exactly one call
        jsonschema.validate(json.loads(arguments[0]), schemas["add"])


@pytest.mark.parametrize("body,param,says", [
    ({"response_format": schema_format({"type": "array", "uniqueItems": True})}, "response_format",
     'unsupported JSON Schema keyword "uniqueItems"'),
    ({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}}, "structured_outputs",
     "cannot be combined with response_format"),
    ({"response_format": {"type": "json_object"}, "ignore_eos": True}, "ignore_eos", "structured output"),
    ({"tool_choice": "required"}, "tool_choice", 'non-empty "tools"'),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [WEATHER]}, "tool_choice", "nope"),
    ({"tools": [WEATHER], "parallel_tool_calls": False}, "parallel_tool_calls", "forced tool call"),
    ({"structured_outputs": {"regex": "a(b"}}, "structured_outputs", "regex"),
])
def test_bad_constraints_are_400_naming_the_field(http, server, body, param, says):
    response = http.post(server.url + "/v1/chat/completions",
                         json={"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 4, **body}, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and says in error["message"], error
