#!/usr/bin/env bash
# qkv CMD --help (issue 44, item 8): every option that takes a value shows its default ("default ...",
# "the preset's", or CLI11's "=VALUE"), unless it is REQUIRED; no "{false}" after a switch and its
# opposite; train --help in groups (Model, Data, Training, Decoding, Output, LM-only) with the LM-only
# flags under their own heading; the --subword and translate texts say what is true.
# Usage: test_help.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
for cmd in "" train translate eval serve heatmap info generate average nw attention data score; do
  run_rc 0 $cmd --help
  cp "$T/out" "$T/help.${cmd:-qkv}"
done
python3 - "$T" <<'PY' || fail "--help"
import re, sys
T = sys.argv[1]
bad = []
for cmd in ["qkv", "train", "translate", "eval", "serve", "heatmap", "info", "generate", "average", "nw", "attention", "data", "score"]:
    lines = open(f"{T}/help.{cmd}").read().split("\n")
    text = "\n".join(lines)
    for m in re.finditer(r"\{(true|false)\}", text):
        bad.append(f"{cmd}: '{{{m.group(1)}}}' in --help")
    # an option's entry: its line and the description lines indented below it
    i = 0
    while i < len(lines):
        line = lines[i]
        if not re.match(r"^  -", line):
            i += 1
            continue
        entry, i = line, i + 1
        while i < len(lines) and re.match(r"^ {20,}\S", lines[i]):
            entry += " " + lines[i].strip()
            i += 1
        takes_value = re.match(r"^  -[-,A-Za-z0-9]+ (INT|UINT|FLOAT|TEXT)\b", line)
        if not takes_value or "REQUIRED" in line:
            continue
        if "default" in entry or re.search(r"^  -\S+ \S.*?=\S", line):
            continue
        bad.append(f"{cmd}: no default shown: {entry.strip()}")
train = open(f"{T}/help.train").read()
heads = [h for h in re.findall(r"^(\S[^\n]*):$", train, re.M)]
for want in ["Model", "Data", "Training", "Output", "LM-only (--model lm)"]:
    if want not in heads:
        bad.append(f"train: no group '{want}:' (groups: {heads})")
if not any(h.startswith("Decoding") for h in heads):
    bad.append(f"train: no Decoding group (groups: {heads})")
lm = re.search(r"^LM-only \(--model lm\):\n(.*?)(?:\n\n|\Z)", train, re.M | re.S)
for flag in ["--num-kv-heads", "--positions", "--window"]:
    if not lm or flag not in lm.group(1):
        bad.append(f"train: {flag} is not under 'LM-only (--model lm):'")
    if train.count(flag + " ") != 1:
        bad.append(f"train: {flag} listed {train.count(flag + ' ')} times")
sub = re.search(r"^  --subword .*?(?=^  -)", train, re.M | re.S).group(0)
if "none (D2L words, default)" in sub or "bpe on other corpora" not in sub:
    bad.append("train: --subword does not say bpe is the default on other corpora: " + " ".join(sub.split()))
if "English sentences" in open(f"{T}/help.translate").read():
    bad.append("translate: 'English sentences' (a model translates from its own source language)")
if bad:
    print("\n".join(bad))
    sys.exit(1)
PY
echo "cli --help: defaults shown, groups, no {false}: ok"
