"""Fixtures for the `deepinfer serve` end-to-end tests.

The server runs as a subprocess on a free loopback port (--port 0; the port is read from its
"listening on" log line) and is stopped with SIGTERM, which must end it with exit code 0 and
no sanitizer report. Text tests use a random V4.1 checkpoint whose vocabulary covers the
project tokenizer (`deepinfer make-model --preset tiny`, made once per session); the soak uses
the embedded default model with token-id prompts.
"""

import os
import re
import signal
import subprocess
import threading
import time

import pytest
import requests

API_KEY = "test-key-0123"
MODEL_NAME = "tiny"
MAX_MODEL_LEN = 1024
HEADER_TIMEOUT_S = 4
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "WARNING: ThreadSanitizer")


def pytest_addoption(parser):
    parser.addoption("--deepinfer", required=True, help="the deepinfer binary to test")
    parser.addoption("--artifacts", default=None, help="folder for screenshots and logs (default: a temp dir)")
    parser.addoption("--soak-clients", type=int, default=256, help="concurrent streaming clients per soak round")
    parser.addoption("--soak-rounds", type=int, default=3, help="soak rounds (RSS is compared across them)")
    parser.addoption("--schema-examples", type=int, default=15, help="schemathesis examples per operation")


class Server:
    """One `deepinfer serve` process."""

    def __init__(self, binary, args, startup_timeout=300, env=None):
        self.args = args
        self.proc = subprocess.Popen([binary, "serve", "--port", "0", *args], stdin=subprocess.DEVNULL,
                                     env=None if env is None else {**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
        self.log = []
        self.port = None
        self.terminated = False
        ready = threading.Event()

        def read_log():
            for line in self.proc.stderr:
                self.log.append(line)
                match = re.search(r"listening on http://[^ ]+:(\d+)", line)
                if match:
                    self.port = int(match.group(1))
                    ready.set()
            ready.set()

        self._reader = threading.Thread(target=read_log, daemon=True)
        self._reader.start()
        if not ready.wait(startup_timeout) or self.port is None:
            self.proc.kill()
            raise RuntimeError("deepinfer serve did not start:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self.port}"
        self.pid = self.proc.pid

    def text_log(self):
        return "".join(self.log)

    def rss_bytes(self):
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def terminate(self):
        """SIGTERM once (a second one would kill it: the default action once shutdown began)."""
        if not self.terminated and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.terminated = True

    def stop(self, timeout=60):
        """SIGTERM, then the exit code (the server must shut down cleanly on its own)."""
        self.terminate()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("deepinfer serve did not stop within %d s of SIGTERM" % timeout)
        self._reader.join(10)
        return code

    def assert_clean_exit(self):
        code = self.stop()
        log = self.text_log()
        for mark in SANITIZER_MARKS:
            assert mark not in log, f"sanitizer report in the server log:\n{log[-20000:]}"
        assert code == 0, f"deepinfer serve exited with {code}:\n{log[-5000:]}"


@pytest.fixture(scope="session")
def deepinfer(request):
    binary = os.path.abspath(request.config.getoption("--deepinfer"))
    assert os.access(binary, os.X_OK), binary
    return binary


@pytest.fixture(scope="session")
def artifacts(request, tmp_path_factory):
    folder = request.config.getoption("--artifacts")
    if folder is None:
        return str(tmp_path_factory.mktemp("artifacts"))
    folder = os.path.abspath(folder)
    os.makedirs(folder, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def tiny_model(deepinfer, tmp_path_factory):
    """A random V4.1 checkpoint with tiny-a's dimensions and the whole project tokenizer."""
    out = str(tmp_path_factory.mktemp("model") / "tiny")
    subprocess.run([deepinfer, "make-model", "--preset", "tiny", "--out", out, "--seed", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="session")
def server(deepinfer, tiny_model):
    s = Server(deepinfer, ["--model", tiny_model, "--served-model-name", MODEL_NAME, "--api-key", API_KEY,
                           "--max-model-len", str(MAX_MODEL_LEN), "--header-timeout", str(HEADER_TIMEOUT_S),
                           "--seed", "7"])
    yield s
    s.assert_clean_exit()


@pytest.fixture(scope="session")
def http(server):
    """requests.Session that sends the API key."""
    session = requests.Session()
    session.headers["Authorization"] = "Bearer " + API_KEY
    return session


@pytest.fixture(scope="session")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def sse_lines(response):
    """The lines of a streamed response, decoded as UTF-8 (SSE's encoding). Not
    iter_lines(decode_unicode=True): without a charset it decodes as Latin-1 and then splits at
    U+0085 and other Unicode line breaks that UTF-8 text bytes can turn into."""
    for raw in response.iter_lines():
        yield raw.decode("utf-8")


def parse_metrics(text):
    """Prometheus text -> {name: value} and {name{labels}: value}, labels as written."""
    values = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        values[key] = float(value)
    return values


def metrics(server):
    response = requests.get(server.url + "/metrics", timeout=30)
    response.raise_for_status()
    return parse_metrics(response.text)


def wait_metric(server, key, at_least, timeout=30):
    """The metrics once `key` reaches `at_least` (counters that a handler bumps after the engine
    has moved on); the last reading when it does not, for the caller's assertion to show."""
    deadline = time.time() + timeout
    values = metrics(server)
    while values.get(key, 0) < at_least and time.time() < deadline:
        time.sleep(0.05)
        values = metrics(server)
    return values


def wait_idle(server, timeout=60):
    """Until nothing runs or waits (aborts are processed by the engine's next step)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        health = requests.get(server.url + "/health", timeout=30).json()
        if health["running"] == 0 and health["waiting"] == 0:
            return health
        time.sleep(0.05)
    raise AssertionError(f"server not idle after {timeout} s: {health}")
