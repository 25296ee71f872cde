#!/usr/bin/env bash
# Runs mull's turn bench and the AI SDK peer side by side, interleaved, in one run, and prints
# one table: µs per text chunk, CPU, peak RSS, and mull's time as a share of the AI SDK's
# without logging (goal: at most 1/10).
#
#   bench/peers.sh [REPS]            (default 5)
#
# Environment:
#   PEER_DIR    an installed copy of the peer harness (default /work/peer; if it has no
#               aisdk/node_modules, the harness is copied from PEER_SRC into a scratch folder
#               and installed there with npm)
#   PEER_SRC    where the harness lives (default ../shared/peer-bench next to the repo)
#   QUIET_WAIT  longest wait, in seconds, for a quiet machine before measuring anyway (600)
#   OUT         where raw rows and the table go (default a new scratch folder)
set -euo pipefail

REPS=${1:-5}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PEER_SRC=${PEER_SRC:-$ROOT/../shared/peer-bench}
PEER_DIR=${PEER_DIR:-/work/peer}
QUIET_WAIT=${QUIET_WAIT:-600}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

if [ ! -d "$PEER_DIR/aisdk/node_modules" ]; then
  PEER_DIR=$(mktemp -d)
  echo "installing the AI SDK peer into $PEER_DIR" >&2
  cp -r "$PEER_SRC/." "$PEER_DIR"
  (cd "$PEER_DIR/aisdk" && npm install --no-audit --no-fund >&2)
fi

echo "building mull-bench (release)" >&2
(cd "$ROOT" && cargo build --release -q -p mull-bench)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BENCH=$TARGET/release/mull-bench

WAIT_QUIET=$PEER_SRC/wait-quiet.sh
[ -x "$WAIT_QUIET" ] || WAIT_QUIET=$PEER_DIR/wait-quiet.sh
echo "waiting up to ${QUIET_WAIT}s for a quiet machine" >&2
if QUIET=$(bash "$WAIT_QUIET" "$QUIET_WAIT"); then :; fi
echo "$QUIET" >&2

read -r LOAD_START _ < /proc/loadavg
read -r _ u n s i w x y z _ < /proc/stat
BUSY0=$((u + n + s + x + y + z)); TOTAL0=$((u + n + s + i + w + x + y + z))
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)

for rep in $(seq 1 "$REPS"); do
  echo "rep $rep/$REPS: mull" >&2
  "$BENCH" turns --reps 1 --json --raw "$OUT/mull.jsonl" > /dev/null
  echo "rep $rep/$REPS: AI SDK" >&2
  (cd "$PEER_DIR/aisdk" && node run.mjs --reps 1 --modes cold --logs none,chunk \
    --out "$OUT/aisdk.jsonl" > /dev/null 2>&1)
done

read -r LOAD_END _ < /proc/loadavg
read -r _ u n s i w x y z _ < /proc/stat
BUSY1=$((u + n + s + x + y + z)); TOTAL1=$((u + n + s + i + w + x + y + z))
BUSY_PCT=$((100 * (BUSY1 - BUSY0) / (TOTAL1 - TOTAL0)))

node - "$OUT" "$REPS" "$STARTED" "$QUIET" "$LOAD_START" "$LOAD_END" "$BUSY_PCT" <<'JS' | tee "$OUT/table.md"
const fs = require('node:fs');
const [out, reps, started, quiet, loadStart, loadEnd, busyPct] = process.argv.slice(2);
const rows = f => fs.readFileSync(`${out}/${f}`, 'utf8').trim().split('\n').map(JSON.parse);
const mull = rows('mull.jsonl');
const peer = rows('aisdk.jsonl');
const median = xs => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '—');
console.log(`run started ${started}, ${reps} reps interleaved (mull a,b,c then AI SDK a,b,c × none,chunk), ${quiet}`);
console.log(`load1 ${loadStart} at start, ${loadEnd} at end; whole machine ${busyPct}% busy over the run (both cores)`);
console.log(`AI SDK: node ${peer[0].node}, cold; mull: release build, every chunk logged (group commit)`);
console.log('');
console.log('| scenario | mull µs/chunk | mull wall ms | mull cpu ms | mull RSS MiB | AI SDK no-log µs/chunk | AI SDK insert/chunk µs/chunk | AI SDK cpu ms (no log) | AI SDK RSS MiB (no log) | mull ÷ AI SDK no-log | ≤ 1/10 | foreign % mull / AI SDK |');
console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|');
for (const sc of ['a', 'b', 'c']) {
  const m = mull.filter(r => r.scenario === sc);
  const none = peer.filter(r => r.scenario === sc && r.log === 'none');
  const chunk = peer.filter(r => r.scenario === sc && r.log === 'chunk');
  if (!m.length || !none.length) continue;
  const mu = median(m.map(r => r.us_per_text_chunk));
  const nu = median(none.map(r => r.usPerTextChunk));
  const cu = chunk.length ? median(chunk.map(r => r.usPerTextChunk)) : NaN;
  const ratio = mu / nu;
  console.log(
    `| ${sc} | ${f(mu, 2)} | ${f(median(m.map(r => r.wall_ms)))} | ${f(median(m.map(r => r.cpu_ms)))} | ${f(median(m.map(r => r.peak_rss_mib)))} | ${f(nu, 2)} | ${f(cu, 2)} | ${f(median(none.map(r => r.cpuMs)))} | ${f(median(none.map(r => r.maxRssKiB_time)) / 1024)} | 1/${f(1 / ratio, 1)} | ${ratio <= 0.1 ? 'met' : 'missed'} | ${f(median(m.map(r => r.foreign_busy_pct)), 0)} / ${f(median(none.map(r => r.foreignBusyPct)), 0)} |`,
  );
}
console.log('');
console.log(`raw rows: ${out}/mull.jsonl, ${out}/aisdk.jsonl`);
JS
