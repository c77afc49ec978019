#!/usr/bin/python3
"""Load generator for `qkv serve` (standard library only; loopback only; bounded in time).

Sends LibreTranslate requests (one sentence each, POST /translate) to 127.0.0.1:PORT for
--duration seconds and checks every answer against the expected translation (qkv translate's,
from --expected), so a lost, duplicated or mixed-up answer is counted, not just a slow one.

Closed loop (--concurrency N): N clients, each sending its next request when the last is
answered. Open loop (--rate R): requests start at R per second whatever the answers, each on a
thread of a pool (--concurrency threads at most in flight; arrivals beyond that are counted as
'dropped by the client'). Prints one JSON line: sentences/s (200 answers), latency p50/p95/p99 of
200 answers, counts by status, wrong answers, the server's peak RSS (VmHWM of --pid), and
drain_s: how long the answers still in flight at the end took.
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sentences", required=True, help="file, one English sentence per line")
    ap.add_argument("--expected", required=True, help="file, qkv translate's output for --sentences")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--rate", type=float, default=0, help="open loop: requests per second (0: closed loop)")
    ap.add_argument("--pid", type=int, default=0, help="server process, for its peak RSS")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    src = open(a.sentences).read().split("\n")[:-1]
    want = open(a.expected).read().split("\n")[:-1]
    assert len(src) == len(want) and src, "sentences and expected translations differ in count"
    lock = threading.Lock()
    lat, status, wrong, sent = [], {}, [0], [0]
    stop_at = time.time() + a.duration

    def one(conn, i):
        body = json.dumps({"q": src[i], "source": "en", "target": "fr"})
        t0 = time.time()
        try:
            conn.request("POST", "/translate", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            st = r.status
        except (OSError, http.client.HTTPException):
            conn.close()
            st, data = "conn_error", b""
        dt = time.time() - t0
        with lock:
            status[st] = status.get(st, 0) + 1
            if st == 200:
                lat.append(dt)
                if json.loads(data)["translatedText"] != want[i]:
                    wrong[0] += 1

    def client(k):
        rng = random.Random(a.seed * 1000 + k)
        conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=60)
        while time.time() < stop_at:
            one(conn, rng.randrange(len(src)))
        conn.close()

    threads = []
    if a.rate <= 0:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(a.concurrency)]
        for t in threads:
            t.start()
    else:
        rng = random.Random(a.seed)
        free = threading.Semaphore(a.concurrency)
        dropped = [0]

        def open_one(i):
            conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=60)
            one(conn, i)
            conn.close()
            free.release()

        t_next = time.time()
        while time.time() < stop_at:
            t_next += 1.0 / a.rate
            delay = t_next - time.time()
            if delay > 0:
                time.sleep(delay)
            if not free.acquire(blocking=False):
                dropped[0] += 1
                continue
            sent[0] += 1
            t = threading.Thread(target=open_one, args=(rng.randrange(len(src)),))
            t.start()
            threads.append(t)
        status["dropped_by_client"] = dropped[0]
    for t in threads:
        t.join()
    elapsed = a.duration
    lat.sort()
    q = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 1) if lat else None
    peak = None
    if a.pid:
        for line in open("/proc/%d/status" % a.pid):
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) // 1024
    answered = sum(v for k, v in status.items() if k != "dropped_by_client")
    out = {"concurrency": a.concurrency, "rate": a.rate, "duration_s": a.duration,
           "sentences_per_s": round(status.get(200, 0) / elapsed, 1), "p50_ms": q(0.50), "p95_ms": q(0.95),
           "p99_ms": q(0.99), "status": {str(k): v for k, v in status.items()}, "wrong_answers": wrong[0],
           "server_peak_rss_mib": peak, "drain_s": round(max(0.0, time.time() - stop_at), 2)}
    if a.rate > 0:
        out["sent"] = sent[0]
        out["lost"] = sent[0] - answered
    print(json.dumps(out))


if __name__ == "__main__":
    main()
