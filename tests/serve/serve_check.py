#!/usr/bin/env python3
"""`specgen serve` as a client sees it: a real server on a free loopback port, real HTTP requests.

usage: serve_check.py SPECGEN SOURCE_DIR

On the bundled pair (models/tiny-target drafted by models/tiny-draft, the CPU reference):
completions and chat, whole and streamed (server-sent events), agree with each other and with
`specgen generate`; the chat template is applied; stop strings cut the text; requests run at once give
exactly what each gives alone (greedy, and `coupled` sampling by seed); a client that disconnects
frees its sequence; every bad input gets its 4xx and the server keeps serving; past the queue's bound
a 503 with Retry-After; --api-key; and a bounded load test: 16 clients, a fixed number of requests
each, a time limit, no error, no lost or mixed output.
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


class Server:
    """A `specgen serve` process on 127.0.0.1, port chosen by the server (--port 0)."""

    def __init__(self, specgen, args):
        self.proc = subprocess.Popen([specgen, "serve", "--port", "0"] + args, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "listening on http://127.0.0.1:" not in line:
            self.proc.kill()
            raise RuntimeError("serve did not start: %r %s" % (line, self.proc.stderr.read()))
        self.port = int(line.split("127.0.0.1:")[1].split()[0])

    def request(self, method, path, body=None, headers=None, timeout=600):
        """(status, headers, body bytes); body: a dict (sent as JSON) or raw bytes."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = (r.status, dict(r.getheaders()), r.read())
        c.close()
        return out

    def post(self, path, body, headers=None):
        status, h, data = self.request("POST", path, body, headers)
        try:
            return status, h, json.loads(data)
        except json.JSONDecodeError:
            return status, h, {"raw": data.decode(errors="replace")}

    def stream(self, path, body):
        """The events of a streamed request, [DONE] excluded; and whether [DONE] ended them."""
        status, h, data = self.request("POST", path, dict(body, stream=True))
        check(status == 200, "stream %s: status %d %r" % (path, status, data[:200]))
        check(h.get("Content-Type", "").startswith("text/event-stream"), "stream: content type %r" % h)
        events, done = [], False
        for block in data.decode().split("\n\n"):
            if not block.strip():
                continue
            check(block.startswith("data: "), "stream: an event without 'data: ': %r" % block)
            payload = block[len("data: "):]
            if payload == "[DONE]":
                done = True
                continue
            check(not done, "stream: an event after [DONE]")
            events.append(json.loads(payload))
        return events, done

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return self.proc.returncode


def text_of(resp):
    c = resp["choices"][0]
    return c["message"]["content"] if "message" in c else c["text"]


def streamed_text(events, chat):
    parts = []
    for e in events:
        for c in e["choices"]:
            parts.append(c.get("delta", {}).get("content", "") if chat else c.get("text", ""))
    return "".join(parts)


PROMPTS = ["def fib(n):", "The quick brown fox", "import numpy as np\n", "Once upon a time",
           "class Stack:", "for i in range(10):", "# a list of primes\n", "Hello, world"]


def check_basics(s, generate_text):
    status, _, body = s.post("/v1/completions", {"model": "tiny-target", "prompt": "def fib(n):",
                                                 "max_tokens": 24, "temperature": 0})
    check(status == 200, "completion: status %d %r" % (status, body))
    check(body.get("object") == "text_completion", "completion: object %r" % body.get("object"))
    text = text_of(body)
    check(text == generate_text, "completion %r != specgen generate's %r" % (text, generate_text))
    u = body["usage"]
    check(u["completion_tokens"] == 24 and u["total_tokens"] == u["prompt_tokens"] + 24, "usage %r" % u)
    check(body["choices"][0]["finish_reason"] == "length", "finish_reason %r" % body["choices"][0])
    sg = u["specgen"]
    check(0 <= sg["acceptance_rate"] <= 1 and sg["tokens_per_pass"] >= 1 and sg["bytes_streamed"] == 0,
          "usage.specgen %r" % sg)
    check(sg["passes"] >= 1 and sg["passes"] <= 24, "passes %r" % sg)

    # Streamed: the same text, event by event, then a finish and [DONE]; the usage chunk on request.
    events, done = s.stream("/v1/completions", {"prompt": "def fib(n):", "max_tokens": 24, "temperature": 0,
                                                "stream_options": {"include_usage": True}})
    check(done, "completion stream: no [DONE]")
    check(streamed_text(events, False) == text, "streamed %r != %r" % (streamed_text(events, False), text))
    finishes = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    check(finishes == ["length"], "stream finish reasons %r" % finishes)
    check("usage" in events[-1] and events[-1]["usage"]["completion_tokens"] == 24, "stream usage %r" % events[-1])

    status, _, models = s.post("/v1/completions", b"")  # an empty body: not JSON
    check(status == 400, "empty body: %d" % status)
    status, _, data = s.request("GET", "/v1/models")
    models = json.loads(data)
    check(status == 200 and [m["id"] for m in models["data"]] == ["tiny-target"], "models %r" % models)
    status, _, data = s.request("GET", "/health")
    check(status == 200 and json.loads(data)["status"] == "ok", "health %r" % data)


def check_chat(s):
    messages = [{"role": "system", "content": "You write Python."},
                {"role": "user", "content": "Write a function that adds two numbers."}]
    status, _, chat = s.post("/v1/chat/completions", {"messages": messages, "max_tokens": 20, "temperature": 0})
    check(status == 200 and chat.get("object") == "chat.completion", "chat: %d %r" % (status, chat))
    check(chat["choices"][0]["message"]["role"] == "assistant", "chat role %r" % chat["choices"][0])
    # The template applied: the same as completing the ChatML text the template gives (tiny-target's).
    chatml = ("<|im_start|>system\nYou write Python.<|im_end|>\n<|im_start|>user\n"
              "Write a function that adds two numbers.<|im_end|>\n<|im_start|>assistant\n")
    status, _, plain = s.post("/v1/completions", {"prompt": chatml, "max_tokens": 20, "temperature": 0})
    check(status == 200, "chatml completion %d" % status)
    check(text_of(chat) == text_of(plain), "chat %r != completion of its ChatML %r" % (text_of(chat), text_of(plain)))
    check(chat["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"],
          "chat prompt tokens %r vs %r" % (chat["usage"], plain["usage"]))
    events, done = s.stream("/v1/chat/completions", {"messages": messages, "max_tokens": 20, "temperature": 0})
    check(done and events and events[0]["choices"][0]["delta"].get("role") == "assistant",
          "chat stream's first chunk %r" % (events[:1],))
    check(all(e["object"] == "chat.completion.chunk" for e in events), "chat chunk objects")
    check(streamed_text(events, True) == text_of(chat), "chat streamed %r != %r" % (streamed_text(events, True),
                                                                                   text_of(chat)))
    # Content as an array of text parts, and the 'developer' role, as newer clients send them.
    parts = [{"role": "developer", "content": "You write Python."},
             {"role": "user", "content": [{"type": "text", "text": "Write a function "},
                                          {"type": "text", "text": "that adds two numbers."}]}]
    status, _, again = s.post("/v1/chat/completions", {"messages": parts, "max_tokens": 20, "temperature": 0})
    check(status == 200 and text_of(again) == text_of(chat), "chat with parts: %d %r" % (status, again))


def check_stop(s):
    status, _, body = s.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0})
    full = text_of(body)
    if not check(len(full) > 12, "stop: a reply too short to cut: %r" % full):
        return
    stop = full[6:9]
    expected = full[:full.find(stop)]
    for stream in (False, True):
        req = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stop": [stop, "\x01never"]}
        if stream:
            events, _ = s.stream("/v1/completions", req)
            got = streamed_text(events, False)
            finish = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
        else:
            _, _, r = s.post("/v1/completions", req)
            got, finish = text_of(r), [r["choices"][0]["finish_reason"]]
        check(got == expected, "stop %r (stream %s): %r, expected %r" % (stop, stream, got, expected))
        check(finish == ["stop"], "stop: finish %r" % finish)


def check_logprobs(s, specgen, common):
    """logprobs in both APIs, whole and streamed: one entry per generated token, its text the reply's,
    its figures those `specgen generate --n-probs` prints for the same prompt (both the target's own
    log-softmax at the position, from bit-identical passes: compared to 1e-6, float32's resolution
    near 1); a stop string cuts the entries with the text."""
    gen = subprocess.run([specgen, "generate"] + common + ["-p", "def fib(n):", "-n", "24", "--stats", "json",
                                                           "--n-probs", "3"],
                         capture_output=True, text=True, timeout=120)
    if not check(gen.returncode == 0, "generate --n-probs: %s" % gen.stderr):
        return
    probs = json.loads(gen.stdout.strip().splitlines()[-1])["completion_probabilities"]
    check(len(probs) == 24 and all(len(p["top_logprobs"]) == 3 for p in probs), "generate --n-probs: %r" % probs[:2])
    status, _, body = s.post("/v1/completions", {"prompt": "def fib(n):", "max_tokens": 24, "temperature": 0,
                                                 "logprobs": 3})
    lp = body["choices"][0].get("logprobs") or {}
    check(status == 200 and len(lp.get("tokens", [])) == 24, "completions logprobs: %d %r" % (status, lp))
    check("".join(lp.get("tokens", [])) == text_of(body), "completions logprobs: tokens %r vs text %r"
          % (lp.get("tokens"), text_of(body)))
    for i, (mine, theirs) in enumerate(zip(lp.get("token_logprobs", []), probs)):
        check(abs(mine - theirs["logprob"]) <= 1e-6 and mine <= 0,
              "token %d: serve's logprob %r, generate's %r" % (i, mine, theirs["logprob"]))
        top = lp["top_logprobs"][i]
        # Greedy: the chosen token is the most probable one.
        check(abs(max(top.values()) - mine) <= 1e-6, "token %d: top %r, chosen %r" % (i, top, mine))
    events, _ = s.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "Add two numbers."}],
                                                  "max_tokens": 12, "temperature": 0, "logprobs": True,
                                                  "top_logprobs": 2})
    entries = [e for ev in events for c in ev["choices"] if c.get("logprobs") for e in c["logprobs"]["content"]]
    check(len(entries) == 12 and all(len(e["top_logprobs"]) == 2 for e in entries),
          "chat stream logprobs: %d entries %r" % (len(entries), entries[:2]))
    check("".join(e["token"] for e in entries) == streamed_text(events, True),
          "chat stream logprobs: tokens %r vs text %r" % ([e["token"] for e in entries], streamed_text(events, True)))
    check(all(bytes(e["bytes"]).decode(errors="replace") == e["token"] for e in entries), "chat logprobs: bytes")
    status, _, plain = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
    check(status == 200 and plain["choices"][0]["logprobs"] is None, "no logprobs asked: %r" % plain["choices"][0])
    # A stop string: only the tokens whose text is in the reply.
    full = text_of(body)
    stop = full[8:11]
    cut = full[:full.find(stop)]
    status, _, r = s.post("/v1/completions", {"prompt": "def fib(n):", "max_tokens": 24, "temperature": 0,
                                              "logprobs": 1, "stop": stop})
    toks = r["choices"][0]["logprobs"]["tokens"]
    check("".join(toks).startswith(cut) and len("".join(toks[:-1])) < len(cut) <= len("".join(toks)),
          "stop %r: tokens %r for the text %r" % (stop, toks, cut))
    status, _, r = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})
    check(status == 400 and "'top_logprobs' needs 'logprobs': true" in r["error"]["message"], "top_logprobs alone: %r" % r)


def requests_mix():
    """Greedy requests and coupled-sampling ones (temperature 0.8, a seed each)."""
    out = []
    for i, p in enumerate(PROMPTS):
        out.append({"prompt": p, "max_tokens": 16 + 4 * (i % 3), "temperature": 0})
        out.append({"prompt": p, "max_tokens": 20, "temperature": 0.8, "seed": 100 + i})
    return out


def run_concurrently(s, reqs, results, errors):
    def one(i, r):
        try:
            status, _, body = s.post("/v1/completions", r)
            if status != 200:
                errors.append("request %d: %d %r" % (i, status, body))
            else:
                results[i] = (text_of(body), body["usage"]["completion_tokens"])
        except Exception as e:  # noqa: BLE001 - any failure is a failure of the check
            errors.append("request %d: %r" % (i, e))
    threads = [threading.Thread(target=one, args=(i, r)) for i, r in enumerate(reqs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def check_batch_invariance(s, alone):
    reqs = requests_mix()
    results, errors = [None] * len(reqs), []
    # /health while they run: the check means something only if sequences did run side by side.
    most, polling = [0], [True]

    def poll():
        while polling[0]:
            most[0] = max(most[0], json.loads(s.request("GET", "/health")[2])["running"])
            time.sleep(0.005)
    poller = threading.Thread(target=poll)
    before = json.loads(s.request("GET", "/health")[2])
    poller.start()
    run_concurrently(s, reqs, results, errors)
    polling[0] = False
    poller.join()
    after = json.loads(s.request("GET", "/health")[2])
    check(not errors, "concurrent: %r" % errors[:3])
    check(most[0] > 1, "concurrent: at most %d sequence ran at once" % most[0])
    # Several sequences verified in one target pass, not one pass each.
    passes = after["shared_passes"] - before["shared_passes"]
    per_pass = (after["shared_pass_sequences"] - before["shared_pass_sequences"]) / max(passes, 1)
    check(per_pass > 1.5, "concurrent: %.2f sequences per target pass" % per_pass)
    print("concurrent: up to %d sequences at once, %.2f per target pass over %d passes" % (most[0], per_pass,
                                                                                        passes))
    for i, r in enumerate(reqs):
        check(results[i] == alone[i], "concurrent request %d (%r) gave %r, alone %r" % (i, r, results[i], alone[i]))


def wait_idle(s, seconds):
    t0 = time.time()
    while time.time() - t0 < seconds:
        _, _, data = s.request("GET", "/health")
        h = json.loads(data)
        if h["running"] == 0 and h["waiting"] == 0:
            return time.time() - t0
        time.sleep(0.05)
    return None


def check_disconnect(s, long_tokens, long_seconds):
    for stream in (True, False):
        sock = socket.create_connection(("127.0.0.1", s.port))
        body = json.dumps({"prompt": "The quick brown fox", "max_tokens": long_tokens, "temperature": 0,
                           "stream": stream}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        if stream:
            got, sock_deadline = b"", time.time() + 30
            while b"data: " not in got and time.time() < sock_deadline:
                got += sock.recv(4096)  # the headers may come alone, before the first event
            check(b"data: " in got, "disconnect: no first event")
        else:
            time.sleep(0.2)
        sock.close()
        # Freed at the next step: well before the request would have ended by itself.
        took = wait_idle(s, long_seconds / 3)
        check(took is not None, "disconnect (stream %s): the sequence still runs after %.1f s (alone it takes "
              "%.1f s)" % (stream, long_seconds / 3, long_seconds))


def check_bad_input(s):
    cases = [
        ("malformed JSON", "/v1/completions", b'{"prompt": "x", ', 400, "JSON"),
        ("not an object", "/v1/completions", b'["x"]', 400, "object"),
        ("prompt of a wrong type", "/v1/completions", {"prompt": 5}, 400, "prompt"),
        ("no prompt", "/v1/completions", {"max_tokens": 4}, 400, "prompt"),
        ("temperature a string", "/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
        ("max_tokens a fraction", "/v1/completions", {"prompt": "x", "max_tokens": 1.5}, 400, "max_tokens"),
        ("max_tokens 0", "/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ("stream a string", "/v1/completions", {"prompt": "x", "stream": "yes"}, 400, "stream"),
        ("stop a number", "/v1/completions", {"prompt": "x", "stop": 3}, 400, "stop"),
        ("seed negative", "/v1/completions", {"prompt": "x", "seed": -1}, 400, "seed"),
        ("top_p 0", "/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p"),
        ("n 2", "/v1/completions", {"prompt": "x", "n": 2}, 400, "'n'"),
        ("unknown model", "/v1/completions", {"model": "gpt-4", "prompt": "x"}, 404, "gpt-4"),
        ("prompt longer than the context", "/v1/completions", {"prompt": "word " * 5000}, 400, "context"),
        ("max_tokens past the context", "/v1/completions", {"prompt": "x", "max_tokens": 100000}, 400, "max_tokens"),
        ("temperature < 0", "/v1/completions", {"prompt": "x", "temperature": -0.5}, 400, "temperature"),
        ("no messages", "/v1/chat/completions", {"prompt": "x"}, 400, "messages"),
        ("messages not an array", "/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
        ("a tool role", "/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}, 400, "role"),
        ("content a number", "/v1/chat/completions", {"messages": [{"role": "user", "content": 1}]}, 400, "content"),
        ("chat temperature < 0", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "temperature": -1}, 400, "temperature"),
        ("invalid UTF-8", "/v1/completions", b'{"prompt": "\xff\xfe"}', 400, ""),
    ]
    for what, path, body, status, needle in cases:
        got, _, r = s.post(path, body)
        msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else ""
        check(got == status, "%s: status %d, expected %d (%r)" % (what, got, status, r))
        check(needle in msg, "%s: the message %r does not name %r" % (what, msg, needle))
    got, _, r = s.post("/v1/nothing", {"prompt": "x"})
    check(got == 404 and "error" in r, "unknown route: %d %r" % (got, r))
    # Still serving, and right.
    got, _, r = s.post("/v1/completions", {"prompt": "def fib(n):", "max_tokens": 4, "temperature": 0})
    check(got == 200 and r["usage"]["completion_tokens"] == 4, "after bad input: %d %r" % (got, r))


def check_load(s, alone, seconds):
    """16 clients, 3 requests each from the mix, every reply equal to its request's alone."""
    reqs = requests_mix()
    errors, mismatches, done = [], [], [0]
    lock = threading.Lock()

    def client(c):
        for j in range(3):
            i = (c * 3 + j) % len(reqs)
            try:
                status, _, body = s.post("/v1/completions", reqs[i])
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append("client %d: %r" % (c, e))
                continue
            with lock:
                if status != 200:
                    errors.append("client %d: %d %r" % (c, status, body))
                elif (text_of(body), body["usage"]["completion_tokens"]) != alone[i]:
                    mismatches.append((i, text_of(body)))
                else:
                    done[0] += 1
    t0 = time.time()
    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0.0, seconds - (time.time() - t0)))
    took = time.time() - t0
    check(all(not t.is_alive() for t in threads), "load: not done within %.0f s" % seconds)
    check(not errors, "load: errors %r" % errors[:3])
    check(not mismatches, "load: replies that differ from alone: %r" % mismatches[:3])
    check(done[0] == 48, "load: %d of 48 replies right" % done[0])
    print("load: 48 requests from 16 clients in %.1f s" % took)


def check_queue_and_key(specgen, common, long_tokens):
    s = Server(specgen, common + ["--parallel", "1", "--queue", "1", "--api-key", "sekrit"])
    try:
        status, _, r = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
        check(status == 401 and "API key" in r["error"]["message"], "no key: %d %r" % (status, r))
        status, _, _ = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2},
                              {"Authorization": "Bearer wrong"})
        check(status == 401, "wrong key: %d" % status)
        key = {"Authorization": "Bearer sekrit"}
        status, _, _ = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2, "temperature": 0}, key)
        check(status == 200, "right key: %d" % status)
        status, _, _ = s.request("GET", "/health")
        check(status == 200, "health needs no key: %d" % status)
        # One runs, one waits, the third is refused at once with Retry-After.
        results = []

        def long_one():
            results.append(s.post("/v1/completions", {"prompt": "x", "max_tokens": long_tokens, "temperature": 0},
                                   key)[0])
        threads = [threading.Thread(target=long_one) for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.time() + 20
        while time.time() < deadline:
            h = json.loads(s.request("GET", "/health")[2])
            if h["running"] == 1 and h["waiting"] == 1:
                break
            time.sleep(0.02)
        status, headers, r = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2}, key)
        check(status == 503 and headers.get("Retry-After") == "1", "queue full: %d %r %r" % (status, headers, r))
        for t in threads:
            t.join()
        check(results == [200, 200], "queued requests: %r" % results)
    finally:
        s.stop()


def calibrate(s):
    """A request long enough (about 3 s, at most 2000 tokens) to tell a freed sequence from a finished
    one, whatever the build's speed (the sanitizers' is many times slower): (tokens, seconds)."""
    t0 = time.time()
    s.post("/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 64, "temperature": 0})
    rate = 64 / max(time.time() - t0, 1e-3)
    tokens = int(min(2000, max(64, rate * 3)))
    t0 = time.time()
    status, _, _ = s.post("/v1/completions", {"prompt": "The quick brown fox", "max_tokens": tokens,
                                              "temperature": 0})
    check(status == 200, "long request: %d" % status)
    return tokens, time.time() - t0


def main():
    specgen, source = sys.argv[1], sys.argv[2]
    target = os.path.join(source, "models", "tiny-target")
    draft = os.path.join(source, "models", "tiny-draft")
    # Greedy unless a request says otherwise; `coupled`: a seed's text whatever the draft lengths.
    common = ["-m", target, "-md", draft, "--device", "cpu", "-c", "2048", "--temp", "0", "--accept",
              "coupled", "--ignore-eos", "-t", "1"]
    gen = subprocess.run([specgen, "generate"] + common + ["-p", "def fib(n):", "-n", "24", "--stats", "none"],
                         capture_output=True, text=True, timeout=120)
    check(gen.returncode == 0, "generate failed: %s" % gen.stderr)
    generate_text = gen.stdout[len("def fib(n):"):-1]  # generate echoes the prompt, then a newline

    s = Server(specgen, common + ["--parallel", "4", "--queue", "32"])
    try:
        check_basics(s, generate_text)
        check_chat(s)
        check_stop(s)
        check_logprobs(s, specgen, common)
        # Each request of the mix alone, one after another: the reference for what follows.
        reqs = requests_mix()
        alone = []
        for r in reqs:
            status, _, body = s.post("/v1/completions", r)
            check(status == 200, "alone: %d %r" % (status, body))
            alone.append((text_of(body), body["usage"]["completion_tokens"]))
        check(alone[1] != alone[3], "coupled seeds: two prompts gave one text")
        check_batch_invariance(s, alone)
        long_tokens, long_seconds = calibrate(s)
        check_disconnect(s, long_tokens, long_seconds)
        check_bad_input(s)
        # 48 requests of about 20 tokens: a time limit well above what they take at the measured speed.
        check_load(s, alone, max(90.0, 3000.0 * long_seconds / long_tokens))
        check(wait_idle(s, 5) is not None, "not idle after the load")
    finally:
        rc = s.stop()
        check(rc == 0, "serve exited with %r after SIGTERM" % rc)
    check_queue_and_key(specgen, common, long_tokens)
    if failures:
        print("%d failures" % len(failures), file=sys.stderr)
        return 1
    print("serve_check: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
