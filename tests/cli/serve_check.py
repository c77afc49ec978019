#!/usr/bin/python3
"""HTTP checks of `qkv serve` for tests/cli/test_serve.sh (standard library only; loopback only).

Usage: serve_check.py QKV T   (T holds models a/ and b/ trained by test_serve.sh)
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

QKV, T = sys.argv[1], sys.argv[2]
SENTENCES = ["go .", "i lost .", "he's calm .", "i'm home .", "we won .", "thank you .", "",
             "Unknown words, here!", "i lost . i lost ."]
JSON = {"Content-Type": "application/json"}


STARTED = []  # every qkv serve started here: a failed check must not leave one running


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    for p in STARTED:
        if p.poll() is None:
            p.kill()
            p.wait()
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


class Server:
    def __init__(self, name, *args):
        self.log = os.path.join(T, name + ".log")
        port_file = os.path.join(T, name + ".port")
        self.proc = subprocess.Popen([QKV, "serve", "--port", "0", "--port-file", port_file, "--threads", "1",
                                      *args], stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        STARTED.append(self.proc)
        deadline = time.time() + 120  # generous: the sanitizer build (make test-asan) is slower
        while not os.path.exists(port_file):
            check(self.proc.poll() is None, "qkv serve exited: " + self.text())
            check(time.time() < deadline, "qkv serve did not listen within 120 s")
            time.sleep(0.02)
        self.port = int(open(port_file).read())
        self.wait_log("qkv serve: ready")

    def text(self):
        return open(self.log).read()

    def wait_log(self, s, count=1):
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.text().count(s) >= count:
                return
            check(self.proc.poll() is None, "qkv serve exited: " + self.text())
            time.sleep(0.02)
        fail("no '%s' in the log:\n%s" % (s, self.text()))

    def req(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data

    def post(self, path, body, headers=JSON, want=200):
        status, hdrs, data = self.req("POST", path, body, headers)
        check(status == want, "%s %s: status %d, want %d: %s" % (path, str(body)[:80], status, want, data[:300]))
        return json.loads(data), hdrs

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(60)
        check(rc == 0, "qkv serve exit code %d after SIGTERM:\n%s" % (rc, self.text()))


def accept_queue(port):
    """Connections waiting in the kernel for the server listening on 127.0.0.1:port to accept them
    (the rx_queue of its LISTEN line in /proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return int(fields[4].split(":")[1], 16)
    fail("no listening socket on port %d in /proc/net/tcp" % port)


def wait_until(condition, what, bound_s=120):
    """Polls until condition() holds; the bound is a failure's only (generous: loaded machines)."""
    deadline = time.time() + bound_s
    while not condition():
        check(time.time() < deadline, what + " within %d s" % bound_s)
        time.sleep(0.01)


def translate_cli(model, *flags):
    # one output line per input line (stdin keeps the empty sentence's line)
    p = subprocess.run([QKV, "translate", "--model", model, "--threads", "1", *flags],
                       input="\n".join(SENTENCES) + "\n", capture_output=True, text=True)
    check(p.returncode == 0, "qkv translate: " + p.stderr)
    lines = p.stdout.split("\n")[:-1]
    check(len(lines) == len(SENTENCES), "qkv translate gave %d lines" % len(lines))
    return lines


def expect_error(srv, status, path, body, headers=JSON, method="POST", says=None):
    st, hdrs, data = srv.req(method, path, body, headers)
    check(st == status, "%s %s %r: status %d, want %d: %s" % (method, path, str(body)[:60], st, status, data[:200]))
    check(hdrs.get("content-type", "").startswith("application/json"), "error without JSON: %r" % hdrs)
    j = json.loads(data)
    check(isinstance(j.get("error"), str) and j["error"], "no error message: %s" % data)
    check(T not in j["error"] and "/tmp" not in j["error"], "error names a path: %s" % j["error"])
    if says:
        check(says in j["error"] or says == j.get("limit"), "error '%s' lacks '%s'" % (j["error"], says))
    return hdrs, j


a, b = os.path.join(T, "a"), os.path.join(T, "b")
want_a = translate_cli(a)
want_a_beam = translate_cli(a, "--beam", "3")
want_b = translate_cli(b)
check(want_a != want_b, "models a and b translate alike: the reload check could not tell them apart")

served = os.path.join(T, "served")
shutil.copytree(a, served)
srv = Server("main", "--model", served, "--max-wait-ms", "100", "--max-sentences", "16", "--max-chars", "40",
             "--max-body-bytes", "4000")
st, _, data = srv.req("GET", "/health")
check(st == 200 and json.loads(data)["status"] == "ok", "health: %d %s" % (st, data))

# --- translations equal qkv translate's (LibreTranslate and /v1, greedy and beam)
j, _ = srv.post("/translate", {"q": SENTENCES, "source": "en", "target": "fr", "format": "text"})
check(j["translatedText"] == want_a, "LibreTranslate list %r != qkv translate %r" % (j["translatedText"], want_a))
for i, s in enumerate(SENTENCES):
    j, _ = srv.post("/translate", {"q": s, "source": "auto", "target": "fr"})
    check(j["translatedText"] == want_a[i], "LibreTranslate %r: %r != %r" % (s, j["translatedText"], want_a[i]))
    check(j["detectedLanguage"]["language"] == "en", "detectedLanguage: %r" % j)
j, _ = srv.post("/v1/translate", {"q": SENTENCES})
check([t["translation"] for t in j["translations"]] == want_a, "/v1 greedy != qkv translate")
j, _ = srv.post("/v1/translate", {"q": SENTENCES, "beam_size": 3, "n_best": 3, "attention": True})
check([t["translation"] for t in j["translations"]] == want_a_beam, "/v1 beam 3 != qkv translate --beam 3")
for t in j["translations"]:
    if not t["source"].strip():
        check(t["translation"] == "" and t["hypotheses"] == [], "blank sentence: %r" % t)
        continue
    h = t["hypotheses"]
    check(len(h) == 3 and h[0]["text"] == t["translation"], "n-best: %r" % h)
    check(all(h[k]["score"] >= h[k + 1]["score"] for k in range(2)), "n-best not sorted by score: %r" % h)
    att = t["attention"]
    check(len(att["weights"]) == att["layers"] == 1 and len(att["weights"][0]) == att["heads"] == 2, "attention dims")
    for head in att["weights"][0]:
        check(len(head) == len(att["target"]), "attention rows != target units")
        for row in head:
            check(len(row) == len(att["source"]) and abs(sum(row) - 1) < 1e-3, "attention row %r" % row)
# Greedy scores come from a teacher-forced pass, beam scores from the search: the same
# hypothesis gets the same log-probability either way (float rounding apart).
greedy, _ = srv.post("/v1/translate", {"q": SENTENCES, "beam_size": 1})
matched = 0
for g, bm in zip(greedy["translations"], j["translations"]):
    for h in bm["hypotheses"]:
        if g["hypotheses"] and h["units"] == g["hypotheses"][0]["units"] and h["finished"] == g["hypotheses"][0]["finished"]:
            check(abs(h["log_prob"] - g["hypotheses"][0]["log_prob"]) < 1e-3,
                  "log P of %r: beam %r, teacher-forced %r" % (h["text"], h["log_prob"], g["hypotheses"][0]["log_prob"]))
            matched += 1
check(matched >= 3, "only %d greedy hypotheses found among the beam's to compare scores" % matched)
j, _ = srv.post("/translate", "q=i+lost+.&source=en&target=fr", {"Content-Type": "application/x-www-form-urlencoded"})
check(j["translatedText"] == want_a[1], "form-encoded: %r" % j)
st, _, data = srv.req("GET", "/languages")
check(st == 200 and json.loads(data) == [{"code": "en", "name": "English", "targets": ["fr"]}], "languages: %s" % data)
st, _, data = srv.req("GET", "/")
check(st == 200 and b"<title>qkv: English to French, with attention</title>" in data, "page title: %s" % data[:400])

# --- concurrent requests are batched together and each gets its own answer
results = {}


def one(i, path="/v1/translate"):
    k = i % len(SENTENCES)
    st2, _, d = srv.req("POST", path, {"q": SENTENCES[k]}, JSON)
    results[i] = (st2, json.loads(d), k)


def one_connected(i, connected, path="/translate"):
    """one(), connecting first and setting `connected` once the request is sent."""
    k = i % len(SENTENCES)
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", path, body=json.dumps({"q": SENTENCES[k]}), headers=JSON)
    connected.set()
    r = c.getresponse()
    results[i] = (r.status, json.loads(r.read()), k)
    c.close()


threads = [threading.Thread(target=one, args=(i,)) for i in range(18)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i, (st2, d, k) in results.items():
    check(st2 == 200 and d["translations"][0]["translation"] == want_a[k], "concurrent %d: %r" % (i, d))
check(max(d["batch_sentences"] for _, d, _ in results.values()) > 1, "no request shared a batch")

# --- error statuses, JSON bodies, no paths
expect_error(srv, 400, "/translate", "{\"q\": ", says="not valid JSON")
expect_error(srv, 400, "/translate", {"q": 5}, says="\"q\" must be a string")
expect_error(srv, 400, "/v1/translate", {"q": "go .", "beam_size": "4"}, says="must be an integer")
expect_error(srv, 400, "/v1/translate", {"q": "go .", "beam": 4}, says="unknown field")
expect_error(srv, 400, "/v1/translate", {"q": "go .", "n_best": 2}, says="must not exceed the beam size")
expect_error(srv, 400, "/translate", {"q": "go .", "target": "de"}, says="\"target\" must be \"fr\"")
expect_error(srv, 400, "/translate", {"q": "go .", "source": "de"},
             says="\"source\" must be \"en\" (or \"auto\"), got \"de\": this model translates English to French")
expect_error(srv, 400, "/translate", {"q": ["go ."] * 17}, says="max_sentences")
expect_error(srv, 400, "/translate", {"q": "a" * 41}, says="max_chars")
expect_error(srv, 413, "/translate", {"q": ["a" * 30] * 200}, says="max_body_bytes")


def chunked_flood(port, path, total):
    """POSTs a chunked body of `total` bytes (1 KiB chunks) until the server answers or closes;
    returns (bytes sent, the answer's first bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n" % path).encode())
    chunk, sent = b"400\r\n" + b" " * 1024 + b"\r\n", 0
    s.setblocking(False)
    answer = b""
    while sent < total:
        try:
            answer += s.recv(4096)
            if answer:
                break
        except BlockingIOError:
            pass
        except OSError:
            break
        try:
            sent += s.send(chunk)
        except BlockingIOError:
            time.sleep(0.001)
        except OSError:  # reset: the server stopped reading and closed
            break
    s.setblocking(True)
    try:
        while b"\r\n\r\n" not in answer:
            d = s.recv(4096)
            if not d:
                break
            answer += d
    except OSError:
        pass
    s.close()
    return sent, answer


# A chunked body over --max-body-bytes: 413 while it is still arriving, not after buffering it all
# (was: a 300 MiB chunked body was read whole, then refused).
sent, answer = chunked_flood(srv.port, "/v1/translate", 64 << 20)
check(answer.startswith(b"HTTP/1.1 413"), "chunked body over the limit: %r after %d bytes" % (answer[:200], sent))
check(sent < 16 << 20, "the server read %d bytes of a chunked body before refusing it (limit 4000)" % sent)
expect_error(srv, 415, "/translate", json.dumps({"q": "go ."}), {"Content-Type": "text/plain"})
expect_error(srv, 404, "/nothing/here", {"q": "go ."})
expect_error(srv, 404, "/../../etc/passwd", None, {}, method="GET")
hdrs, _ = expect_error(srv, 405, "/translate", None, {}, method="GET")
check(hdrs.get("allow") == "POST", "405 without Allow: %r" % hdrs)
expect_error(srv, 405, "/health", {"q": 1}, method="DELETE")
st, hdrs, data = srv.req("GET", "/metrics")
m = data.decode()
for s in ["qkv_requests_total{endpoint=\"/translate\",code=\"400\"}", "qkv_errors_total{kind=\"limit\"} 4",
          "qkv_errors_total{kind=\"content_type\"} 1", "qkv_batch_sentences_bucket", "qkv_queue_sentences 0",
          "qkv_request_duration_seconds_bucket{le=\"+Inf\"}", "qkv_model_ready 1"]:
    check(s in m, "metrics lack %s:\n%s" % (s, m))

# --- reload: SIGHUP swaps in a new model; a damaged folder is refused and the old one keeps serving
for f in os.listdir(b):
    if os.path.isfile(os.path.join(b, f)):
        shutil.copy(os.path.join(b, f), os.path.join(served, f))
srv.proc.send_signal(signal.SIGHUP)
srv.wait_log("(load 2)")
j, _ = srv.post("/translate", {"q": SENTENCES})
check(j["translatedText"] == want_b, "after reload %r != model b's %r" % (j["translatedText"], want_b))
with open(os.path.join(served, "model.safetensors"), "r+b") as f:
    f.truncate(1000)
srv.proc.send_signal(signal.SIGHUP)
srv.wait_log("refused to load")
check("the previous model keeps serving" in srv.text(), "refusal message: " + srv.text())
j, _ = srv.post("/translate", {"q": SENTENCES})
check(j["translatedText"] == want_b, "after a refused reload %r != %r" % (j["translatedText"], want_b))
st, _, data = srv.req("GET", "/health")
check(st == 200 and json.loads(data)["model"]["generation"] == 2, "health after refused reload: %s" % data)
st, _, data = srv.req("GET", "/metrics")
check("qkv_model_reloads_total{result=\"refused\"} 1" in data.decode(), "refused reload not counted")
srv.stop()

# --- API key
srv = Server("key", "--model", a, "--api-key", "k3y")
expect_error(srv, 401, "/translate", {"q": "go ."}, says="an API key is required")
expect_error(srv, 403, "/translate", {"q": "go ."}, {"Content-Type": "application/json", "X-API-Key": "nope"},
             says="the API key is not valid")
expect_error(srv, 401, "/v1/translate", {"q": "go ."})
expect_error(srv, 401, "/metrics", None, {}, method="GET")
j, _ = srv.post("/translate", {"q": "go .", "api_key": "k3y"})
check(j["translatedText"] == want_a[0], "with api_key: %r" % j)
srv.post("/v1/translate", {"q": "go ."}, {"Content-Type": "application/json", "Authorization": "Bearer k3y"})
srv.post("/translate", {"q": "go ."}, {"Content-Type": "application/json", "X-API-Key": "k3y"})
srv.stop()

# --- queue full -> 503 + Retry-After; a request past its deadline -> 503
# --max-wait-ms of 10 minutes: a deadline answered when the batcher next looks (the old fault)
# would come after the client's 60 s timeout, however fast the machine; at its 300 ms deadline it
# comes well before.
srv = Server("queue", "--model", a, "--max-queue", "1", "--max-sentences", "1", "--max-wait-ms", "600000",
             "--timeout-ms", "300")
first = {}


def first_request():
    try:
        first.update(r=srv.req("POST", "/translate", {"q": "go ."}, JSON))
    except OSError as e:  # the client's timeout
        first.update(error=e)


t = threading.Thread(target=first_request)
t.start()
wait_until(lambda: "qkv_queue_sentences 1" in srv.req("GET", "/metrics")[2].decode(), "the first request never queued")
hdrs, j = expect_error(srv, 503, "/translate", {"q": "we won ."})
check(hdrs.get("retry-after") == "1" and j["kind"] == "overloaded", "queue full: %r %r" % (hdrs, j))
t.join()
check("r" in first, "no answer at the 300 ms deadline within the client's timeout: %r" % first.get("error"))
st, hdrs, data = first["r"]
check(st == 503 and json.loads(data)["kind"] == "deadline" and "retry-after" in hdrs, "deadline: %d %s" % (st, data))
srv.stop()

# --- SIGTERM with requests in flight: every one is answered at once (not after --max-wait-ms: 10
# minutes, past stop()'s 60 s bound), then exit 0
srv = Server("drain", "--model", a, "--max-wait-ms", "600000")
results.clear()
threads = [threading.Thread(target=one, args=(i, "/translate")) for i in range(8)]
for t in threads:
    t.start()
wait_until(lambda: "qkv_queue_sentences 8" in srv.req("GET", "/metrics")[2].decode(), "the 8 requests never queued")
srv.stop()
for t in threads:
    t.join()
check(len(results) == 8, "lost requests: %d answered" % len(results))
for i, (st2, d, k) in results.items():
    check(st2 == 200 and d["translatedText"] == want_a[k], "in flight at SIGTERM %d: %d %r" % (i, st2, d))
check("finishing the requests in flight" in srv.text(), srv.text())
try:
    srv.req("GET", "/health", timeout=5)
    fail("the server still answers after SIGTERM")
except OSError:
    pass
# --- SIGTERM with more clients than --http-threads: the connections waiting for a worker thread
# are answered too (httplib's stop() closed them unanswered: 4 of 12 answered)
srv = Server("drain_threads", "--model", a, "--max-wait-ms", "600000", "--http-threads", "3")
results.clear()
threads = [threading.Thread(target=one, args=(i, "/translate")) for i in range(2)]
for t in threads:
    t.start()
# the third worker answers /metrics while two wait in the batcher
wait_until(lambda: "qkv_queue_sentences 2" in srv.req("GET", "/metrics")[2].decode(), "the 2 requests never queued")
connected = [threading.Event() for _ in range(2, 10)]
more = [threading.Thread(target=one_connected, args=(i, e)) for i, e in zip(range(2, 10), connected)]
for t in more:
    t.start()
# Connected and accepted (1 on the third worker, 7 waiting for a worker thread): each client has
# sent its request, and no connection waits in the kernel for the server to accept it.
for e in connected:
    check(e.wait(120), "a client did not connect within 120 s")
wait_until(lambda: accept_queue(srv.port) == 0, "the server did not accept the 8 connections")
srv.stop()
for t in threads + more:
    t.join()
check(len(results) == 10, "SIGTERM with 10 clients and 3 HTTP threads: %d answered" % len(results))
for i, (st2, d, k) in results.items():
    check(st2 == 200 and d["translatedText"] == want_a[k], "waiting for a worker at SIGTERM %d: %d %r" % (i, st2, d))
# --- SIGTERM with idle keep-alive clients holding the HTTP threads: answers after SIGTERM close
# their connection, so the clients queued behind them are answered at once (each idle keep-alive
# connection held a thread for its 2 s timeout: 20 clients on 2 threads took 18 s)
srv = Server("drain_keepalive", "--model", a, "--http-threads", "2")
kept, after = [], {}
sent = [threading.Event() for _ in range(12)]
def keep_alive_client(i):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", "/translate", body=json.dumps({"q": SENTENCES[i % len(SENTENCES)]}), headers=JSON)
    sent[i].set()
    r = c.getresponse()
    r.read()
    after[i] = (r.status, r.getheader("Connection"))
    kept.append(c)  # left open
threads = [threading.Thread(target=keep_alive_client, args=(i,)) for i in range(12)]
for t in threads:
    t.start()
# Two answered and idle on the two threads; the others sent and accepted, waiting for a thread.
for e in sent:
    check(e.wait(120), "a keep-alive client did not connect within 120 s")
wait_until(lambda: len(after) >= 2 and accept_queue(srv.port) == 0, "two answers, the rest accepted")
answered_before = set(after)
srv.stop()
for t in threads:
    t.join()
check(len(after) == 12 and all(st2 == 200 for st2, _ in after.values()), "keep-alive clients at SIGTERM: %r" % after)
# Answered after SIGTERM: their connection is closed (so the clients queued behind an idle
# keep-alive connection are not kept waiting for its timeout).
late = [conn for i, (st2, conn) in after.items() if i not in answered_before]
check(late and all(conn == "close" for conn in late), "answers after SIGTERM keep their connection: %r" % late)
for c in kept:
    c.close()
# --- --compute-type: int8 and bf16 serve what qkv translate --compute-type gives; /health says which
for ct in ("int8", "bf16"):
    want = translate_cli(a, "--compute-type", ct)
    srv = Server("compute_" + ct, "--model", a, "--compute-type", ct)
    check("ready (%s compute)" % ct in srv.text(), srv.text())
    st, _, data = srv.req("GET", "/health")
    check(st == 200 and json.loads(data)["model"]["compute_type"] == ct, "health under %s: %s" % (ct, data))
    j, _ = srv.post("/v1/translate", {"q": SENTENCES})
    check([t["translation"] for t in j["translations"]] == want, "%s: /v1 != qkv translate --compute-type" % ct)
    srv.stop()
# --- the languages are the model's: c records French→English, u records none
c, u = os.path.join(T, "c"), os.path.join(T, "u")
want_c = translate_cli(c)
srv = Server("langs", "--model", c)
st, _, data = srv.req("GET", "/languages")
check(st == 200 and json.loads(data) == [{"code": "fr", "name": "French", "targets": ["en"]}], "fr→en languages: %s" % data)
st, _, data = srv.req("GET", "/health")
m = json.loads(data)["model"]
check(m["source_language"] == "fr" and m["target_language"] == "en", "fr→en health: %s" % data)
j, _ = srv.post("/translate", {"q": SENTENCES, "source": "fr", "target": "en"})
check(j["translatedText"] == want_c, "fr→en LibreTranslate %r != qkv translate %r" % (j["translatedText"], want_c))
j, _ = srv.post("/translate", {"q": SENTENCES[0], "source": "auto"})
check(j["translatedText"] == want_c[0] and j["detectedLanguage"]["language"] == "fr", "fr→en auto: %r" % j)
j, _ = srv.post("/translate", "q=go+.&source=FR&target=EN", {"Content-Type": "application/x-www-form-urlencoded"})
check(j["translatedText"] == want_c[0], "fr→en form with upper-case codes: %r" % j)
expect_error(srv, 400, "/translate", {"q": "go .", "source": "en", "target": "fr"},
             says="\"source\" must be \"fr\" (or \"auto\"), got \"en\": this model translates French to English")
expect_error(srv, 400, "/v1/translate", {"q": "go .", "target": "fr"},
             says="\"target\" must be \"en\", got \"fr\": this model translates French to English")
st, _, data = srv.req("GET", "/")
check(st == 200 and b"<title>qkv: French to English, with attention</title>" in data and
      b'<h2 id="srclang">French</h2>' in data and b'<h2 id="tgtlang">English</h2>' in data, "fr→en page: %s" % data[:600])
srv.stop()
srv = Server("unrecorded", "--model", u)
st, _, data = srv.req("GET", "/languages")
check(st == 200 and json.loads(data) == [{"code": "und", "name": "unrecorded", "targets": ["und"]}],
      "unrecorded languages: %s" % data)
j, _ = srv.post("/translate", {"q": "go .", "source": "xx", "target": "yy"})
check(isinstance(j["translatedText"], str), "unrecorded languages accept any code: %r" % j)
expect_error(srv, 400, "/translate", {"q": "go .", "target": "auto"}, says="\"target\" cannot be \"auto\"")
srv.stop()
# --- a Bahdanau model: the page asks for no attention weights (every sentence got a 400 before)
srv = Server("bahdanau", "--model", os.path.join(T, "g"))
st, _, data = srv.req("GET", "/")
check(st == 200 and b"attention: false }" in data, "Bahdanau page asks for attention")
j, _ = srv.post("/v1/translate", {"q": "go .", "beam_size": 4, "n_best": 4, "attention": False})
check(len(j["translations"][0]["hypotheses"]) >= 1, "Bahdanau /v1: %r" % j)
expect_error(srv, 400, "/v1/translate", {"q": "go .", "attention": True}, says="Transformer models only")
srv.stop()
p = subprocess.run([QKV, "serve", "--model", a, "--compute-type", "fp16", "--port", "0"], capture_output=True, text=True)
check(p.returncode == 2 and "--compute-type" in p.stderr, "serve --compute-type fp16: %d %s" % (p.returncode, p.stderr))
print("serve_check: ok")
