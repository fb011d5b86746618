#!/usr/bin/env python3
"""Writes the DeepSeek-V4.1 chat-format golden fixtures under tests/data/chat/.

Run by hand, with the official encoder kept OUTSIDE the repository (it is third-party code and is only run):

  /root/gv/bin/python tools/golden/chat/make_fixtures.py --encoder /root/ref/chat/encoding_dsv41.py

The encoder is sglang's python/sglang/srt/entrypoints/openai/encoding_dsv41.py (commit 0e43c224...). Outputs:

  tests/data/chat/prompt/<name>.json  {"name", "description", "request", "prompt"} or {..., "error"}
  tests/data/chat/parse/<name>.json   {"name", "description", "thinking", "text", "official", "expected"}
  tests/data/chat/parse_generated.json  a list of parse fixtures built from random fragments

`request` is what deepinfer::ParseChatRequestJson accepts: {"messages", "tools"?, "thinking"?,
"reasoning_effort"?, "drop_thinking"?}. Request-level tools are attached the way sglang's serving layer does it:
an empty system message is inserted when the conversation does not start with one, and the tools go on
messages[0]. `prompt` is encode_messages() of that, byte for byte.

For parsing, `official` is parse_message_from_completion_text()'s result or the exception it raised. The official
parser raises on anything malformed, but a streaming parser has already emitted text by the time it could know, so
deepinfer's parser is lenient; `expected` is the lenient result (lenient_parse below), and this script asserts that
it equals the official result whenever the official parser succeeds.
"""

import argparse
import copy
import importlib.util
import json
import random
import shutil
from pathlib import Path


def load_encoder(path):
    spec = importlib.util.spec_from_file_location("encoding_dsv41_official", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------------------------------------------
# Prompt rendering
# ----------------------------------------------------------------------------------------------------------------


def official_prompt(enc, request):
    messages = copy.deepcopy(request["messages"])
    tools = request.get("tools")
    if tools:
        # sglang serving_chat: "insert an empty system prompt to help render tool system prompt".
        if not messages or messages[0].get("role") != "system":
            messages.insert(0, {"role": "system", "content": ""})
        messages[0]["tools"] = copy.deepcopy(tools)
    return enc.encode_messages(
        messages,
        thinking_mode="thinking" if request.get("thinking") else "chat",
        drop_thinking=request.get("drop_thinking", True),
        reasoning_effort=request.get("reasoning_effort"),
    )


def fn_tool(name, description, parameters):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


WEATHER = fn_tool(
    "get_weather",
    "Get the current weather for a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
)

SEARCH = fn_tool(
    "search_flights",
    "Search flights. Nested schema with arrays, objects, numbers and unicode: 旅行 ✈️.",
    {
        "type": "object",
        "properties": {
            "legs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
                        "to": {"type": "string"},
                        "date": {"type": "string", "format": "date"},
                    },
                    "required": ["from", "to"],
                },
                "minItems": 1,
            },
            "passengers": {"type": "integer", "minimum": 1, "maximum": 9, "default": 1},
            "budget": {"type": "number", "exclusiveMaximum": 1e6, "multipleOf": 0.01},
            "filters": {
                "type": "object",
                "properties": {
                    "nonstop": {"type": "boolean"},
                    "airlines": {"type": ["array", "null"], "items": {"type": "string"}},
                },
                "additionalProperties": False,
            },
            "note": {"description": "Tab\tnewline\nquote\" backslash\\ control\u0001 done", "type": "string"},
        },
        "required": ["legs"],
    },
)

CALC = fn_tool("calc", "Evaluate an expression.", {"type": "object", "properties": {"expr": {"type": "string"}}})


def tc(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def user(text):
    return {"role": "user", "content": text}


def system(text):
    return {"role": "system", "content": text}


def assistant(content, reasoning=None, tool_calls=None):
    msg = {"role": "assistant", "content": content}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    if tool_calls is not None:
        msg["tool_calls"] = tool_calls
    return msg


def tool(call_id, text):
    return {"role": "tool", "tool_call_id": call_id, "content": text}


TOOL_TURN = [
    system("You are a travel agent."),
    user("Weather in Paris and Tokyo, then compute 2+2."),
    assistant(
        "",
        "Need three calls.",
        [
            tc("call_a", "get_weather", json.dumps({"city": "Paris", "unit": "celsius"})),
            tc("call_b", "get_weather", json.dumps({"city": "Tokyo"})),
            tc("call_c", "calc", json.dumps({"expr": "2+2"})),
        ],
    ),
    # Out of call order on purpose: the encoder sorts results by the assistant's call order.
    tool("call_c", "4"),
    tool("call_a", "18C, cloudy"),
    tool("call_b", "25C, sunny"),
]


def prompt_cases():
    c = []

    def add(name, description, **request):
        c.append((name, description, request))

    add("single_user_chat", "One user turn, chat mode.", messages=[user("Hello!")])
    add("single_user_thinking_default_effort", "Thinking mode with no effort given (defaults to high=50).",
        messages=[user("Hello!")], thinking=True)
    add("system_user_chat", "System + user, chat mode.", messages=[system("Be terse."), user("Hi")])
    add("system_user_thinking", "System + user in thinking mode: effort line shares the system token.",
        messages=[system("Be terse."), user("Hi")], thinking=True)
    add("effort_int_1", "Lowest numeric effort.", messages=[user("q")], thinking=True, reasoning_effort=1)
    add("effort_int_100", "Highest numeric effort.", messages=[system("s"), user("q")], thinking=True,
        reasoning_effort=100)
    add("effort_int_37", "Arbitrary numeric effort.", messages=[user("q")], thinking=True, reasoning_effort=37)
    add("effort_name_low", "low -> 25.", messages=[user("q")], thinking=True, reasoning_effort="low")
    add("effort_name_high", "high -> 50.", messages=[user("q")], thinking=True, reasoning_effort="high")
    add("effort_name_xhigh", "xhigh -> 75.", messages=[user("q")], thinking=True, reasoning_effort="xhigh")
    add("effort_name_max", "max -> 100.", messages=[system("s"), user("q")], thinking=True, reasoning_effort="max")
    add("effort_ignored_in_chat", "Effort is validated but not rendered in chat mode.",
        messages=[system("s"), user("q")], reasoning_effort="max")
    add("multi_turn_chat", "Multi-turn chat mode; reasoning is never rendered in chat mode.",
        messages=[system("sys"), user("a"), assistant("b", "hidden"), user("c")])
    add("multi_turn_thinking_drops_reasoning", "Earlier reasoning is dropped in thinking mode without tools.",
        messages=[system("sys"), user("a"), assistant("b", "r1"), user("c"), assistant("d", "r2"), user("e")],
        thinking=True, reasoning_effort="low")
    add("multi_turn_thinking_keep_reasoning", "drop_thinking=false keeps every reasoning block.",
        messages=[user("a"), assistant("b", "r1"), user("c")], thinking=True, drop_thinking=False)
    add("thinking_ends_with_assistant", "Last message is an assistant turn after the last user: reasoning kept.",
        messages=[user("a"), assistant("b", "r1"), user("c"), assistant("d", "r2")], thinking=True)
    add("mid_conversation_system_last", "A trailing mid-conversation system message gets the generation header.",
        messages=[system("s0"), user("a"), assistant("b", "r"), system("Now answer in French.")], thinking=True)
    add("mid_conversation_system_then_user", "Mid-conversation system followed by a user turn.",
        messages=[user("a"), assistant("b"), system("Switch persona."), user("c")])
    add("mid_conversation_system_thinking_multi", "Mid system counts as a user for dropping reasoning.",
        messages=[user("a"), assistant("b", "r1"), system("S"), assistant("c", "r2"), user("d")], thinking=True)
    add("tools_thinking_keeps_reasoning", "Tools present: earlier reasoning is kept, every user gets <think>.",
        messages=[user("a"), assistant("b", "r1"), user("c")], thinking=True, tools=[WEATHER])
    add("tools_nested_schema_chat", "Nested JSON schemas rendered with Python json.dumps spacing.",
        messages=[system("Agent."), user("Book it.")], tools=[SEARCH, WEATHER])
    add("tools_without_system_inserts_one", "Tools with no system message: an empty one is inserted.",
        messages=[user("Weather?")], tools=[WEATHER], thinking=True, reasoning_effort="xhigh")
    add("assistant_tool_calls_string_args", "Assistant tool calls with string arguments; results merged.",
        messages=[user("Weather in Paris?"),
                  assistant("", "Call it.", [tc("c1", "get_weather", "{\"city\": \"Paris\"}")]),
                  tool("c1", "Sunny")], tools=[WEATHER], thinking=True)
    add("assistant_tool_calls_non_string_args", "Numbers, floats, booleans, null, arrays and objects.",
        messages=[user("go"),
                  assistant("Calling.", None, [tc("c1", "search_flights", json.dumps({
                      "legs": [{"from": "CDG", "to": "NRT", "date": "2025-01-02"}],
                      "passengers": 2, "budget": 1234.5, "tiny": 1e-7, "huge": 1e20, "neg": -0.0, "third": 1 / 3,
                      "filters": {"nonstop": True, "airlines": None}, "label": "naïve ✈️ \"q\"",
                      "empty_obj": {}, "empty_arr": [], "flag": False}, ensure_ascii=False))]),
                  tool("c1", "{\"ok\": true}"), user("thanks")], tools=[SEARCH])
    add("arguments_as_object", "function.arguments given as a JSON object instead of a string.",
        messages=[user("x"), assistant("", None, [tc("c1", "calc", {"expr": "1+1", "n": 3})]), tool("c1", "2")],
        tools=[CALC])
    add("multiple_tool_calls_results_in_call_order", "Three calls; tool results arrive out of order and are sorted.",
        messages=copy.deepcopy(TOOL_TURN), tools=[WEATHER, CALC], thinking=True)
    add("tool_results_then_user_text", "A user message right after tool results joins the same user turn.",
        messages=copy.deepcopy(TOOL_TURN) + [user("Also: summarise.")], tools=[WEATHER, CALC])
    add("tool_results_missing_ids", "Results without matching ids sort as position 0 (stable).",
        messages=[user("go"), assistant("", None, [tc("x1", "calc", "{\"expr\": \"1\"}"),
                                                   tc("x2", "calc", "{\"expr\": \"2\"}")]),
                  tool("x2", "two"), {"role": "tool", "content": "no id"}, tool("x1", "one")], tools=[CALC])
    add("two_tool_rounds_then_answer", "Two tool rounds, a final answer, and a new user turn; tools keep reasoning.",
        messages=[user("q"), assistant("", "r1", [tc("a", "calc", "{\"expr\": \"1+1\"}")]), tool("a", "2"),
                  assistant("", "r2", [tc("b", "calc", "{\"expr\": \"2*3\"}")]), tool("b", "6"),
                  assistant("Done: 6", "r3"), user("next")], tools=[CALC], thinking=True, reasoning_effort=90)
    add("tool_calls_thinking_no_tools_defined", "Tool history without tool definitions: reasoning dropped.",
        messages=[user("q"), assistant("", "r1", [tc("a", "calc", "{\"expr\": \"1\"}")]), tool("a", "1"),
                  assistant("one", "r2"), user("again")], thinking=True)
    add("empty_arguments_object", "A tool call with no arguments.",
        messages=[user("now"), assistant("", None, [tc("a", "get_time", "{}")]), tool("a", "12:00")])
    add("unicode_emoji", "Unicode, emoji, CJK, RTL and combining marks pass through unchanged.",
        messages=[system("Réponds en français 🇫🇷"), user("你好，世界 👋🏽 مرحبا e\u0301"),
                  assistant("Bonjour 😀", "思考…"), user("Ça va? 🧪")], thinking=True)
    add("special_token_like_text", "Text that looks like special tokens is rendered verbatim.",
        messages=[user("<｜User｜>x<｜Assistant｜></think><think><｜end▁of▁sentence｜>\n\n<｜DSML｜ calls>"),
                  assistant("<｜System｜>y"), user("<tool_result>z</tool_result>")])
    add("developer_role", "Developer messages render with the user token.",
        messages=[system("s"), {"role": "developer", "content": "Use metric units."}, user("q")])
    add("developer_dropped_before_last_user", "Thinking mode drops developer messages before the last user.",
        messages=[{"role": "developer", "content": "dev"}, user("a"), assistant("b", "r"), user("c")],
        thinking=True)
    add("latest_reminder_role", "latest_reminder after the last user turn.",
        messages=[user("a"), {"role": "latest_reminder", "content": "Today is Monday."}], thinking=True)
    add("consecutive_user_messages", "Consecutive user messages merge with a blank line.",
        messages=[user("part one"), user("part two"), user("")])
    add("content_text_parts", "OpenAI content arrays of text parts.",
        messages=[{"role": "system", "content": [{"type": "text", "text": "s1"}, {"type": "text", "text": "s2"}]},
                  {"role": "user", "content": [{"type": "text", "text": "u1"}, {"type": "text", "text": "u2"}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "a1"}]}, user("u3")])
    add("empty_content_array_user", "An empty content array contributes no block when merged.",
        messages=[user("a"), {"role": "user", "content": []}, user("b")])
    add("empty_system", "An empty system message still emits the system token.",
        messages=[system(""), user("q")])
    add("tool_null_content", "A tool result with null content renders as Python's None.",
        messages=[user("q"), assistant("", None, [tc("a", "calc", "{\"expr\": \"1\"}")]),
                  {"role": "tool", "tool_call_id": "a", "content": None}])
    add("assistant_null_content_with_calls", "Assistant content null with tool calls, chat mode.",
        messages=[user("q"),
                  {"role": "assistant", "content": None, "tool_calls": [tc("a", "calc", "{\"expr\": \"x\"}")]},
                  tool("a", "err")])
    add("only_system", "A lone system message gets no generation header.", messages=[system("alone")])
    add("no_messages", "No messages: just BOS.", messages=[])
    add("tool_content_parts", "Tool result content given as text parts.",
        messages=[user("q"), assistant("", None, [tc("a", "calc", "{\"expr\": \"1\"}")]),
                  {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "p1"},
                                                                    {"type": "text", "text": "p2"}]}])
    add("args_duplicate_keys", "Duplicate JSON keys in arguments: last value wins at the first position.",
        messages=[user("q"), assistant("", None, [tc("a", "calc", "{\"expr\": \"1\", \"n\": 1, \"expr\": \"2\"}")])])
    # Errors the official encoder raises; deepinfer must reject them with deepinfer::Error.
    add("error_unknown_role", "Unknown role.", messages=[{"role": "wizard", "content": "x"}])
    add("error_effort_zero", "Effort below range.", messages=[user("q")], thinking=True, reasoning_effort=0)
    add("error_effort_101", "Effort above range.", messages=[user("q")], thinking=True, reasoning_effort=101)
    add("error_effort_medium", "Unknown effort name.", messages=[user("q")], thinking=True, reasoning_effort="medium")
    add("error_effort_float", "Effort must be an integer.", messages=[user("q")], thinking=True,
        reasoning_effort=50.0)
    add("error_arguments_not_object", "Tool call arguments must be a JSON object.",
        messages=[user("q"), assistant("", None, [tc("a", "calc", "[1, 2]")])])
    add("error_arguments_invalid_json", "Tool call arguments must parse.",
        messages=[user("q"), assistant("", None, [tc("a", "calc", "{bad")])])
    add("error_image_placeholder", "The image placeholder token is rejected in text.",
        messages=[user("look <｜deepseek_image｜>")])
    add("error_developer_empty", "Developer messages need content.", messages=[{"role": "developer", "content": ""}])
    add("error_user_null_content", "A user message with null content.", messages=[{"role": "user", "content": None}])
    return c


# ----------------------------------------------------------------------------------------------------------------
# Completion parsing
# ----------------------------------------------------------------------------------------------------------------


def official_parse(enc, text, thinking):
    try:
        result = enc.parse_message_from_completion_text(text, "thinking" if thinking else "chat")
    except Exception as e:  # noqa: BLE001 - any failure of the official parser is recorded as such
        return {"error": f"{type(e).__name__}: {e}"}
    return {
        "reasoning_content": result["reasoning_content"],
        "content": result["content"],
        "tool_calls": [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]}
                       for t in result["tool_calls"]],
    }


def lenient_parse(enc, text, thinking):
    """deepinfer's documented parsing rule, written over whole text with the official helpers.

    - Thinking mode: everything before the first </think> is reasoning (all of it, if there is none).
    - Then content, where each "\\n\\n<｜DSML｜ calls" starts a tool-call block that is parsed with the official
      parse_tool_calls. A block that parses yields its tool calls and content resumes after it; a block that does
      not is plain content: the marker is kept as content and scanning resumes right after the marker.
    - A final end-of-sentence token that ends the text (outside a tool block) is dropped; anywhere else it is text.
    """
    eos = enc.eos_token
    marker = "\n\n<" + enc.dsml_token + enc.tool_calls_block_name

    def strip_eos(s):
        return s[: -len(eos)] if s.endswith(eos) else s

    reasoning, content, calls, i = "", "", [], 0
    if thinking:
        j, seg, stop = enc._read_until_stop(0, text, [enc.thinking_end_token])
        if stop is None:
            return {"reasoning_content": strip_eos(seg), "content": "", "tool_calls": []}
        reasoning, i = seg, j
    while i < len(text):
        j, seg, stop = enc._read_until_stop(i, text, [marker])
        if stop is None:
            content += strip_eos(seg)
            break
        content += seg
        try:
            k, _, block_calls = enc.parse_tool_calls(j, text)
        except ValueError:
            content += marker
            i = j
            continue
        calls += [{"name": t["name"], "arguments": t["arguments"]} for t in block_calls]
        i = k
    return {"reasoning_content": reasoning, "content": content, "tool_calls": calls}


def parse_cases(enc):
    eos, d = enc.eos_token, enc.dsml_token

    def inv(name, params):
        body = "\n".join(f'<{d} parameter name="{k}" string="{s}">{v}</{d} parameter>' for k, s, v in params)
        return f'<{d} invoke name="{name}">\n{body}\n</{d} invoke>'

    def block(*invokes):
        return f"\n\n<{d} calls>\n" + "\n".join(invokes) + f"\n</{d} calls>"

    weather = inv("get_weather", [("city", "true", "Paris"), ("days", "false", "3")])
    nested = inv("search_flights", [("legs", "false", '[{"from": "CDG", "to": "NRT"}]'),
                                    ("filters", "false", '{"nonstop": true, "airlines": null, "max": 1.5e3}'),
                                    ("note", "true", 'Say "hi"\n\ttab \\ back ✈️')])
    typed = inv("typed", [("s_true", "true", "true"), ("b_false", "false", "true"), ("n", "false", "42"),
                          ("s_num", "true", "42"), ("raw", "false", "not json")])
    c = []

    def add(name, description, thinking, text):
        c.append((name, description, thinking, text))

    add("chat_plain", "Plain content, chat mode.", False, "Hello there!" + eos)
    add("chat_plain_no_eos", "Truncated: no end-of-sentence token.", False, "Hello there")
    add("chat_empty", "Just the end token.", False, eos)
    add("thinking_reasoning_content", "Reasoning then content.", True,
        "Let me think.\nOK.</think>The answer is 4." + eos)
    add("thinking_empty_reasoning", "Empty reasoning.", True, "</think>Quick." + eos)
    add("thinking_unterminated", "Truncated inside reasoning.", True, "I am still thinking about")
    add("thinking_unterminated_eos", "End token inside reasoning.", True, "I give up" + eos)
    add("thinking_tool_call", "Reasoning then a tool call.", True, "Need weather.</think>" + block(weather) + eos)
    add("thinking_content_and_tool_call", "Reasoning, content, tool call.", True,
        "r</think>Checking now." + block(weather) + eos)
    add("chat_multiple_tool_calls", "Several invokes in one block.", False, block(weather, nested, typed) + eos)
    add("chat_nested_json_args", "Nested JSON argument values.", False, "x" + block(nested) + eos)
    add("chat_string_typing", "string=true/false typing, including raw non-JSON false values.", False,
        block(typed) + eos)
    add("tool_call_no_eos", "Tool calls without a trailing end token.", True, "r</think>" + block(weather))
    add("empty_invoke", "An invoke with no parameters.", False, block(f'<{d} invoke name="now">\n</{d} invoke>') + eos)
    add("empty_calls_block", "A calls block with no invokes.", False, f"hi\n\n<{d} calls>\n</{d} calls>" + eos)
    add("unicode_everywhere", "Unicode in reasoning, content and arguments.", True,
        "考える 🤔</think>Résumé ✅" + block(inv("t", [("q", "true", "日本語 🗾")])) + eos)
    add("malformed_missing_newline", "Missing newline after the calls tag: plain content.", False,
        f"x\n\n<{d} calls><{d} invoke name=\"f\">\n</{d} invoke>\n</{d} calls>" + eos)
    add("malformed_unterminated_parameter", "Truncated inside a parameter value.", True,
        f"r</think>ok\n\n<{d} calls>\n<{d} invoke name=\"f\">\n<{d} parameter name=\"a\" string=\"true\">half")
    add("malformed_unterminated_after_invoke", "Truncated after an invoke with the end token.", False,
        f"\n\n<{d} calls>\n{weather}\n" + eos)
    add("malformed_duplicate_parameter", "Duplicate parameter names.", False,
        block(inv("f", [("a", "true", "1"), ("a", "true", "2")])) + eos)
    add("malformed_bad_string_attr", "string attribute neither true nor false.", False,
        block(inv("f", [("a", "yes", "1")])) + eos)
    add("malformed_bad_tool_name", "Invoke header without a name attribute.", False,
        f"\n\n<{d} calls>\n<{d} invoke id=\"f\">\n</{d} invoke>\n</{d} calls>" + eos)
    add("malformed_then_valid_block", "A malformed block then a valid one.", False,
        f"a\n\n<{d} calls>oops" + block(weather) + eos)
    add("dsml_without_blank_line", "Tool block not preceded by a blank line.", False,
        f"see <{d} calls>\n</{d} calls>" + eos)
    add("think_tags_in_content", "Special tokens inside content.", False, "a <think>b</think> c" + eos)
    add("tool_start_inside_reasoning", "Tool block inside reasoning.", True, "r" + block(weather) + "</think>x" + eos)
    add("text_after_eos", "Text after the end token.", False, "one" + eos + "two" + eos)
    add("text_after_calls", "Text after a valid calls block.", False, block(weather) + "\ntrailing" + eos)
    add("two_valid_blocks", "Two valid blocks.", False, block(weather) + block(typed) + eos)
    add("quirk_marker_at_end", "Text ends right after the calls marker.", False, f"hello\n\n<{d} calls")
    add("quirk_invoke_header_at_end", "Text ends after an invoke header.", False,
        f"\n\n<{d} calls>\n<{d} invoke name=\"f\">\n")
    add("quirk_param_at_end", "Text ends after a parameter's closing newline.", False,
        f"\n\n<{d} calls>\n<{d} invoke name=\"f\">\n<{d} parameter name=\"a\" string=\"true\">v</{d} parameter>\n")
    add("quirk_invoke_end_token_at_end", "Text ends inside the invoke closing tag.", False,
        f"\n\n<{d} calls>\n<{d} invoke name=\"f\">\n</{d} invoke")
    add("quirk_name_whitespace_and_blank_line", "Whitespace before name= and an extra newline after the header.",
        False, f"\n\n<{d} calls>\n<{d} invoke \u3000\tname=\"f\">\n\n</{d} invoke>\n</{d} calls>" + eos)
    add("quirk_param_value_trailing_newline", "Parameter value followed by '<\\n' before the end tag.", False,
        f"\n\n<{d} calls>\n<{d} invoke name=\"f\">\n<{d} parameter name=\"a\" string=\"true\">v<\n/{d} parameter>\n"
        f"</{d} invoke>\n</{d} calls>" + eos)
    add("param_value_with_markup", "Parameter values containing angle brackets and DSML-like text.", False,
        block(inv("f", [("html", "true", "<b>x</b> < y"), ("dsml", "true", f"<{d} invoke")])) + eos)
    add("name_with_quotes", "Lazy name matching with quotes inside.", False,
        block(inv('we"ird', [('k" string="true">x', "false", "1")])) + eos)
    add("eos_inside_block", "End token inside a tool block.", False,
        f"\n\n<{d} calls>\n<{d} invoke name=\"f\">{eos}\n</{d} invoke>\n</{d} calls>" + eos)
    add("chat_newlines_tail", "Content ending in newlines.", False, "para\n\n" + eos)
    return c


def random_text(enc, rng):
    """Random completions from fragments that stress tag boundaries; most are well-formed enough to matter."""
    eos, d = enc.eos_token, enc.dsml_token
    pieces = ["a", "é", "🙂", "\n", "\n\n", "<", ">", "/", "\"", " ", "｜", "</think>", eos, f"<{d} calls>",
              f"\n\n<{d} calls", ">\n", f"<{d} invoke name=\"f\">\n", f"</{d} invoke>", f"</{d} calls>",
              f"<{d} parameter name=\"p\" string=\"true\">", f"<{d} parameter name=\"q\" string=\"false\">",
              f"</{d} parameter>", "true", "{\"x\": [1, 2]}"]

    def noise(n):
        return "".join(rng.choice(pieces[:11]) for _ in range(n))

    def good_invoke():
        params = [(f"k{i}", rng.choice(["true", "false"]), rng.choice(["v", "1", "[1]", "é\n<", ""]))
                  for i in range(rng.randrange(3))]
        body = "\n".join(f'<{d} parameter name="{k}" string="{s}">{v}</{d} parameter>' for k, s, v in params)
        return f'<{d} invoke name="f{rng.randrange(9)}">\n{body}\n</{d} invoke>'

    def good_block():
        return f"\n\n<{d} calls>\n" + "\n".join(good_invoke() for _ in range(rng.randrange(1, 3))) + f"\n</{d} calls>"

    parts = []
    if rng.random() < 0.5:
        parts += [noise(rng.randrange(6)), "</think>"]
    parts.append(noise(rng.randrange(6)))
    if rng.random() < 0.6:
        parts.append(good_block())
    if rng.random() < 0.3:
        parts.append("".join(rng.choice(pieces) for _ in range(rng.randrange(4))))
    if rng.random() < 0.7:
        parts.append(eos)
    text = "".join(parts)
    if rng.random() < 0.35 and text:
        # Damage: cut, or delete/duplicate one character.
        k = rng.randrange(len(text))
        text = rng.choice([text[:k], text[:k] + text[k + 1:], text[:k] + text[k] + text[k:]])
    return text


# ----------------------------------------------------------------------------------------------------------------


def write_json(path, obj):
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", required=True, help="path to the official encoding_dsv41.py (kept outside the repo)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[3] / "tests" / "data" / "chat"))
    ap.add_argument("--self-check", type=int, default=20000, help="random texts checked lenient == official")
    args = ap.parse_args()
    enc = load_encoder(args.encoder)
    out = Path(args.out)
    for sub in ("prompt", "parse"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True)

    n_prompt = n_error = 0
    for name, description, request in prompt_cases():
        fixture = {"name": name, "description": description, "request": request}
        try:
            fixture["prompt"] = official_prompt(enc, request)
            n_prompt += 1
        except Exception as e:  # noqa: BLE001 - the official encoder's rejection is the expectation
            fixture["error"] = f"{type(e).__name__}: {e}"
            n_error += 1
        write_json(out / "prompt" / f"{name}.json", fixture)

    def parse_fixture(name, description, thinking, text):
        official = official_parse(enc, text, thinking)
        expected = lenient_parse(enc, text, thinking)
        if "error" not in official:
            assert official == expected, (name, text, official, expected)
        return {"name": name, "description": description, "thinking": thinking, "text": text,
                "official": official, "expected": expected}

    n_parse = n_parse_ok = 0
    for name, description, thinking, text in parse_cases(enc):
        fixture = parse_fixture(name, description, thinking, text)
        n_parse += 1
        n_parse_ok += "error" not in fixture["official"]
        write_json(out / "parse" / f"{name}.json", fixture)

    rng = random.Random(41)
    generated, n_gen_ok = [], 0
    for i in range(args.self_check):
        thinking = rng.random() < 0.5
        fixture = parse_fixture(f"generated_{i}", "random fragments", thinking, random_text(enc, rng))
        ok = "error" not in fixture["official"]
        # Keep a small, balanced sample in the repository; every text is still self-checked above.
        if len(generated) < 120 and (ok or len(generated) - n_gen_ok < 60):
            generated.append(fixture)
            n_gen_ok += ok
    write_json(out / "parse_generated.json", generated)
    print(f"prompt fixtures: {n_prompt} rendered + {n_error} errors; parse fixtures: {n_parse} "
          f"({n_parse_ok} accepted by the official parser); generated: {len(generated)} ({n_gen_ok} accepted); "
          f"self-checked {args.self_check} random texts")


if __name__ == "__main__":
    main()
