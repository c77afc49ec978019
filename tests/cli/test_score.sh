#!/usr/bin/env bash
# qkv score: sacreBLEU BLEU and chrF2 of a hypothesis file against a reference file (another system's
# output scored as qkv eval scores qkv's), checked against sacreBLEU 2.6.0's own numbers for the
# fixtures' mixed case (tests/fixtures/sacrebleu/README.md); --json; the errors.
# Usage: test_score.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
F="$(cd "$(dirname "$0")/../fixtures/sacrebleu" && pwd)"

run_rc 0 score --hyp-file "$F/mixed.hyp" --ref-file "$F/mixed.ref" --json "$T/s.json"
out_has "20 hypotheses of $F/mixed.hyp" \
  "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0 = 65.70 82.2/71.4/62.0/51.2 " \
  "chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0 = 74.77"
python3 - "$T/s.json" <<'PY' || fail "--json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["segments"] == 20, j
assert abs(j["sacrebleu"]["score"] - 65.70241995915077) < 1e-6 and j["sacrebleu"]["counts"] == [148, 115, 88, 64], j
assert abs(j["chrf"]["score"] - 74.77) < 0.005 and j["chrf"]["name"] == "chrF2", j
PY
# hypotheses = references: 100
run_rc 0 score --hyp-file "$F/identical.ref" --ref-file "$F/identical.ref"
out_has "version:2.6.0 = 100.00 100.0/100.0/100.0/100.0"

# errors name the option
head -3 "$F/mixed.hyp" > "$T/three.hyp"
run_rc 1 score --hyp-file "$T/three.hyp" --ref-file "$F/mixed.ref"
err_has "--hyp-file '$T/three.hyp' has 3 lines but --ref-file '$F/mixed.ref' has 20"
run_rc 1 score --hyp-file "$T/none.hyp" --ref-file "$F/mixed.ref"
err_has "--hyp-file" "$T/none.hyp"
run_rc 2 score --hyp-file "$T/three.hyp"
err_has "--ref-file is required"
echo "qkv score: sacreBLEU 2.6.0's BLEU and chrF2 lines, --json, errors: ok"
