// The page of qkv serve (serve/web_page.h): one HTML file, inline CSS and JavaScript.
#include "qkv/serve/web_page.h"

#include <utility>

namespace qkv::serve {
namespace {

constexpr const char kPage[] = R"QKVPAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>qkv: {{PAIR}}, with attention</title>
<style>
  body { font: 15px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f6f7f9; }
  header { background: #1d2330; color: #fff; padding: 10px 20px; }
  header h1 { font-size: 18px; margin: 0; font-weight: 600; }
  header span { opacity: .7; font-size: 13px; }
  main { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; padding: 16px 20px; }
  section { background: #fff; border: 1px solid #dde1e7; border-radius: 6px; padding: 12px 14px; }
  h2 { font-size: 13px; text-transform: uppercase; letter-spacing: .05em; color: #5a6475; margin: 0 0 8px; }
  textarea { width: 100%; box-sizing: border-box; height: 90px; font: inherit; font-size: 17px; padding: 8px;
             border: 1px solid #c5cbd5; border-radius: 4px; resize: vertical; }
  #out { font-size: 20px; min-height: 40px; }
  .tok { display: inline-block; padding: 2px 5px; margin: 2px 1px; border-radius: 4px; cursor: pointer;
         border: 1px solid transparent; }
  .tok.special { color: #8a93a3; font-size: 14px; }
  .tok.sel { border-color: #d9480f; background: #fff4e6; }
  #srcrow .tok { cursor: default; font-size: 18px; }
  .controls { display: flex; gap: 12px; flex-wrap: wrap; align-items: center; margin-top: 8px; font-size: 13px; }
  select { font: inherit; }
  #status { font-size: 12px; color: #5a6475; margin-top: 6px; min-height: 16px; }
  #status.err { color: #c92a2a; }
  table.heat { border-collapse: collapse; margin-top: 8px; font-size: 12px; }
  table.heat td, table.heat th { padding: 3px 6px; text-align: center; }
  table.heat th { font-weight: 500; color: #39404d; }
  table.heat th.row { text-align: right; cursor: pointer; }
  table.heat tr.sel th.row { color: #d9480f; font-weight: 700; }
  table.heat td { min-width: 34px; color: #1d2330; border: 1px solid #eef0f3; }
  ol#nbest { margin: 0; padding-left: 22px; }
  ol#nbest li { margin: 3px 0; }
  ol#nbest .score { color: #5a6475; font-family: ui-monospace, monospace; font-size: 12px; margin-left: 8px; }
  .wide { grid-column: 1 / span 2; }
  .note { font-size: 12px; color: #5a6475; }
</style>
</head>
<body data-state="idle">
<header><h1>qkv <span>{{SOURCE}} &rarr; {{TARGET}} with a Transformer trained by qkv &middot; hover a word of the translation to see where it looked</span></h1></header>
<main>
  <section>
    <h2 id="srclang">{{SOURCE}}</h2>
    <textarea id="src" placeholder="{{PLACEHOLDER}}" autofocus></textarea>
    <div class="controls">
      <label>beam <select id="beam"><option>1</option><option>2</option><option selected>4</option><option>8</option></select></label>
      <label>n-best <select id="nbestn"><option>1</option><option>2</option><option selected>4</option></select></label>
      <label>layer <select id="layer"></select></label>
      <label>head <select id="head"></select></label>
      <label id="keyfield"{{KEY_HIDDEN}}>API key <input id="key" type="password" autocomplete="off" size="14"></label>
    </div>
    <div id="status"></div>
  </section>
  <section>
    <h2 id="tgtlang">{{TARGET}}</h2>
    <div id="out"></div>
    <div class="note">Hover or click a word: its cross-attention over the source is shown below.</div>
  </section>
  <section>
    <h2>Attention of <span id="selword">&ndash;</span> over the source</h2>
    <div id="srcrow"></div>
    <table class="heat" id="heatmap"></table>
  </section>
  <section>
    <h2>n-best hypotheses (score = log P / length penalty)</h2>
    <ol id="nbest"></ol>
  </section>
</main>
<script>
"use strict";
const $ = id => document.getElementById(id);
const params = new URLSearchParams(location.search);
// ?word=, ?layer= and ?head= count from 1, as the labels do (head may also be "mean"). A value
// that is not such a number, or beyond what the model has, is shown as an error, not clamped.
function urlIndex(name, fallback) {
  const v = params.get(name);
  if (v === null || v === "" || (name === "head" && v === "mean")) return { value: fallback };
  if (!/^[1-9][0-9]{0,8}$/.test(v))
    return { value: fallback, error: name + "=" + v + " in the address: expected a number from 1" +
                                     (name === "head" ? ", or mean" : "") };
  return { value: Number(v) - 1, asked: Number(v) };
}
const asked = { word: urlIndex("word", 0), layer: urlIndex("layer", 0), head: urlIndex("head", "mean") };
const st = { data: null, word: asked.word.value, layer: asked.layer.value, head: String(asked.head.value), seq: 0 };
// The key (qkv serve --api-key) stays in its field, and goes in the X-API-Key header.
if (params.get("key")) $("key").value = params.get("key");
if (params.get("beam")) $("beam").value = params.get("beam");

// What is wrong with the address's word/layer/head for this translation ("" when nothing).
function addressErrors(att, words) {
  const have = { word: [words, "words"], layer: [att ? att.layers : 1, "layers"], head: [att ? att.heads : 1, "heads"] };
  const out = [];
  for (const name of ["word", "layer", "head"]) {
    const a = asked[name], [n, what] = have[name];
    if (a.error) out.push(a.error);
    else if (a.asked !== undefined && a.asked > n)
      out.push(name + "=" + a.asked + " in the address: this " + (name === "word" ? "translation" : "model") + " has " +
               n + " " + (n === 1 ? what.slice(0, -1) : what) + " (1 to " + n + ")");
  }
  return out.join("; ");
}

function debounce(fn, ms) { let t = null; return () => { clearTimeout(t); t = setTimeout(fn, ms); }; }
function esc(s) { return s.replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;" })[c]); }
function special(t) { return t === "<eos>" || t === "<unk>" || t === "<bos>" || t === "<pad>"; }
// A subword model's pieces as words: "\u2581Elle" (a word's first piece) shows as "Elle", a piece
// inside a word with a leading middle dot ("\u00b7tion"); byte pieces and reserved tokens as they are.
let piecesShown = false;
function label(t) {
  if (!piecesShown || special(t) || /^<0x[0-9A-F]{2}>$/.test(t)) return t;
  return t.startsWith("\u2581") ? t.slice(1) : "\u00b7" + t;
}
function colour(w) {  // 0 -> white, 1 -> deep blue
  const a = Math.max(0, Math.min(1, w));
  const r = Math.round(255 - a * (255 - 24)), g = Math.round(255 - a * (255 - 80)), b = Math.round(255 - a * (255 - 170));
  return "rgb(" + r + "," + g + "," + b + ")";
}
function setStatus(text, err) { $("status").textContent = text; $("status").className = err ? "err" : ""; }

// Weights of target position t over the source for the chosen layer and head (or the mean of heads).
function rowWeights(att, t) {
  const L = att.weights[Math.min(st.layer, att.layers - 1)];
  if (st.head === "mean") {
    const out = new Array(att.source.length).fill(0);
    for (const h of L) h[t].forEach((w, s) => { out[s] += w / att.heads; });
    return out;
  }
  return L[Math.min(Number(st.head), att.heads - 1)][t];
}

function fillSelect(sel, n, withMean, value) {
  const want = (withMean ? ["mean"] : []).concat([...Array(n).keys()].map(String));
  if (sel.options.length !== want.length) {
    sel.innerHTML = want.map(v => "<option value=\"" + v + "\">" + (v === "mean" ? "mean" : Number(v) + 1) + "</option>").join("");
  }
  sel.value = want.includes(String(value)) ? String(value) : want[0];
}

function render() {
  const d = st.data;
  if (!d) {
    $("out").innerHTML = ""; $("srcrow").innerHTML = ""; $("heatmap").innerHTML = ""; $("nbest").innerHTML = "";
    $("selword").textContent = "\u2013";
    document.body.dataset.state = "idle";
    return;
  }
  const att = d.attention;
  fillSelect($("layer"), att ? att.layers : 1, false, st.layer);
  fillSelect($("head"), att ? att.heads : 1, true, st.head);
  st.layer = Number($("layer").value); st.head = $("head").value;
  const target = att ? att.target : d.translation.split(" ");
  piecesShown = !!att && att.source.concat(att.target).some(t => t.startsWith("\u2581"));
  st.addressError = addressErrors(att, target.length);
  if (st.addressError) setStatus(st.addressError, true);
  else if (st.shownAddressError) setStatus("");
  st.shownAddressError = st.addressError !== "";
  st.word = Math.max(0, Math.min(st.word, target.length - 1));
  $("out").innerHTML = target.map((t, i) =>
    "<span class=\"tok" + (special(t) ? " special" : "") + (i === st.word ? " sel" : "") + "\" data-i=\"" + i + "\">" +
    esc(label(t)) + "</span>").join(" ");
  for (const el of $("out").querySelectorAll(".tok")) {
    const pick = () => { st.word = Number(el.dataset.i); asked.word = { value: st.word }; render(); };
    el.addEventListener("mouseenter", pick);
    el.addEventListener("click", pick);
  }
  $("selword").textContent = "\u201c" + label(target[st.word]) + "\u201d";
  if (att) {
    const w = rowWeights(att, st.word);
    $("srcrow").innerHTML = att.source.map((s, j) =>
      "<span class=\"tok" + (special(s) ? " special" : "") + "\" data-w=\"" + w[j].toFixed(4) + "\" title=\"" +
      w[j].toFixed(3) + "\" style=\"background:" + colour(w[j]) + ";color:" + (w[j] > .55 ? "#fff" : "#1d2330") + "\">" +
      esc(label(s)) + "</span>").join(" ");
    let html = "<tr><th></th>" + att.source.map(s => "<th>" + esc(label(s)) + "</th>").join("") + "</tr>";
    att.target.forEach((t, i) => {
      const r = rowWeights(att, i);
      html += "<tr" + (i === st.word ? " class=\"sel\"" : "") + " data-i=\"" + i + "\"><th class=\"row\">" + esc(label(t)) + "</th>" +
        r.map(v => "<td data-w=\"" + v.toFixed(4) + "\" style=\"background:" + colour(v) + ";color:" + (v > .55 ? "#fff" : "#1d2330") +
                   "\">" + v.toFixed(2) + "</td>").join("") + "</tr>";
    });
    $("heatmap").innerHTML = html;
    for (const tr of $("heatmap").querySelectorAll("tr[data-i]"))
      tr.addEventListener("click", () => { st.word = Number(tr.dataset.i); asked.word = { value: st.word }; render(); });
  }
  $("nbest").innerHTML = d.hypotheses.map(h =>
    "<li><span class=\"hyp\">" + esc(h.text) + "</span><span class=\"score\">" + h.score.toFixed(3) +
    " (log P " + h.log_prob.toFixed(3) + (h.finished ? "" : ", cut at max length") + ")</span></li>").join("");
  document.body.dataset.state = "ready";
  document.body.dataset.translation = d.translation;
}

async function translate() {
  const text = $("src").value;
  const my = ++st.seq;
  if (!text.trim()) { st.data = null; render(); setStatus(""); return; }
  document.body.dataset.state = "busy";
  setStatus("translating\u2026");
  const beam = Number($("beam").value);
  const body = { q: text, beam_size: beam, n_best: Math.min(beam, Number($("nbestn").value)), attention: {{ATTENTION}} };
  const headers = { "Content-Type": "application/json" };
  const key = $("key").value;
  if (key) headers["X-API-Key"] = key;
  const t0 = performance.now();
  try {
    const r = await fetch("/v1/translate", { method: "POST", headers, body: JSON.stringify(body) });
    const j = await r.json();
    if (my !== st.seq) return;  // a newer request is on its way
    if (!r.ok) {
      document.body.dataset.state = "error";
      setStatus(r.status + ": " + j.error, true);
      if (r.status === 401 || r.status === 403) { $("keyfield").hidden = false; $("key").focus(); }
      return;
    }
    st.data = j.translations[0];
    render();
    if (!st.addressError) setStatus("translated in " + Math.round(performance.now() - t0) + " ms (beam " + j.settings.beam_size + ")");
  } catch (e) {
    if (my !== st.seq) return;
    document.body.dataset.state = "error";
    setStatus("the server did not answer: " + e, true);
  }
}

const later = debounce(translate, 250);
$("src").addEventListener("input", later);
for (const id of ["beam", "nbestn", "key"]) $(id).addEventListener("change", translate);
// A choice made on the page replaces the address's (and its error).
$("layer").addEventListener("change", () => { st.layer = Number($("layer").value); asked.layer = { value: st.layer }; render(); });
$("head").addEventListener("change", () => { st.head = $("head").value; asked.head = { value: st.head }; render(); });
for (const name of ["word", "layer", "head"])
  if (asked[name].error) { document.body.dataset.state = "error"; setStatus(asked[name].error, true); }

// ?q=TEXT types TEXT into the box one character at a time (as a person would: the debounce
// sends one request at the end), so a headless browser can drive the page.
const q = params.get("q");
if (q) {
  let i = 0;
  const step = () => {
    if (i >= q.length) return;
    $("src").value += q[i++];
    $("src").dispatchEvent(new Event("input"));
    setTimeout(step, 20);
  };
  step();
}
</script>
</body>
</html>
)QKVPAGE";

std::string html_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        switch (c) {
            case '&': o += "&amp;"; break;
            case '<': o += "&lt;"; break;
            case '>': o += "&gt;"; break;
            case '"': o += "&quot;"; break;
            case '\'': o += "&#39;"; break;
            default: o.push_back(c);
        }
    }
    return o;
}

}  // namespace

std::string index_html(const LanguagePair& languages, bool attention, bool key_field) {
    const std::string src = language_name(languages.source), tgt = language_name(languages.target);
    const std::string placeholder = languages.source == "en" ? "Type an English sentence, e.g. I'm home."
                                    : src.empty()            ? "Type a sentence"
                                                             : "Type a sentence in " + src;
    const std::pair<std::string, std::string> fields[] = {
        {"{{PAIR}}", src.empty() || tgt.empty() ? std::string("translation") : src + " to " + tgt},
        {"{{SOURCE}}", src.empty() ? std::string("Source") : src},
        {"{{TARGET}}", tgt.empty() ? std::string("Translation") : tgt},
        {"{{PLACEHOLDER}}", placeholder},
        {"{{ATTENTION}}", attention ? "true" : "false"},
        {"{{KEY_HIDDEN}}", key_field ? "" : " hidden"}};
    std::string page(kPage, sizeof(kPage) - 1);
    for (const auto& [key, value] : fields) {
        const std::string v = html_escape(value);
        for (size_t at = page.find(key); at != std::string::npos; at = page.find(key, at + v.size()))
            page.replace(at, key.size(), v);
    }
    return page;
}

}  // namespace qkv::serve
