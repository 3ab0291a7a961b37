#!/usr/bin/env bash
# The files of issue 41 that crashed or exhausted `cachalot replay`, run against a build of the
# tool under a 1 GiB address-space limit (ulimit -v) and a time limit: each must end with exit
# status 1 (2 for a command line) and one error line naming the limit met, never a panic, an
# abort or a kill; and a long CSV's replay must take no more memory than a short one's. It prints
# each run's peak resident memory. Usage: bombs.sh PATH/TO/cachalot
set -u
bin=$(realpath "${1:?usage: bombs.sh PATH/TO/cachalot}")
here=$(dirname "$(realpath "$0")")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0

python3 - "$dir" <<'PY'
import gzip, struct, sys
d = sys.argv[1]
open(f"{d}/d.pickle", "wb").write(b"\x80\x02" + b"]" * 10000 + b"a" * 9999 + b".")
open(f"{d}/doubled.pickle", "wb").write(b"\x80\x02X" + struct.pack("<I", 1024) + b"B" * 1024 + b"2\x86" * 40 + b".")
mib = 1 << 20
open(f"{d}/memo.pickle", "wb").write(b"\x80\x02](X" + struct.pack("<I", mib) + b"m" * mib + b"q\x00" + b"h\x00" * 2999 + b"e.")
for name, byte, mibs in [("zeros.csv.gz", b"\0", 1024), ("newlines.csv.gz", b"\n", 1025)]:
    with gzip.open(f"{d}/{name}", "wb", compresslevel=1) as f:
        chunk = byte * mib
        for _ in range(mibs):
            f.write(chunk)
PY

# expect STATUS NEEDLE -- COMMAND...: runs COMMAND limited, checks its status and stderr.
expect() {
  local want=$1 needle=$2; shift 3
  local err=$dir/err
  /usr/bin/time -f %M -o "$dir/rss" bash -c 'ulimit -v 1048576; exec timeout 120 "$@"' sh "$@" >/dev/null 2>"$err"
  local got=$?
  local rss; rss=$(tail -n 1 "$dir/rss")
  if [ "$got" -eq "$want" ] && head -n 1 "$err" | grep -q '^cachalot: error: ' && grep -qF -- "$needle" "$err"; then
    printf 'ok    %6d MB peak  %s\n' $((rss / 1024)) "$*"
  else
    printf 'FAIL  exit %s (want %s), %d MB peak: %s\n      %s\n' "$got" "$want" $((rss / 1024)) "$*" "$(head -c 300 "$err")"
    failed=1
  fi
}

cd "$dir"
expect 1 "nests values deeper than 64 (the limit on nesting); raise the limit with --max-depth N" -- "$bin" replay d.pickle
expect 1 "nests values deeper than 64" -- "$bin" compare d.pickle
expect 1 "nests values deeper than 64" -- "$bin" advise d.pickle
expect 1 "values come to more than 1073741824 bytes written out" -- "$bin" replay doubled.pickle
expect 1 "values come to more than 1073741824 bytes written out" -- "$bin" replay memo.pickle
expect 1 "a line longer than 65536 bytes" -- "$bin" replay zeros.csv.gz
expect 1 "more than 1073741824 bytes of text (the limit on bytes read); raise the limit with --max-bytes SIZE" -- "$bin" replay newlines.csv.gz
expect 1 "a line longer than 65536 bytes" -- "$bin" replay /dev/zero
expect 1 "stdin: invalid trace, line 1: header lacks the 'Time' column" -- bash -c 'yes | "$0" replay -' "$bin"
expect 2 "argument 2 is not valid UTF-8" -- "$bin" replay $'\xff'
expect 2 "CACHALOT_ALLOC_CONF is not valid UTF-8" -- env CACHALOT_ALLOC_CONF=$'policy:pytorch\xff' "$bin" replay mixed_fc_conv

# A replay's memory follows live blocks, not the file's length: gpt2_train's steps repeated to
# 300,000 and to 3,000,000 rows (the same blocks live at once) must peak within 24 MB of each
# other; operations held in memory took 40 bytes each, 108 MB more for the longer file.
rss_of() {
  python3 "$here/long_trace.py" "$1" > "$dir/long.csv" || return 1
  /usr/bin/time -f %M -o "$dir/rss" bash -c 'ulimit -v 1048576; exec timeout 300 "$@"' sh \
    "$bin" replay "$dir/long.csv" --passes 3 >/dev/null 2>"$dir/err" || { head -c 300 "$dir/err"; return 1; }
  tail -n 1 "$dir/rss"
}
if short=$(rss_of 300000) && long=$(rss_of 3000000) && [ $((long - short)) -lt $((24 * 1024)) ]; then
  printf 'ok    %6d MB then %d MB peak  replay of 300,000 then 3,000,000 rows\n' $((short / 1024)) $((long / 1024))
else
  printf 'FAIL  replay of 300,000 then 3,000,000 rows: %s KB then %s KB peak\n' "${short:-?}" "${long:-?}"
  failed=1
fi
exit $failed
