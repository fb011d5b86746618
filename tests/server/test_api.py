"""The OpenAI API end to end: the official `openai` client and raw HTTP against `deepinfer serve`."""

import json
import random
import time

import requests

from conftest import API_KEY, MAX_MODEL_LEN, MODEL_NAME, Server, metrics, sse_lines, wait_idle

GREEDY = {"temperature": 0}
NO_EOS = {"ignore_eos": True}  # a random model could end early; counts must be exact


def tokenize(http, server, **body):
    response = http.post(server.url + "/tokenize", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def sse_events(response):
    """The `data:` payloads of an SSE response, [DONE] included."""
    events = []
    for line in sse_lines(response):
        if line and line.startswith("data: "):
            events.append(line[len("data: "):])
    return events


def test_models(client, http, server):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    card = http.get(server.url + "/v1/models/" + MODEL_NAME, timeout=30).json()
    assert card["id"] == MODEL_NAME and card["object"] == "model" and card["max_model_len"] == MAX_MODEL_LEN
    missing = http.get(server.url + "/v1/models/other", timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_chat_not_streamed(client, http, server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello, who are you?"}]
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=8, extra_body=NO_EOS, **GREEDY)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == MODEL_NAME
    choice = r.choices[0]
    assert choice.index == 0 and choice.finish_reason == "length"
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert r.usage.completion_tokens == 8
    assert r.usage.prompt_tokens == tokenize(http, server, messages=messages)["count"]
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8


def test_chat_streamed_equals_not_streamed(client):
    messages = [{"role": "user", "content": "Count to five."}]
    whole = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=12, extra_body=NO_EOS,
                                           **GREEDY)
    stream = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=12, extra_body=NO_EOS,
                                            stream=True, stream_options={"include_usage": True}, **GREEDY)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert all(c.usage is None for c in chunks[:-1])


def test_completions_streamed_and_not(client):
    whole = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=10, extra_body=NO_EOS,
                                      **GREEDY)
    assert whole.object == "text_completion" and whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 10
    stream = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=10, extra_body=NO_EOS,
                                       stream=True, **GREEDY)
    assert "".join(c.choices[0].text for c in stream) == whole.choices[0].text


def test_completions_batch_and_token_prompts(client):
    r = client.completions.create(model=MODEL_NAME, prompt=[[100, 200, 300], [400, 500]], max_tokens=3, n=2,
                                  extra_body=NO_EOS, **GREEDY)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 12
    # Greedy: the two samples of a prompt agree; each prompt matches its run alone.
    assert r.choices[0].text == r.choices[1].text and r.choices[2].text == r.choices[3].text
    alone = client.completions.create(model=MODEL_NAME, prompt=[400, 500], max_tokens=3, extra_body=NO_EOS, **GREEDY)
    assert alone.choices[0].text == r.choices[2].text


def test_n_choices_share_the_prompt_cache(client, server):
    messages = [{"role": "user", "content": "Tell me a story about a lighthouse keeper and a storm. " * 4}]
    before = metrics(server)
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, n=3, max_tokens=6, temperature=1.0,
                                       seed=5, extra_body=NO_EOS)
    after = metrics(server)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens == 18
    assert len({c.message.content for c in r.choices}) > 1  # different samples
    # The second and third choices adopt the first one's prompt blocks (16 tokens each).
    full_blocks = r.usage.prompt_tokens // 16 * 16
    hits = after["deepinfer_prefix_cache_hit_tokens_total"] - before["deepinfer_prefix_cache_hit_tokens_total"]
    assert hits >= 2 * (full_blocks - 16), (hits, r.usage.prompt_tokens)


def test_stop_strings(client):
    prompt = [11, 22, 33, 44, 55]
    full = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=24, extra_body=NO_EOS, **GREEDY)
    text = full.choices[0].text
    assert len(text) >= 8, text
    stop = text[len(text) // 2:len(text) // 2 + 2]
    expected = text[:text.find(stop)]
    for stops in (stop, [stop, "\u2603never\u2603"]):
        r = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=24, stop=stops, extra_body=NO_EOS,
                                      **GREEDY)
        assert r.choices[0].text == expected and r.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=24, stop=[stop], stream=True,
                                         extra_body=NO_EOS, **GREEDY)
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_seeds_reproduce(client):
    messages = [{"role": "user", "content": "Say something random."}]

    def sample(seed):
        r = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=10, temperature=1.0,
                                           top_p=0.95, seed=seed, extra_body=NO_EOS)
        return r.choices[0].message.content

    first = sample(123)
    assert sample(123) == first
    assert sample(124) != first


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                                       logprobs=True, top_logprobs=3, extra_body=NO_EOS, **GREEDY)
    entries = r.choices[0].logprobs.content
    assert len(entries) == 5
    for e in entries:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        assert e.logprob == tops[0]  # greedy picks the most likely token
        assert all(0 <= b < 256 for b in e.bytes)
    stream = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=5, logprobs=True, top_logprobs=3, stream=True,
                                            extra_body=NO_EOS, **GREEDY)
    streamed = [e for c in stream if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in entries]


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=5, logprobs=2, extra_body=NO_EOS,
                                  **GREEDY)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    assert all(len(t) <= 2 for t in lp.top_logprobs)
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    assert all(x <= 0 for x in lp.token_logprobs)


def test_logit_bias(client, http, server):
    forced = tokenize(http, server, prompt="hello")["tokens"][0]
    r = client.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=4, logit_bias={str(forced): 100},
                                  extra_body=NO_EOS, **GREEDY)
    expected = http.post(server.url + "/detokenize", json={"tokens": [forced] * 4}, timeout=30).json()["prompt"]
    assert r.choices[0].text == expected
    # Forbidding the greedy first token changes it.
    plain = client.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=1, logprobs=0,
                                      extra_body=NO_EOS, **GREEDY)
    first = tokenize(http, server, prompt=plain.choices[0].text)["tokens"][0]
    banned = client.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=1,
                                       logit_bias={str(first): -100}, extra_body=NO_EOS, **GREEDY)
    assert banned.choices[0].text != plain.choices[0].text


def test_usage_reports_cached_tokens(client):
    rng = random.Random(99)
    base = [rng.randrange(1000, 100000) for _ in range(100)]
    first = client.completions.create(model=MODEL_NAME, prompt=base + [5], max_tokens=1, extra_body=NO_EOS, **GREEDY)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    second = client.completions.create(model=MODEL_NAME, prompt=base + [6, 7], max_tokens=1, extra_body=NO_EOS,
                                       **GREEDY)
    assert second.usage.prompt_tokens == 102
    assert second.usage.prompt_tokens_details.cached_tokens == 96  # 6 full blocks of 16
    # Chat: the same long system prompt.
    system = {"role": "system", "content": "You are a careful assistant who answers in full sentences. " * 6}
    client.chat.completions.create(model=MODEL_NAME, messages=[system, {"role": "user", "content": "One"}],
                                   max_tokens=1, **GREEDY)
    again = client.chat.completions.create(model=MODEL_NAME, messages=[system, {"role": "user", "content": "Two"}],
                                           max_tokens=1, **GREEDY)
    assert again.usage.prompt_tokens_details.cached_tokens >= 48


def test_tokenize_round_trip(http, server):
    text = "Hello, world! Grüße, 你好 🌍 — tabs\tand\nnewlines"
    t = tokenize(http, server, prompt=text, return_token_strs=True)
    assert t["count"] == len(t["tokens"]) and t["max_model_len"] == MAX_MODEL_LEN
    assert len(t["token_strs"]) == t["count"]
    back = http.post(server.url + "/detokenize", json={"tokens": t["tokens"]}, timeout=30)
    assert back.status_code == 200 and back.json()["prompt"] == text
    chat = tokenize(http, server, messages=[{"role": "user", "content": text}])
    assert chat["tokens"][0] == 0  # BOS opens every chat prompt
    thinking = tokenize(http, server, messages=[{"role": "user", "content": text}],
                        chat_template_kwargs={"thinking": True})
    assert thinking["tokens"][-1] == 128821  # <think>


def test_thinking_output_is_reasoning(client):
    # A random model never closes </think>: all of its text is reasoning, none is content.
    r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Why?"}], max_tokens=6,
                                       extra_body={"chat_template_kwargs": {"thinking": True}, **NO_EOS}, **GREEDY)
    message = r.choices[0].message
    assert message.reasoning_content and message.content == ""
    stream = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Why?"}],
                                            max_tokens=6, stream=True, reasoning_effort="high",
                                            extra_body=NO_EOS, **GREEDY)
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in stream if c.choices)
    assert reasoning == message.reasoning_content


def test_tools_are_rendered_unless_tool_choice_none(client, http, server):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    plain = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=1, **GREEDY)
    with_tools = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=tools, max_tokens=1,
                                                **GREEDY)
    none = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=tools, tool_choice="none",
                                          max_tokens=1, **GREEDY)
    assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens + 20
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens
    # The history's tool calls render back as DSML: the prompt grows by the call and its result.
    history = messages + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    counted = tokenize(http, server, messages=history, tools=tools)["count"]
    r = client.chat.completions.create(model=MODEL_NAME, messages=history, tools=tools, max_tokens=1, **GREEDY)
    assert r.usage.prompt_tokens == counted > with_tools.usage.prompt_tokens


def test_unknown_fields_are_ignored(http, server):
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi", "future_message_field": 1}],
            "max_tokens": 2, "metadata": {"a": "b"}, "store": True, "some_future_field": {"nested": [1, 2]}}
    r = http.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 2


def test_metrics_match_what_was_sent(client, server):
    wait_idle(server)
    before = metrics(server)
    sent = []
    for length, max_tokens in ((10, 4), (20, 5), (30, 6)):
        r = client.completions.create(model=MODEL_NAME, prompt=list(range(1000, 1000 + length)), max_tokens=max_tokens,
                                      extra_body=NO_EOS, **GREEDY)
        sent.append(r.usage)
    stream = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Metrics?"}],
                                            max_tokens=7, stream=True, stream_options={"include_usage": True},
                                            extra_body=NO_EOS, **GREEDY)
    sent.append(list(stream)[-1].usage)
    after = metrics(server)

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)

    assert delta('deepinfer_requests_finished_total{finish_reason="length"}') == 4
    assert delta("deepinfer_prompt_tokens_total") == sum(u.prompt_tokens for u in sent)
    assert delta("deepinfer_generation_tokens_total") == sum(u.completion_tokens for u in sent) == 22
    assert delta('deepinfer_http_requests_total{route="/v1/completions",status="200"}') == 3
    assert delta('deepinfer_http_requests_total{route="/v1/chat/completions",status="200"}') == 1
    for histogram in ("time_to_first_token_seconds", "e2e_request_latency_seconds", "time_per_output_token_seconds"):
        assert delta(f"deepinfer_{histogram}_count") == 4
        assert delta(f'deepinfer_{histogram}_bucket{{le="+Inf"}}') == 4
    assert after["deepinfer_requests_running"] == 0
    assert after["deepinfer_kv_cache_budget_bytes"] > 0
    assert after["process_resident_memory_bytes"] > 0
    assert after["deepinfer_heap_allocated_bytes"] > 0
    assert 0 < after["deepinfer_backend_held_bytes"] < after["deepinfer_heap_allocated_bytes"]
    assert delta("deepinfer_engine_steps_total") >= 22
    assert "deepinfer_engine_one_thread_steps_total" in after
    assert 0 <= delta("deepinfer_engine_one_thread_steps_total") <= delta("deepinfer_engine_steps_total")


def test_access_log_has_one_line_per_request(client, server):
    r = client.completions.create(model=MODEL_NAME, prompt=[7, 8, 9], max_tokens=2, extra_body=NO_EOS, **GREEDY)
    deadline = time.time() + 10
    while time.time() < deadline and r.id not in server.text_log():
        time.sleep(0.05)
    lines = [line for line in server.log if r.id in line]
    assert len(lines) == 1, lines
    assert '"POST /v1/completions" 200 prompt=3 completion=2 ttft_ms=' in lines[0] and "total_ms=" in lines[0]


def test_sigterm_finishes_or_aborts_within_the_deadline(deepinfer, tiny_model):
    s = Server(deepinfer, ["--model", tiny_model, "--shutdown-timeout", "1"])
    body = {"prompt": [1, 2, 3], "max_tokens": 3000, "ignore_eos": True, "stream": True}
    response = requests.post(s.url + "/v1/completions", json=body, stream=True, timeout=60)
    assert response.status_code == 200
    lines = sse_lines(response)
    first = next(line for line in lines if line)
    assert first.startswith("data: ")
    started = time.time()
    s.terminate()
    rest = [line for line in lines if line]
    code = s.stop()
    assert code == 0, s.text_log()
    assert time.time() - started < 10
    assert rest[-1] == "data: [DONE]"
    finishes = [json.loads(line[6:]) for line in rest[:-1]]
    assert any(e.get("choices") and e["choices"][0]["finish_reason"] == "abort" for e in finishes)
    assert any("shutting down" in e.get("error", {}).get("message", "") for e in finishes)
    assert "shutting down" in s.text_log()
