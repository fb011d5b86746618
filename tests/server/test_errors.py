"""Malformed and hostile requests: each gets its documented status and an OpenAI-shaped error
body, none crashes or wedges the server, and a well-formed stream running meanwhile completes."""

import json
import socket
import threading
import time

import pytest
import requests

from conftest import (API_KEY, HEADER_TIMEOUT_S, MAX_MODEL_LEN, MODEL_NAME, Server, metrics, sse_lines, wait_idle,
                      wait_metric)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
USER = [{"role": "user", "content": "hi"}]


def raw_exchange(server, data, shutdown_write=False, timeout=30):
    """Sends raw bytes, returns everything the server sends back until it closes (or timeout)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(data)
        if shutdown_write:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks) and not shutdown_write:
                    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
                    length = [int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")]
                    if length and len(body) >= length[0]:
                        break
        except socket.timeout:
            pass
    return b"".join(chunks)


def parse_raw(response):
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode()] = value.strip().decode()
    return status, headers, body


def request_bytes(path, body, headers=None, method="POST", auth=True):
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if auth:
        lines.append("Authorization: Bearer " + API_KEY)
    lines.append("Content-Type: application/json")
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if body is not None and not any(n.lower() == "content-length" for n in (headers or {})):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def check_error(status, body, expected_status, param=None, code=None, message=None):
    assert status == expected_status, body[:500]
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str), error
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    if message is not None:
        for part in ([message] if isinstance(message, str) else message):
            assert part in error["message"], error
    return error


def chat(**fields):
    return {"model": MODEL_NAME, "messages": USER, "max_tokens": 2, **fields}


# (name, path, JSON body or raw bytes, expected status, param, code, message parts)
JSON_CASES = [
    ("not an object", CHAT, [1, 2, 3], 400, None, "invalid_type", "JSON object"),
    ("messages missing", CHAT, {"model": MODEL_NAME}, 400, "messages", "missing_required_parameter", None),
    ("messages a string", CHAT, chat(messages="hi"), 400, "messages", "invalid_type", None),
    ("messages empty", CHAT, chat(messages=[]), 400, "messages", None, None),
    ("message not an object", CHAT, chat(messages=[3]), 400, "messages", None, "messages[0]"),
    ("unknown role", CHAT, chat(messages=[{"role": "wizard", "content": "x"}]), 400, "messages", None, "wizard"),
    ("user content null", CHAT, chat(messages=[{"role": "user", "content": None}]), 400, "messages", None, None),
    ("image content part", CHAT,
     chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), 400,
     "messages", None, "text"),
    ("tool arguments not an object", CHAT,
     chat(messages=USER + [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]),
     400, "messages", None, None),
    ("negative max_tokens", CHAT, chat(max_tokens=-5), 400, "max_tokens", "invalid_value", "-5"),
    ("max_tokens a string", CHAT, chat(max_tokens="10"), 400, "max_tokens", "invalid_type", None),
    ("max_tokens a float", CHAT, chat(max_tokens=2.5), 400, "max_tokens", "invalid_type", None),
    ("n = 0", CHAT, chat(n=0), 400, "n", None, None),
    ("n = 1000", CHAT, chat(n=1000), 400, "n", None, None),
    ("temperature -1", CHAT, chat(temperature=-1), 400, "temperature", None, "[0, 2]"),
    ("temperature a string", CHAT, chat(temperature="hot"), 400, "temperature", "invalid_type", None),
    ("top_p 2", CHAT, chat(top_p=2), 400, "top_p", None, None),
    ("top_p 0", CHAT, chat(top_p=0), 400, "top_p", None, None),
    ("top_k -2", CHAT, chat(top_k=-2), 400, "top_k", None, None),
    ("min_p 1.5", CHAT, chat(min_p=1.5), 400, "min_p", None, None),
    ("presence_penalty 3", CHAT, chat(presence_penalty=3), 400, "presence_penalty", None, None),
    ("repetition_penalty 0", CHAT, chat(repetition_penalty=0), 400, "repetition_penalty", None, None),
    ("seed a float", CHAT, chat(seed=1.5), 400, "seed", "invalid_type", None),
    ("top_logprobs 21", CHAT, chat(logprobs=True, top_logprobs=21), 400, "top_logprobs", None, None),
    ("top_logprobs without logprobs", CHAT, chat(top_logprobs=2), 400, "top_logprobs", None, None),
    ("logit_bias key not an id", CHAT, chat(logit_bias={"abc": 1}), 400, "logit_bias", None, None),
    ("logit_bias id outside the vocabulary", CHAT, chat(logit_bias={"999999": 1}), 400, "logit_bias", None, None),
    ("logit_bias value 1000", CHAT, chat(logit_bias={"5": 1000}), 400, "logit_bias", None, None),
    ("stop empty string", CHAT, chat(stop=[""]), 400, "stop", None, None),
    ("stop a number", CHAT, chat(stop=5), 400, "stop", "invalid_type", None),
    ("stream_options without stream", CHAT, chat(stream_options={"include_usage": True}), 400, "stream_options",
     None, None),
    ("stream not a bool", CHAT, chat(stream="yes"), 400, "stream", "invalid_type", None),
    ("tools malformed", CHAT, chat(tools=[{"type": "function"}]), 400, "tools[0].function", None, None),
    ("tool_choice required without tools", CHAT, chat(tool_choice="required"), 400, "tool_choice", "invalid_value",
     None),
    ("response_format unknown type", CHAT, chat(response_format={"type": "yaml"}), 400, "response_format",
     "invalid_value", None),
    ("response_format schema keyword", CHAT,
     chat(response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": {"not": {}}}}), 400,
     "response_format", "invalid_value", None),
    ("reasoning_effort unknown", CHAT, chat(reasoning_effort="extreme"), 400, "reasoning_effort", None, None),
    ("reasoning_effort 101", CHAT, chat(reasoning_effort=101), 400, "reasoning_effort", None, None),
    ("unknown model", CHAT, chat(model="gpt-9"), 404, "model", "model_not_found", "gpt-9"),
    ("prompt missing", COMPLETIONS, {"max_tokens": 2}, 400, "prompt", "missing_required_parameter", None),
    ("prompt a number", COMPLETIONS, {"prompt": 5}, 400, "prompt", "invalid_type", None),
    ("prompt empty list", COMPLETIONS, {"prompt": []}, 400, "prompt", None, None),
    ("prompt id outside the vocabulary", COMPLETIONS, {"prompt": [1, 999999]}, 400, "prompt", None, "vocabulary"),
    ("prompt negative id", COMPLETIONS, {"prompt": [-1]}, 400, "prompt[0]", None, None),
    ("echo", COMPLETIONS, {"prompt": "x", "echo": True}, 400, "echo", "unsupported_parameter", None),
    ("suffix", COMPLETIONS, {"prompt": "x", "suffix": "y"}, 400, "suffix", "unsupported_parameter", None),
    ("best_of 3", COMPLETIONS, {"prompt": "x", "best_of": 3}, 400, "best_of", "unsupported_parameter", None),
    ("prompt over the context limit", COMPLETIONS, {"prompt": [5] * 2000}, 400, "prompt", "context_length_exceeded",
     [str(MAX_MODEL_LEN), "2000"]),
    ("prompt + max_tokens over the limit", COMPLETIONS, {"prompt": [5] * 1000, "max_tokens": 100}, 400, "max_tokens",
     "context_length_exceeded", [str(MAX_MODEL_LEN), "1100", "1000", "100"]),
    ("more choices than the server holds", COMPLETIONS, {"prompt": [[1]] * 256, "n": 4}, 400, "n", None, None),
    ("detokenize id outside the tokenizer", "/detokenize", {"tokens": [5, 10 ** 9]}, 400, "tokens[1]", None, None),
    ("tokenize without prompt", "/tokenize", {"add_special_tokens": True}, 400, "prompt", None, None),
]

RAW_CASES = [
    # (name, bytes, shutdown_write, expected status, code)
    ("bad JSON", request_bytes(CHAT, b'{"messages": [{"role": "user", "content": "x"}'), False, 400, "invalid_json"),
    ("invalid UTF-8", request_bytes(CHAT, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'), False, 400,
     "invalid_json"),
    ("number overflow 1e400", request_bytes(CHAT, b'{"messages": [], "temperature": 1e400}'), False, 400,
     "invalid_json"),
    ("nesting 1000 deep", request_bytes(CHAT, b"[" * 1000 + b"]" * 1000), False, 400, "invalid_json"),
    ("truncated body", request_bytes(CHAT, b'{"messages": [', headers={"Content-Length": "100"}), True, 400,
     "truncated_body"),
    ("no API key", request_bytes(CHAT, b"{}", auth=False), False, 401, "invalid_api_key"),
    ("wrong API key", request_bytes(CHAT, b"{}", headers={"Authorization": "Bearer wrong"}, auth=False), False, 401,
     "invalid_api_key"),
    ("unknown route", request_bytes("/v2/everything", b"{}"), False, 404, "not_found"),
    ("wrong method", request_bytes("/v1/models", b"{}", method="DELETE"), False, 405, "method_not_allowed"),
    ("header over 32 KiB", request_bytes(CHAT, b"{}", headers={"X-Filler": "a" * 40000}), False, 431,
     "header_too_large"),
    ("garbage request line", b"NOT HTTP AT ALL\r\n\r\n", False, 400, "bad_request"),
    ("content-length over the limit", request_bytes(CHAT, b"{}", headers={"Content-Length": str(64 << 20)}), True, 413,
     "request_too_large"),
]

BACKGROUND_TOKENS = MAX_MODEL_LEN - 3 - 1  # the 3-token prompt and one position to spare


@pytest.fixture
def background_stream(server):
    """A well-formed stream that runs while the hostile requests come in: nearly the whole context,
    so that it is still streaming when they start, however fast the decode (160 tokens once
    finished within the fixture's 0.3 s on a Zen 4 with the interleaved weights)."""
    result = {}

    def run():
        body = {"model": MODEL_NAME, "prompt": [3, 4, 5], "max_tokens": BACKGROUND_TOKENS, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}, "temperature": 0}
        r = requests.post(server.url + COMPLETIONS, json=body, headers={"Authorization": "Bearer " + API_KEY},
                          stream=True, timeout=300)
        result["status"] = r.status_code
        events = [line[6:] for line in sse_lines(r) if line.startswith("data: ")]
        result["events"] = events
        result["end"] = time.time()

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.3)
    yield result, thread
    thread.join(300)


def test_hostile_requests_get_their_status_while_a_stream_completes(server, http, background_stream):
    result, thread = background_stream
    started = time.time()
    seen = set()
    for name, path, body, status, param, code, message in JSON_CASES:
        r = http.post(server.url + path, data=json.dumps(body), timeout=60)
        try:
            check_error(r.status_code, r.content, status, param, code, message)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None
        seen.add(name)
    for name, data, shutdown, status, code in RAW_CASES:
        try:
            got, headers, body = parse_raw(raw_exchange(server, data, shutdown_write=shutdown))
            check_error(got, body, status, code=code)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None
        seen.add(name)

    # An oversized body (the limit is 16 MiB) is refused before it is read.
    big = b'{"messages": [{"role": "user", "content": "' + b"a" * (17 << 20) + b'"}]}'
    r = http.post(server.url + CHAT, data=big, timeout=60)
    check_error(r.status_code, r.content, 413, code="request_too_large")
    # A 10 MB string field within the limit: refused from its length ("at least"), not tokenized.
    r = http.post(server.url + CHAT, json=chat(messages=[{"role": "user", "content": "word " * (2 << 20)}]), timeout=60)
    check_error(r.status_code, r.content, 400, "messages", "context_length_exceeded",
                [str(MAX_MODEL_LEN), "at least"])
    # A 10 MB string in a field nobody reads is ignored.
    r = http.post(server.url + CHAT, json=chat(user="u" * (10 << 20)), timeout=60)
    assert r.status_code == 200, r.text[:300]
    seen.update({"oversized body", "10 MB prompt", "10 MB ignored field"})

    # Headers one byte a second: cut off at the header deadline, nothing else blocked.
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as slow:
        t0 = time.time()
        closed_after = None
        for byte in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n":
            try:
                slow.sendall(bytes([byte]))
                slow.settimeout(1.0)
                if slow.recv(1) == b"":
                    closed_after = time.time() - t0
                    break
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.time() - t0
                break
        assert closed_after is not None and closed_after < HEADER_TIMEOUT_S + 3, closed_after
        # Meanwhile the server answered others.
        assert requests.get(server.url + "/health", timeout=5).status_code == 200
    seen.add("slowloris")
    hostile_end = time.time()

    thread.join(300)
    assert result["status"] == 200
    assert result["events"][-1] == "[DONE]"
    assert json.loads(result["events"][-2])["usage"]["completion_tokens"] == BACKGROUND_TOKENS
    assert result["end"] > started  # it ran while the hostile requests did
    assert len(seen) >= 30, len(seen)
    print(f"{len(seen)} hostile requests in {hostile_end - started:.1f} s")


def test_expect_100_continue_and_keep_alive(server):
    body = json.dumps({"prompt": [5, 6], "max_tokens": 1}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(request_bytes(COMPLETIONS, b"", headers={"Expect": "100-continue",
                                                              "Content-Length": str(len(body))}))
        got = sock.recv(65536)
        assert got == b"HTTP/1.1 100 Continue\r\n\r\n", got  # before the body is sent
        sock.sendall(body)
        while b'"usage"' not in got:
            got += sock.recv(65536)
    assert b"HTTP/1.1 200 OK" in got, got[:200]
    # Two requests on one connection.
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        for _ in range(2):
            sock.sendall(request_bytes("/health", None, method="GET"))
            data = b""
            while b"}" not in data:
                data += sock.recv(65536)
            assert data.startswith(b"HTTP/1.1 200 OK")


def test_stream_client_that_vanishes_is_aborted(server):
    wait_idle(server)
    before = metrics(server)
    body = {"model": MODEL_NAME, "prompt": [9, 9, 9], "max_tokens": 500, "ignore_eos": True, "stream": True}
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(request_bytes(COMPLETIONS, json.dumps(body).encode()))
        data = b""
        while b"data: " not in data:
            data += sock.recv(65536)
    # Gone after one chunk: the request is aborted and its pages are freed. The engine goes idle
    # first; the abort is counted when its last update reaches the connection's handler.
    health = wait_idle(server)
    aborts = 'deepinfer_requests_finished_total{finish_reason="abort"}'
    after = wait_metric(server, aborts, before[aborts] + 1)
    assert after[aborts] - before[aborts] == 1
    assert after["deepinfer_http_client_disconnects_total"] - before["deepinfer_http_client_disconnects_total"] == 1
    assert after["deepinfer_generation_tokens_total"] - before["deepinfer_generation_tokens_total"] < 500
    requests.post(server.url + "/reset_prefix_cache", headers={"Authorization": "Bearer " + API_KEY}, timeout=30)
    assert wait_idle(server)["kv_pages_in_use"] == 0, health


def test_non_stream_client_that_vanishes_is_aborted(server):
    wait_idle(server)
    before = metrics(server)
    body = {"model": MODEL_NAME, "prompt": [8, 8], "max_tokens": 500, "ignore_eos": True}
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(request_bytes(COMPLETIONS, json.dumps(body).encode()))
        time.sleep(0.5)
    wait_idle(server)
    after = metrics(server)
    assert after['deepinfer_http_requests_total{route="/v1/completions",status="499"}'] - \
        before.get('deepinfer_http_requests_total{route="/v1/completions",status="499"}', 0) == 1
    assert after["deepinfer_generation_tokens_total"] - before["deepinfer_generation_tokens_total"] < 500


def test_queue_full_is_429_with_retry_after(deepinfer, tiny_model):
    s = Server(deepinfer, ["--model", tiny_model, "--max-running", "1", "--max-queue", "1"])
    try:
        body = {"prompt": [1, 2, 3], "max_tokens": 3000, "ignore_eos": True, "stream": True}
        held = [requests.post(s.url + COMPLETIONS, json=body, stream=True, timeout=60) for _ in range(2)]
        assert [r.status_code for r in held] == [200, 200]
        r = requests.post(s.url + COMPLETIONS, json={"prompt": [1], "max_tokens": 1}, timeout=60)
        check_error(r.status_code, r.content, 429, code="queue_full")
        assert r.headers["Retry-After"] == "1"
        for h in held:
            h.close()
        # Once the held clients left, their requests were aborted and there is room again.
        deadline = time.time() + 30
        while True:
            r = requests.post(s.url + COMPLETIONS, json={"prompt": [1], "max_tokens": 1}, timeout=60)
            if r.status_code == 200 or time.time() > deadline:
                break
            time.sleep(0.1)
        assert r.status_code == 200, r.text
    finally:
        s.assert_clean_exit()
