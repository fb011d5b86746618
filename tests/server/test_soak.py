"""Soak: many concurrent streaming clients on the embedded default model, a third of them
disconnecting at random points (mid-request, after the response header, after a few chunks).

Every surviving stream ends with [DONE] and its full token count; after each round the KV
pool holds no page once the prefix cache is dropped; RSS does not grow from round to round;
the server's /metrics totals equal what the clients counted. The same test runs shorter
under ASan + UBSan and TSan builds (tools/test.sh passes --soak-clients / --soak-rounds)."""

import http.client
import json
import os
import random
import socket
import threading
import time

import requests

from conftest import Server, metrics, wait_idle

VOCAB = 512  # the embedded default model's
PATH = "/v1/completions"


def submit_bytes(body):
    return (f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def run_client(port, plan, out):
    body = json.dumps({"prompt": plan["prompt"], "max_tokens": plan["max_tokens"], "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}, "temperature": 0}).encode()
    if plan["mode"] == "mid_request":
        with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
            data = submit_bytes(body)
            sock.sendall(data[:len(data) - len(body) // 2])
        out["mode"] = "mid_request"
        return
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", PATH, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        out["status"] = response.status
        if plan["mode"] == "after_header":
            return
        chunks = 0
        while True:
            line = response.readline()
            if not line:
                break
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                out["done"] = True
                break
            event = json.loads(data)
            if event.get("usage"):
                out["usage"] = event["usage"]
            for choice in event.get("choices", []):
                if choice.get("finish_reason"):
                    out["finish"] = choice["finish_reason"]
                if choice.get("text"):
                    chunks += 1
            out["chunks"] = chunks
            if plan["mode"] == "after_chunks" and chunks >= plan["chunks"]:
                return
    finally:
        conn.close()


def plan_round(rng, clients):
    plans = []
    for i in range(clients):
        plan = {"prompt": [rng.randrange(3, VOCAB) for _ in range(rng.randrange(4, 33))]}
        if i % 3 == 2:  # a third disconnect, at a random point
            plan["mode"] = rng.choice(["mid_request", "after_header", "after_chunks", "after_chunks"])
            plan["chunks"] = rng.randrange(1, 9)
            plan["max_tokens"] = 64  # far beyond where it leaves, so it is surely still running
        else:
            plan["mode"] = "survive"
            plan["max_tokens"] = rng.randrange(8, 25)
        plans.append(plan)
    return plans


def soak_round(server, rng, clients):
    plans = plan_round(rng, clients)
    outs = [{} for _ in plans]
    before = metrics(server)
    start = threading.Barrier(len(plans) + 1)

    def worker(plan, out):
        start.wait()
        try:
            run_client(server.port, plan, out)
        except Exception as e:  # recorded, asserted below
            out["exception"] = repr(e)

    threads = [threading.Thread(target=worker, args=(p, o)) for p, o in zip(plans, outs)]
    for t in threads:
        t.start()
    t0 = time.time()
    start.wait()
    for t in threads:
        t.join(600)
    elapsed = time.time() - t0
    wait_idle(server)
    # With the prefix cache dropped, no page may be left in use: nothing leaked from aborts.
    requests.post(server.url + "/reset_prefix_cache", timeout=30).raise_for_status()
    health = wait_idle(server)
    after = metrics(server)

    survivors = [(p, o) for p, o in zip(plans, outs) if p["mode"] == "survive"]
    left = [(p, o) for p, o in zip(plans, outs) if p["mode"] in ("after_header", "after_chunks")]
    mid = [p for p in plans if p["mode"] == "mid_request"]
    for p, o in survivors:
        assert "exception" not in o, o
        assert o.get("status") == 200 and o.get("done"), o
        assert o["usage"]["completion_tokens"] == p["max_tokens"] and o["finish"] == "length", o
        assert o["usage"]["prompt_tokens"] == len(p["prompt"]), o
    for p, o in left:
        assert "exception" not in o, o
        assert o.get("status") == 200 and not o.get("done"), o

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)

    assert health["kv_pages_in_use"] == 0 and health["running"] == 0 and health["waiting"] == 0, health
    assert delta('deepinfer_requests_finished_total{finish_reason="length"}') == len(survivors)
    assert delta('deepinfer_requests_finished_total{finish_reason="abort"}') == len(left)
    assert delta("deepinfer_http_client_disconnects_total") == len(left)
    assert delta(f'deepinfer_http_requests_total{{route="{PATH}",status="200"}}') == len(survivors) + len(left)
    assert delta(f'deepinfer_http_requests_total{{route="{PATH}",status="400"}}') == len(mid)
    assert delta("deepinfer_prompt_tokens_total") == sum(len(p["prompt"]) for p, _ in survivors + left)
    survivor_tokens = sum(p["max_tokens"] for p, _ in survivors)
    generated = delta("deepinfer_generation_tokens_total")
    received_by_leavers = sum(o.get("chunks", 0) for _, o in left)
    assert survivor_tokens + received_by_leavers <= generated <= survivor_tokens + 64 * len(left)
    assert after["deepinfer_kv_cache_used_bytes"] == 0
    return {"elapsed_s": elapsed, "survivors": len(survivors), "left": len(left), "mid_request": len(mid),
            "generated": generated, "rss": server.rss_bytes(), "kv_held": after["deepinfer_kv_cache_held_bytes"],
            "backend_held": after["deepinfer_backend_held_bytes"], "heap": after["deepinfer_heap_allocated_bytes"]}


def test_soak(deepinfer, request, artifacts):
    clients = request.config.getoption("--soak-clients")
    rounds = request.config.getoption("--soak-rounds")
    # Room for every client at once: 64 running, the rest queued.
    # Without glibc's per-thread caches, mallinfo2's in-use bytes are the live allocations: a
    # cached free chunk counts as in use, and the caches of the HTTP threads fill over the first
    # rounds (tens of KB, bounded, yet about the size of the leak this test looks for).
    server = Server(deepinfer, ["--max-queue", str(clients), "--no-access-log"],
                    env={"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"})
    try:
        rng = random.Random(2024)
        if rounds >= 3:
            # Warm-up rounds first: the allocator's and the KV pool's high-water marks settle over
            # the first rounds. Later RSS still steps now and then (measured on kjv-tiny, 74-83
            # MiB: steps of 1.5-3.5 MiB in some rounds, flat in the others).
            for _ in range(2):
                soak_round(server, rng, clients)
        results = [soak_round(server, rng, clients) for _ in range(rounds)]
        lines = [f"soak: {clients} concurrent streaming clients per round" + (", after two warm-up rounds" if rounds >= 3 else "")]
        for i, r in enumerate(results):
            lines.append(f"round {i + 1}: {r['survivors']} streams completed, {r['left']} left mid-stream, "
                         f"{r['mid_request']} mid-request, {r['generated']:.0f} tokens in {r['elapsed_s']:.1f} s, "
                         f"RSS {r['rss'] / 2**20:.1f} MiB, heap in use {r['heap'] / 2**20:.2f} MiB (KV pool "
                         f"{r['kv_held'] / 2**20:.2f} MiB held, backend {r['backend_held'] / 2**20:.2f} MiB, the rest "
                         f"{(r['heap'] - r['kv_held'] - r['backend_held']) / 1024:.1f} KiB)")
        print("\n".join(lines))
        with open(os.path.join(artifacts, "soak.txt"), "w") as summary:
            summary.write("\n".join(lines) + "\n")
        if rounds >= 3:
            # A leak shows in the live heap bytes less the KV pool's pages and the backend's
            # workspace: both keep memory for reuse up to a high-water mark that may still rise
            # (CI: +128 KB of pool pages, +207 KB of workspace over two rounds). The rest
            # measured 1431 KiB, flat to 0.3 KiB over 5 rounds; a leak of 30 bytes a request would
            # add 1% over two rounds. RSS also keeps the allocator's high-water steps, so it gets
            # a looser bound (measured: up to 4.8% over three rounds).
            heap = [r["heap"] - r["kv_held"] - r["backend_held"] for r in results]
            assert heap[-1] - heap[0] <= 0.01 * heap[0], heap
            rss = [r["rss"] for r in results]
            assert rss[-1] - rss[0] <= 0.08 * rss[0], rss
    finally:
        server.assert_clean_exit()
