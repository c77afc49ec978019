#!/usr/bin/env bash
# Writes that fail (issue 28): a full disk and a read-only folder while qkv train writes its
# checkpoint and model (--resume, --overwrite) and qkv eval its outputs. Each time: exit 1, the
# error names the file, the earlier checkpoint, model and outputs stay as they were byte for byte
# and load (qkv info), no temporary file is left, and --resume continues once the disk has room.
#   full disk: a 4 MB tmpfs filled up with a file (when this runs as root and may mount), else
#              RLIMIT_FSIZE (ulimit -f: a write past the limit fails with EFBIG, SIGXFSZ ignored);
#   read-only: that tmpfs remounted read-only (root), else chmod a-w (root ignores permissions).
# Usage: test_fault_writes.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
six_pairs > "$T/fra.txt"
small=(--preset demo --num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6
       --no-progress --time-budget none --test-pairs 3 --valid-pairs 3)
mnt="$T/mnt"
mkdir "$mnt"
mounted=0
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=4m tmpfs "$mnt" 2> /dev/null; then mounted=1; fi
trap 'if [ "$mounted" = 1 ]; then umount "$mnt" || true; fi; rm -rf "$T"' EXIT
echo "fault writes: $([ $mounted = 1 ] && echo "tmpfs at $mnt" || echo "RLIMIT_FSIZE and chmod (not root, or mount refused)")"
run="$mnt/run"

# sums: md5 of the files a failed write must not change
sums() { (cd "$run" && md5sum checkpoint.safetensors model.safetensors config.json src_vocab.txt tgt_vocab.txt) 2>&1; cat "$mnt/hyp.txt" 2> /dev/null | md5sum; }
no_temps() { local t; t=$(find "$mnt" -name '*.tmp.*'); [ -z "$t" ] || fail "temporary files left: $t"; }
loads() { run_rc 0 info "$run" --no-params; out_has "the folder loads"; }

run_rc 0 train "${small[@]}" --data "$T/fra.txt" --max-steps 6 --out "$run"
run_rc 0 eval --model "$run" --data "$T/fra.txt" --no-progress --hyp-out "$mnt/hyp.txt"
before=$(sums)

# ---- full disk. full OUT CMD...: CMD with the disk full, its stdout and stderr in OUT; sets rc.
if [ $mounted = 1 ]; then
  # Filled again before each command: a failed command frees what it replaced or removed.
  full() {
    local f=$1; shift
    dd if=/dev/zero of="$mnt/fill.$RANDOM" bs=1k 2> /dev/null || true
    set +e; "$@" > "$f" 2>&1; rc=$?; set -e
  }
  nospace="No space left on device"
else
  # RLIMIT_FSIZE binds every write of the process to a regular file, its stderr too: the output
  # goes through a pipe. 4 KiB is below the checkpoint's size; 0 for eval, whose outputs are smaller.
  full() {
    local f=$1; shift
    local kib=4
    [ "$2" = eval ] && kib=0
    set +e; (trap '' XFSZ; ulimit -f $kib; exec "$@") 2>&1 | cat > "$f"; rc=${PIPESTATUS[0]}; set -e
  }
  nospace="File too large"
fi
full "$T/err" "$QKV" train --resume --out "$run" --data "$T/fra.txt" --max-steps 12 --no-progress
[ $rc = 1 ] || { cat "$T/err"; fail "train --resume on a full disk: exit $rc, want 1"; }
err_has "cannot write '$run/" "$nospace"
[ "$(sums)" = "$before" ] || fail "a failed write on a full disk changed the folder"
no_temps
full "$T/err" "$QKV" eval --model "$run" --data "$T/fra.txt" --no-progress --hyp-out "$mnt/hyp.txt"
[ $rc = 1 ] || { cat "$T/err"; fail "eval --hyp-out on a full disk: exit $rc, want 1"; }
err_has "cannot write '$mnt/hyp.txt'" "$nospace"
[ "$(sums)" = "$before" ] || fail "eval on a full disk changed its earlier output"
no_temps
rm -f "$mnt"/fill.*
loads
run_rc 0 train --resume --out "$run" --data "$T/fra.txt" --max-steps 12 --no-progress
out_has "trained 12 steps"
before=$(sums)

# ---- read-only folder
if [ $mounted = 1 ]; then
  mount -o remount,ro "$mnt"
  readonly_err="Read-only file system"
else
  chmod -R a-w "$mnt"
  readonly_err="Permission denied"
fi
# refused before any work (a usage error, exit 2), naming the folder or file
run_rc 2 train --resume --out "$run" --data "$T/fra.txt" --max-steps 18 --no-progress
err_has "--out '$run': the folder is not writable"
run_rc 2 train "${small[@]}" --data "$T/fra.txt" --max-steps 6 --out "$run" --overwrite
err_has "--out '$run': the folder is not writable"
run_rc 2 eval --model "$run" --data "$T/fra.txt" --no-progress --hyp-out "$mnt/hyp.txt"
err_has "$mnt/hyp.txt" "$readonly_err"
[ "$(sums)" = "$before" ] || fail "a read-only folder was changed"
loads
if [ $mounted = 1 ]; then mount -o remount,rw "$mnt"; else chmod -R u+w "$mnt"; fi
run_rc 0 train --resume --out "$run" --data "$T/fra.txt" --max-steps 18 --no-progress
out_has "trained 18 steps"
no_temps
echo "fault writes: ok"
