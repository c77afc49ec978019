#!/usr/bin/env bash
# CLI test (run by ctest with the qkv binary as $1): the page of qkv serve in a real browser.
# Headless Chromium (Debian's chromium, scripts/install_deps.sh) loads http://127.0.0.1:PORT/
# with ?q=..., which types the sentence into the box one character at a time; the test waits for
# the translation and the heatmap (--virtual-time-budget), then checks the DOM against the
# server's own /v1/translate answer and keeps a screenshot (build/test_serve_page.png, or
# $QKV_ARTIFACTS/test_serve_page.png). ?word=/?layer=/?head= count from 1 as the labels do, and
# one beyond the model is shown as an error; with --api-key the page has a key field, and a
# missing key and a wrong one get different messages. Skips, saying so, when chromium is not
# installed.
source "$(dirname "$0")/lib.sh" "$1"
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  echo "test_serve_page: SKIPPED: chromium is not installed (scripts/install_deps.sh installs it)"
  exit 0
fi
six_pairs > "$T/fra.txt"
"$QKV" train --data "$T/fra.txt" --max-steps 30 --out "$T/a" --preset demo --num-hiddens 16 --num-heads 2 \
  --num-blks 2 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6 --no-progress --threads 1 > "$T/train.log" 2>&1 \
  || { cat "$T/train.log"; fail "qkv train"; }
"$QKV" serve --model "$T/a" --port 0 --port-file "$T/port" --threads 1 2> "$T/serve.log" &
pid=$!
trap 'kill $pid 2> /dev/null || true; rm -rf "$T"' EXIT
for _ in $(seq 1 3000); do grep -q "qkv serve: ready" "$T/serve.log" && break; kill -0 $pid || break; sleep 0.02; done
grep -q "qkv serve: ready" "$T/serve.log" || { cat "$T/serve.log"; fail "server not ready"; }
port=$(cat "$T/port")
sentence="i'm home ."
q=$(/usr/bin/python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$sentence")
url="http://127.0.0.1:$port/?q=$q&word=1&layer=2&head=1"
chrome=("$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --user-data-dir="$T/chrome"
        --hide-scrollbars --window-size=1200,720 --virtual-time-budget=15000)
timeout 120 "${chrome[@]}" --dump-dom "$url" > "$T/dom.html" 2> "$T/chrome.err" || { tail "$T/chrome.err"; fail "chromium --dump-dom"; }
# The page sends beam 4, n-best 4 with attention: the server's answer for the same request.
curl -s -H 'Content-Type: application/json' -d "{\"q\": \"$sentence\", \"beam_size\": 4, \"n_best\": 4, \"attention\": true}" \
  "http://127.0.0.1:$port/v1/translate" > "$T/answer.json"
/usr/bin/python3 - "$T/dom.html" "$T/answer.json" <<'PY' || fail "DOM check"
import html.parser, json, sys
dom, answer = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))["translations"][0]
att = answer["attention"]

class P(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.body, self.out, self.src, self.cells, self.rows, self.nbest = [], {}, [], [], [], 0, []
        self.selected, self.status = None, ("", "")
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        parent = self.stack[-1] if self.stack else {}
        within = lambda i: any(e.get("id") == i for e in self.stack)
        if tag == "body": self.body = a
        if tag == "span" and within("out"): self.out.append(a); self.cur = a
        if tag == "span" and within("srcrow"): self.src.append(float(a["data-w"]))
        if tag == "td" and within("heatmap"): self.cells.append(float(a["data-w"]))
        if tag == "tr" and within("heatmap") and "data-i" in a: self.rows += 1
        if tag == "span" and a.get("class") == "hyp": self.nbest.append("")
        if a.get("id") == "status": self.status = (a.get("class") or "", "")
        self.stack.append(dict(a, tag=tag))
    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()["tag"] != tag: pass
    def handle_data(self, d):
        if self.stack and self.stack[-1].get("class") == "hyp": self.nbest[-1] += d
        if self.stack and self.stack[-1].get("id") == "status": self.status = (self.status[0], self.status[1] + d)

p = P(); p.feed(dom)
def need(c, m):
    if not c: print("FAIL:", m, file=sys.stderr); sys.exit(1)
need(p.body.get("data-state") == "ready", "page state %r (translation never arrived?)" % p.body.get("data-state"))
need(p.body.get("data-translation") == answer["translation"],
     "page shows %r, the server says %r" % (p.body.get("data-translation"), answer["translation"]))
need(len(p.out) == len(att["target"]), "French tokens %d, want %d" % (len(p.out), len(att["target"])))
need("sel" in p.out[0].get("class", ""), "word 0 is not selected")
need(p.rows == len(att["target"]) and len(p.cells) == len(att["target"]) * len(att["source"]), "heatmap size")
# ?word=1&layer=2&head=1: row 0 of layer 2, head 1 (rounded to 4 decimals by the page)
want = att["weights"][1][0][0]
need(len(p.src) == len(want) and all(abs(x - y) < 1e-4 for x, y in zip(p.src, want)),
     "source heat row %r != weights %r" % (p.src, want))
need(p.nbest == [h["text"] for h in answer["hypotheses"]], "n-best %r != %r" % (p.nbest, answer["hypotheses"]))
need(p.status == ("", "") or p.status[1].startswith("translated in"), "status %r" % (p.status,))
print("DOM ok: %r, %d x %d heatmap, %d hypotheses" % (answer["translation"], p.rows, len(att["source"]), len(p.nbest)))
PY
# page URL EXPECTED_STATUS_CLASS EXPECTED_STATUS_TEXT [KEYFIELD: shown|hidden]: loads URL headless
# and checks the status line (and the API key field).
page() {
  timeout 120 "${chrome[@]}" --dump-dom "$1" > "$T/dom2.html" 2>> "$T/chrome.err" || { tail "$T/chrome.err"; fail "chromium --dump-dom $1"; }
  /usr/bin/python3 - "$T/dom2.html" "$2" "$3" "${4:-}" <<'PY' || fail "page $1"
import html.parser, sys
dom, cls, text, keyfield = sys.argv[1:5]
class P(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.status, self.cls, self.inside, self.keyfield = "", None, False, None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id") == "status": self.cls, self.inside = a.get("class") or "", True
        if a.get("id") == "keyfield": self.keyfield = "hidden" if "hidden" in a else "shown"
    def handle_endtag(self, tag):
        if tag == "div": self.inside = False
    def handle_data(self, d):
        if self.inside: self.status += d
p = P(); p.feed(open(dom).read())
if p.cls != cls or not p.status.startswith(text):
    sys.exit("FAIL: status %r (class %r), want %r (class %r)" % (p.status, p.cls, text, cls))
if keyfield and p.keyfield != keyfield:
    sys.exit("FAIL: the API key field is %s, want %s" % (p.keyfield, keyfield))
print("page ok: %r" % p.status)
PY
}
# Beyond the 2-layer model, or not a number: an error on the page, not layer 2 shown silently.
page "http://127.0.0.1:$port/?q=$q&layer=3&head=0" err \
  "layer=3 in the address: this model has 2 layers (1 to 2); head=0 in the address: expected a number from 1, or mean" hidden
# Typing is debounced: each of the 2 page loads sent one request for the whole sentence, the test
# one more.
n=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^qkv_requests_total{endpoint="\/v1\/translate",code="200"} //p')
[ "$n" = 3 ] || fail "the pages and the test sent $n successful /v1/translate requests, want 2 + 1 (typing not debounced?)"
shot="${QKV_ARTIFACTS:-$(cd "$(dirname "$QKV")/.." && pwd)}/test_serve_page.png"
timeout 120 "${chrome[@]}" --screenshot="$T/page.png" "$url" > /dev/null 2>> "$T/chrome.err" || fail "chromium --screenshot"
[ "$(head -c 4 "$T/page.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "screenshot is not a PNG"
[ "$(stat -c %s "$T/page.png")" -gt 20000 ] || fail "screenshot is nearly empty"
cp "$T/page.png" "$shot" && echo "screenshot: $shot"
kill -TERM $pid
wait $pid || fail "qkv serve exit code $?"
# With --api-key: the page shows the key field; no key and a wrong key get different messages;
# the right one (typed in the field, or ?key=) translates.
"$QKV" serve --model "$T/a" --port 0 --port-file "$T/port2" --threads 1 --api-key k3y 2> "$T/serve2.log" &
pid=$!
for _ in $(seq 1 3000); do grep -q "qkv serve: ready" "$T/serve2.log" && break; kill -0 $pid || break; sleep 0.02; done
grep -q "qkv serve: ready" "$T/serve2.log" || { cat "$T/serve2.log"; fail "server with --api-key not ready"; }
port=$(cat "$T/port2")
page "http://127.0.0.1:$port/?q=$q" err "401: an API key is required" shown
page "http://127.0.0.1:$port/?q=$q&key=wrong" err "403: the API key is not valid" shown
page "http://127.0.0.1:$port/?q=$q&key=k3y" "" "translated in" shown
kill -TERM $pid
wait $pid || fail "qkv serve --api-key exit code $?"
echo "test_serve_page: ok"
