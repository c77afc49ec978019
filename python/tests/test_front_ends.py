# Every front end on one tiny model (issue 43: one runtime for qkv translate, qkv eval, qkv serve
# and Python): translations, beam n-best lists with scores, teacher-forced scores, attention and
# eval's BLEU must agree between the front ends, and the memorised training pairs must come out as
# trained. QKV_FRONT_ENDS_DUMP=FILE writes every output as JSON (QKV_FRONT_ENDS_MODEL=DIR reuses a
# trained folder), so two builds can be compared byte for byte on one machine.
import http.client
import json
import os
import subprocess
import time

import pytest

import qkv
from conftest import qkv_bin

SENTENCES = ["go .", "i lost .", "he's calm .", "i'm home .", "we won .", "thank you .", "",
             "Unknown words, here!", "i lost . i lost .", "we won . thank you ."]
MEMORISED = {"go .": "va !", "i lost .": "j'ai perdu .", "he's calm .": "il est calme .",
             "i'm home .": "je suis chez moi .", "we won .": "nous avons gagné .", "thank you .": "merci ."}
TOL = 1e-3  # scores computed on two paths (search vs teacher forcing) differ by rounding only


@pytest.fixture(scope="module")
def model(tmp_path_factory, fra_txt):
    given = os.environ.get("QKV_FRONT_ENDS_MODEL")
    if given and os.path.exists(os.path.join(given, "model.safetensors")):
        return given
    out = given or str(tmp_path_factory.mktemp("front_ends") / "model")
    r = subprocess.run([qkv_bin(), "train", "--data", str(fra_txt), "--preset", "demo", "--max-steps", "300",
                        "--num-hiddens", "16", "--num-heads", "2", "--num-blks", "1", "--ffn-num-hiddens", "16",
                        "--batch-size", "8", "--num-steps", "6", "--no-progress", "--threads", "1", "--out", out],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def cli(*args, stdin=None):
    r = subprocess.run([qkv_bin(), *args, "--threads", "1"], input=stdin, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def translate_lines(model, sentences, *flags):
    return cli("translate", "--model", model, *flags, stdin="".join(s + "\n" for s in sentences)).splitlines()


def nbest_lines(model, sentences, *flags):
    """Moses n-best lines as {input line: [(text, log P, score[, alignment])]}."""
    out = {}
    for line in translate_lines(model, sentences, *flags):
        f = line.split(" ||| ")
        out.setdefault(int(f[0]), []).append((f[1], float(f[2]), float(f[3]), *f[4:]))
    return out


class Server:
    def __init__(self, model, tmp):
        port_file = tmp / "port"
        self.log = tmp / "serve.log"
        self.proc = subprocess.Popen([qkv_bin(), "serve", "--model", model, "--port", "0", "--port-file",
                                      str(port_file), "--threads", "1"], stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "w"))
        deadline = time.time() + 120
        while "qkv serve: ready" not in self.log.read_text():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.time() < deadline, "qkv serve not ready within 120 s"
            time.sleep(0.02)
        self.port = int(port_file.read_text())

    def post(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        assert r.status == 200, data
        return json.loads(data)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def test_front_ends_agree(model, fra_txt, tmp_path):
    dump = {}
    # --- qkv translate: greedy, beam, n-best with scores, greedy scores, alignments, attention JSON
    greedy = translate_lines(model, SENTENCES)
    beam = translate_lines(model, SENTENCES, "--beam", "3")
    nbest = nbest_lines(model, SENTENCES, "--beam", "3", "--num-hypotheses", "3")
    scored = nbest_lines(model, SENTENCES, "--scores")
    aligned = translate_lines(model, SENTENCES, "--alignments", "--attention-json", str(tmp_path / "att.json"))
    att_json = json.loads((tmp_path / "att.json").read_text())
    dump["translate"] = {"greedy": greedy, "beam": beam, "nbest": nbest, "scored": scored, "aligned": aligned,
                         "attention_json": att_json}
    assert len(greedy) == len(SENTENCES) and greedy[SENTENCES.index("")] == ""
    # a model that learnt its pairs (agreement between front ends is then not trivial)
    assert sum(greedy[SENTENCES.index(src)] == want for src, want in MEMORISED.items()) >= 4, greedy
    for i, s in enumerate(SENTENCES):
        if not s:
            assert i not in nbest and i not in scored
            continue
        assert len(nbest[i]) == 3 and nbest[i][0][0] == beam[i]
        assert [h[2] for h in nbest[i]] == sorted((h[2] for h in nbest[i]), reverse=True)
        assert len(scored[i]) == 1 and scored[i][0][0] == greedy[i]
        assert aligned[i].split(" ||| ")[0] == greedy[i]
        assert att_json[i]["line"] == i + 1 and len(att_json[i]["attention"]) >= len(att_json[i]["translation"])

    # --- qkv eval: its hypotheses are qkv translate's for the same held-out sources
    ev = {}
    for name, flags in (("greedy", []), ("beam", ["--beam", "3"])):
        hyp = tmp_path / ("hyp_" + name)
        out = cli("eval", "--model", model, "--data", str(fra_txt), "--no-progress", "--show", "1000", "--hyp-out", str(hyp),
                  "--json", str(tmp_path / "eval.json"), *flags)
        j = json.loads((tmp_path / "eval.json").read_text())
        for k in ("decode_seconds", "peak_rss_bytes"):
            j.pop(k)
        shown = [ln.strip().split(" => ")[0] for ln in out.splitlines() if ln.startswith("  ") and "[ref:" in ln]
        hyps = hyp.read_text().splitlines()
        assert shown and len(shown) == len(hyps) == j["pairs"]
        assert translate_lines(model, shown, *flags) == hyps
        ev[name] = {"json": j, "hyp": hyps}
    assert ev["greedy"]["json"]["bleu4"] > 0
    dump["eval"] = ev

    # --- qkv serve: LibreTranslate and /v1 shapes
    srv = Server(model, tmp_path)
    try:
        lt = srv.post("/translate", {"q": SENTENCES})
        v1_greedy = srv.post("/v1/translate", {"q": SENTENCES, "n_best": 1, "beam_size": 1})
        v1_beam = srv.post("/v1/translate", {"q": SENTENCES, "beam_size": 3, "n_best": 3, "attention": True})
    finally:
        srv.stop()
    dump["serve"] = {"translate": lt, "v1_greedy": v1_greedy, "v1_beam": v1_beam}
    assert lt["translatedText"] == greedy
    assert [t["translation"] for t in v1_greedy["translations"]] == greedy
    assert [t["translation"] for t in v1_beam["translations"]] == beam
    for i, s in enumerate(SENTENCES):
        if not s:
            continue
        hs = v1_beam["translations"][i]["hypotheses"]
        assert [h["text"] for h in hs] == [h[0] for h in nbest[i]]
        for h, want in zip(hs, nbest[i]):
            assert abs(h["log_prob"] - want[1]) < TOL and abs(h["score"] - want[2]) < TOL
        g = v1_greedy["translations"][i]["hypotheses"][0]
        assert abs(g["log_prob"] - scored[i][0][1]) < TOL and abs(g["score"] - scored[i][0][2]) < TOL
        att = v1_beam["translations"][i]["attention"]
        assert att["target"][: len(hs[0]["units"])] == hs[0]["units"]

    # --- Python: translate_batch and score_batch
    tr = qkv.Translator(model)
    py_greedy = tr.translate_batch(SENTENCES)
    py_beam = tr.translate_batch(SENTENCES, beam_size=3, num_hypotheses=3)
    py_scored = tr.translate_batch(SENTENCES, return_scores=True, return_attention=True)
    live = [s for s in SENTENCES if s]
    best = [t for s, t in zip(SENTENCES, greedy) if s]
    py_score = tr.score_batch(live, best)
    dump["python"] = {
        "greedy": [r.translation for r in py_greedy],
        "beam": [[r.translation, r.hypotheses, r.scores] for r in py_beam],
        "scored": [[r.hypotheses, r.scores, None if r.attention is None else r.attention.tolist()] for r in py_scored],
        "score_batch": [[r.tokens, r.log_probs, r.score] for r in py_score]}
    assert [r.translation for r in py_greedy] == greedy
    assert [r.translation for r in py_beam] == beam
    for i, s in enumerate(SENTENCES):
        if not s:
            assert py_beam[i].hypotheses == [] and py_scored[i].hypotheses == []
            continue
        assert py_beam[i].hypotheses == [h[0] for h in nbest[i]]
        assert all(abs(a - h[2]) < TOL for a, h in zip(py_beam[i].scores, nbest[i]))
        assert py_scored[i].hypotheses == [greedy[i]] and abs(py_scored[i].scores[0] - scored[i][0][2]) < TOL
        assert py_scored[i].attention.shape[0] >= 1
    for s, t, r in zip(live, best, py_score):
        g = v1_greedy["translations"][SENTENCES.index(s)]["hypotheses"][0]
        assert r.tokens[:-1] == g["units"] and r.tokens[-1] == "<eos>"
        if g["finished"]:  # the served score counts <eos> when it was emitted, as score_batch does
            assert abs(r.score - g["log_prob"]) < TOL, (s, t, r.score, g)
    if os.environ.get("QKV_FRONT_ENDS_DUMP"):
        with open(os.environ["QKV_FRONT_ENDS_DUMP"], "w", encoding="utf-8") as f:
            json.dump(dump, f, indent=1, ensure_ascii=False, sort_keys=True)


# --- a real-text model (issue 45): raw, cased text in and out on every front end ----------------

REAL_TEXTS = ["Tom has 3 books.  Alice has 12 dogs!", "Tom has 3 books.", "Alice has 12 dogs!", "",
              "Mary has 🍎 cats ✓."]


@pytest.fixture(scope="module")
def real_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("real_text")
    objects = [("apples", "pommes"), ("books", "livres"), ("cats", "chats"), ("dogs", "chiens")]
    lines = [f"{n} has {i} {objects[(i + k) % 4][0]}.\t{n} a {i} {objects[(i + k) % 4][1]}."
             for i in range(1, 61) for k, n in enumerate(["Tom", "Mary", "John", "Alice"])]
    (d / "corpus.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = str(d / "model")
    r = subprocess.run([qkv_bin(), "train", "--preset", "real", "--data", str(d / "corpus.tsv"), "--num-hiddens", "32",
                        "--num-heads", "2", "--num-blks", "1", "--ffn-num-hiddens", "64", "--batch-tokens", "120",
                        "--max-steps", "600", "--warmup", "30", "--lr", "3e-3", "--time-budget", "none", "--val-every", "none", "--threads", "1",
                        "--no-progress", "--out", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def test_real_text_front_ends_agree(real_model, tmp_path):
    cli_lines = translate_lines(real_model, REAL_TEXTS)
    assert len(cli_lines) == len(REAL_TEXTS) and cli_lines[3] == ""
    # two sentences in one text: each translated as it would be alone, in the text's layout
    assert cli_lines[0] == cli_lines[1] + "  " + cli_lines[2], cli_lines
    for line in cli_lines:
        assert "\u2581" not in line and "<unk>" not in line, line
    tr = qkv.Translator(real_model)
    assert [r.translation for r in tr.translate_batch(REAL_TEXTS)] == cli_lines
    # n-best lists join the sentences' hypotheses: the best is the plain translation's
    plain = translate_lines(real_model, REAL_TEXTS[:1], "--beam", "2")
    nb = tr.translate_batch(REAL_TEXTS[:1], beam_size=2, num_hypotheses=2)
    assert nb[0].hypotheses[0] == plain[0] == nb[0].translation and len(nb[0].hypotheses) == 2
    sc = tr.score_batch(["Tom has 3 books."], [cli_lines[1]])
    assert sc[0].tokens[-1] == "<eos>" and all(lp <= 0 for lp in sc[0].log_probs)
    srv = Server(real_model, tmp_path)
    try:
        lt = srv.post("/translate", {"q": REAL_TEXTS, "source": "en", "target": "fr"})
    finally:
        srv.stop()
    assert lt["translatedText"] == cli_lines
