"""Fixtures: a scripted local System One upstream and the real proxy binary.

The proxy (``PROXY_BIN``, default ``target/debug/releasegate``) starts on
127.0.0.1 port 0 with a configuration written here, and reports its bound
ports in its "listeners bound" log line. Its providers are the scripted
upstream below and the embedded simulated provider.
"""

import collections
import hashlib
import json
import os
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Loopback traffic must not go through a proxy configured for the machine.
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

KEY = "py-conformance-key"
MULTI_KEY = "py-conformance-multi-key"
# Every view a contract may give an allowed question (`no_output` is a configuration
# error: typed clients need every asked answer).
VIEWS = ["choice", "choice_confidence", "full_probabilities", "full_native"]

# What the scripted upstream answers by default: one answer per question of
# `questions()` (see test_conformance.py), plus fields no release may pass on.
NATIVE = {
    "model": "jev-1.13.0",
    "id": "UPSTREAM-SECRET-ID",
    "answers": {
        "cause": {
            "type": "choice",
            "choice": "B",
            "confidence": 0.61,
            "rationale": "UPSTREAM-SECRET",
            "probabilities": {"D": 0.1, "C": 0.05, "B": 0.7, "A": 0.15},
        },
        "level": {
            "type": "score",
            "score": 1.05,
            "confidence": 0.92,
            "legend": {"0": "UPSTREAM-SECRET"},
            "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05},
        },
        "urgent": {"type": "noul", "noul": 0.8},
    },
    "usage": {"input_tokens": 392, "output_tokens": 1, "cost": "UPSTREAM-SECRET"},
}


def to_asked(request, answer):
    """A scripted answer cut to the questions the request asked, as a provider answers
    (the request read from a JSON body or a multipart body's `request` part); anything
    else goes out as scripted."""
    start = request.find(b'{"')
    try:
        asked, _ = json.JSONDecoder().raw_decode(request[start:].decode("utf-8", "replace"))
        asked = asked["questions"]
        native = json.loads(answer)
        native["answers"] = {k: v for k, v in native["answers"].items() if k in asked}
    except (ValueError, KeyError, TypeError, AttributeError):
        return answer
    return json.dumps(native).encode()


@dataclass
class Seen:
    """A request the upstream received."""

    path: str
    headers: dict
    body: bytes


@dataclass
class Upstream:
    """A System One provider whose answers the tests script."""

    url: str = ""
    seen: list = field(default_factory=list)
    queued: collections.deque = field(default_factory=collections.deque)
    gate: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def once(self, status, body=b"{}", headers=None):
        """Answers the next request (only) with this status."""
        with self.lock:
            self.queued.append((status, headers or {}, body))

    def count(self):
        with self.lock:
            return len(self.seen)

    def reset(self):
        with self.lock:
            self.seen.clear()
            self.queued.clear()
        self.gate.set()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _reply(self, status, headers, body):
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        upstream = self.server.upstream
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        with upstream.lock:
            upstream.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            script = upstream.queued.popleft() if upstream.queued else None
        # A closed gate holds the request (the provider is busy) until a test opens it.
        upstream.gate.wait(timeout=30)
        if script is None:
            script = (200, {}, json.dumps(NATIVE).encode())
        status, headers, answer = script
        self._reply(status, headers, to_asked(body, answer))

    def do_GET(self):
        models = {"models": [{"name": "jev-latest", "description": "d", "release_date": "2026-09-15"}]}
        self._reply(200, {}, json.dumps(models).encode())


@pytest.fixture(scope="session")
def upstream_server():
    upstream = Upstream()
    upstream.gate.set()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.upstream = upstream
    upstream.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield upstream
    upstream.gate.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def upstream(upstream_server):
    """The session's upstream, with a fresh script and record for each test."""
    upstream_server.reset()
    yield upstream_server
    upstream_server.reset()


def _digest(key):
    return hashlib.sha256(key.encode()).hexdigest()


def _questions(contract, view, provider="up"):
    """The three questions of `questions()` (test_conformance.py), each pinning the text the
    SDK sends for it: the proxy asks exactly the contract's question upstream."""
    return (
        f'[contracts.{contract}]\nprovider = "{provider}"\nusage = "keep"\n'
        'forward_headers = ["TypeSafe-Danger-Zone-Images"]\n'
        f'[contracts.{contract}.questions.cause]\nclasses = ["A", "B", "C", "D"]\nview = "{view}"\n'
        'instructions = "Why?"\ndescriptions = { B = "b" }\n'
        f'[contracts.{contract}.questions.level]\nclasses = ["0", "1", "2"]\nview = "{view}"\n'
        'instructions = "How bad?"\ndescriptions = { "0" = "low", "1" = "mid", "2" = "high" }\n'
        f'[contracts.{contract}.questions.urgent]\nclasses = ["false", "true"]\nview = "{view}"\n'
        'instructions = "Urgent?"\n'
    )


def _delivery_text(contract):
    """The delivery example's coarse question, as the shipped contracts pin it."""
    request = json.loads((REPO / "config" / "examples" / "delivery-request.json").read_text())
    question = request["questions"]["coarse_cause"]
    lines = [f"instructions = {json.dumps(question['instructions'])}"]
    lines.append(f"[contracts.{contract}.questions.coarse_cause.descriptions]")
    lines += [f"{label} = {json.dumps(text)}" for label, text in question["criteria"].items()]
    return "\n".join(lines) + "\n"


def _config(upstream_url):
    codebook = REPO / "config" / "codebooks" / "delivery-coarse_cause.json"
    delivery = '["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"]'
    contracts = ["full"] + [f"view_{view}" for view in VIEWS] + ["saturable", "sim_auditor", "sim_planner", "boxes"]
    text = (
        '[server]\nlisten = "127.0.0.1:0"\nadmin_listen = "127.0.0.1:0"\n'
        "max_body_bytes = 65536\nshutdown_grace_ms = 500\n"
        f'[providers.up]\nkind = "systemone"\nbase_url = "{upstream_url}"\ntimeout_ms = 40000\n'
        f'[providers.narrow]\nkind = "systemone"\nbase_url = "{upstream_url}"\ntimeout_ms = 40000\n'
        "max_concurrency = 1\nqueue_timeout_ms = 100\n"
        '[providers.sim]\nkind = "simulated"\n'
        f'[[recipients]]\nname = "one"\nkey_sha256 = "{_digest(KEY)}"\ncontracts = ["full"]\n'
        f'[[recipients]]\nname = "multi"\nkey_sha256 = "{_digest(MULTI_KEY)}"\ncontracts = {json.dumps(contracts)}\n'
        + _questions("full", "full_native")
        + "".join(_questions(f"view_{view}", view) for view in VIEWS)
        + _questions("saturable", "full_native", provider="narrow")
        + '[contracts.sim_auditor]\nprovider = "sim"\nusage = "keep"\n'
        f'[contracts.sim_auditor.questions.coarse_cause]\nclasses = {delivery}\nview = "full_native"\n'
        + _delivery_text("sim_auditor")
        + '[contracts.sim_planner]\nprovider = "sim"\n'
        f'[contracts.sim_planner.questions.coarse_cause]\nclasses = {delivery}\nview = "full_native"\n'
        f'mechanism = {{ kind = "wcpq", codebook = "{codebook}", fallback = "native" }}\n'
        'workflows = { preset = "tuple-bench" }\n'
        + _delivery_text("sim_planner")
        # A box question beside a choice one: the box rounded to 0.05, its confidence too.
        + '[contracts.boxes]\nprovider = "up"\nforward_headers = ["TypeSafe-Danger-Zone-Images"]\n'
        '[contracts.boxes.questions.dent]\ntype = "box"\ninstructions = "Where is the dent?"\n'
        'view = "full_native"\nmechanism = { kind = "quantize", step = 0.05 }\n'
        '[contracts.boxes.questions.cause]\nclasses = ["A", "B", "C", "D"]\nview = "choice"\n'
        'instructions = "Why?"\ndescriptions = { B = "b" }\n'
    )
    return text


@dataclass
class Proxy:
    """The running proxy: its public root URL and admin URL."""

    url: str
    admin: str
    logs: list

    def metric(self, prefix, *needles):
        """The value of the first metrics line starting with `prefix` that holds every needle."""
        with urllib.request.urlopen(f"{self.admin}/metrics", timeout=10) as response:
            text = response.read().decode()
        for line in text.splitlines():
            if line.startswith(prefix) and all(needle in line for needle in needles):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


def _serve(config, extra_env=None):
    """Starts the proxy binary on `config`; yields the running `Proxy` and stops it after."""
    binary = Path(os.environ.get("PROXY_BIN", REPO / "target" / "debug" / "releasegate"))
    if not binary.is_file():
        pytest.fail(f"the proxy binary {binary} does not exist: run `cargo build --locked` first")
    # The proxy reads RELEASEGATE_* variables as configuration: pass none on but ours.
    env = {name: value for name, value in os.environ.items() if not name.startswith("RELEASEGATE_")}
    env.update(extra_env or {})
    env["RUST_LOG"] = "releasegate=info"
    process = subprocess.Popen(
        [str(binary), "serve", "--config", str(config), "--log-json"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    logs = []
    bound = {}
    ready = threading.Event()

    def drain():
        # Keep reading so the proxy never blocks on a full pipe.
        for raw in process.stderr:
            line = raw.decode(errors="replace").rstrip()
            logs.append(line)
            try:
                fields = json.loads(line).get("fields", {})
            except ValueError:
                continue
            if fields.get("message") == "listeners bound":
                bound.update(fields)
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        if not ready.wait(timeout=60) or not bound:
            pytest.fail("the proxy did not report its listeners:\n" + "\n".join(logs[-20:]))
        yield Proxy(url=f"http://{bound['public']}", admin=f"http://{bound['admin']}", logs=logs)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def proxy(upstream_server, tmp_path_factory):
    config = tmp_path_factory.mktemp("proxy") / "releasegate.toml"
    config.write_text(_config(upstream_server.url))
    yield from _serve(config)


# The shipped configuration: its demo recipients (key `demo-NAME-key`, README "Try it") and
# their contracts, on the in-process simulated provider.
SHIPPED_CONFIG = REPO / "config" / "releasegate.toml"


@pytest.fixture(scope="session")
def shipped():
    """The proxy serving the shipped configuration as it is, on loopback ports of its own."""
    listeners = {"RELEASEGATE_SERVER__LISTEN": "127.0.0.1:0", "RELEASEGATE_SERVER__ADMIN_LISTEN": "127.0.0.1:0"}
    yield from _serve(SHIPPED_CONFIG, listeners)


def wait_until(condition, what, timeout=30.0):
    """Polls `condition` (no timing is asserted: the limit only bounds a hang)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)
