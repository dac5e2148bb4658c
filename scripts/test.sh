#!/usr/bin/env bash
# `npm test`: the whole suite, in order — system packages, type check, lint and format, unit and
# integration tests (each file starts its own redis-server; three files at a time), `next build`,
# the launcher's start/stop, API, auth and fuzz tests against the built server (two files at a
# time), Playwright e2e in Debian's Chromium, and three chaos soaks side by side (45 s as
# configured by default; 30 s with a separate RDB-only claims Redis and retention.builds 1; 45 s
# on a Sentinel group). Every step runs under `timeout` so a hang fails fast. The last line is
# `N passed, N failed` (tests plus the check steps).
set -uo pipefail
shopt -s globstar nullglob
cd "$(dirname "$0")/.."
export NEXT_TELEMETRY_DISABLED=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
unset REDIS_URL CLAIMS_REDIS_URL

passed=0
failed=0
failures=()
log=$(mktemp)
details=$(mktemp)
together=$(mktemp -d)
trap 'rm -rf "$log" "$details" "$together"' EXIT

# A check step (type check, lint, build) counts as one test.
check() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name"
  local start=$SECONDS
  if timeout --kill-after=10 "$limit" "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("$name")
  fi
  echo "--- $name: $((SECONDS - start)) s"
}

# Check steps side by side: `together NAME LIMIT COMMAND…` queues one, `together_run` starts
# them all, waits, and reports each (its output, then pass or fail) in the order queued. Each
# keeps its own time limit. For steps that mostly wait (the soaks' chaos and drains) or use one
# core each (the static checks), not for the build, which keeps both busy.
queued_names=()
queued_commands=()
together() {
  queued_names+=("$1")
  queued_commands+=("$(printf '%q ' timeout --kill-after=10 "$2" "${@:3}")")
}
together_run() {
  local i pids=()
  for i in "${!queued_commands[@]}"; do
    (
      start=$SECONDS
      eval "${queued_commands[$i]}" >"$together/$i.log" 2>&1
      echo $? >"$together/$i.status"
      echo $((SECONDS - start)) >"$together/$i.seconds"
    ) &
    pids+=($!)
  done
  local start=$SECONDS
  wait "${pids[@]}"
  echo "--- ${#pids[@]} steps side by side: $((SECONDS - start)) s"
  for i in "${!queued_names[@]}"; do
    echo "=== ${queued_names[$i]} (ran side by side, $(cat "$together/$i.seconds") s)"
    cat "$together/$i.log"
    if [ "$(cat "$together/$i.status")" = 0 ]; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
      failures+=("${queued_names[$i]}")
    fi
  done
  queued_names=()
  queued_commands=()
}

# A test-runner step: its own pass/fail counts are added; a crash with no count is one failure.
suite() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log"
  local status=${PIPESTATUS[0]}
  echo "--- $name: $((SECONDS - start)) s"
  local p f
  # node:test prints "ℹ pass N" (spec) or "# pass N" (tap); Playwright prints "N passed" / "N failed".
  p=$(grep -aoE '^(ℹ|#) pass [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  f=$(grep -aoE '^(ℹ|#) fail [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  if [ -z "$p" ]; then
    p=$(grep -aoE '^ +[0-9]+ passed' "$log" | tail -1 | grep -oE '[0-9]+')
    f=$(grep -aoE '^ +[0-9]+ failed' "$log" | tail -1 | grep -oE '[0-9]+')
  fi
  passed=$((passed + ${p:-0}))
  failed=$((failed + ${f:-0}))
  if [ "$status" -ne 0 ]; then
    failures+=("$name (exit $status)")
    if [ "${f:-0}" -eq 0 ]; then failed=$((failed + 1)); fi
    # Repeated at the end, where a CI summary that shows only the tail still has them: node's
    # "failing tests" section (name and assertion message), or Playwright's numbered failures.
    {
      echo "--- $name"
      if grep -aq '^✖ failing tests:' "$log"; then
        sed -n '/^✖ failing tests:/,$p' "$log" | grep -avE '^ +at |^ *(code|actual|expected|operator|generatedMessage):' | head -40
      else
        grep -aE -A8 '^ +[0-9]+\) ' "$log" | head -40
      fi
      # What the e2e stack (launcher, web server, worker, Redis) logged last.
      if [ "$name" = "e2e (Playwright, Chromium)" ] && [ -f test-results/e2e/launcher.log ]; then
        echo "    last lines of the e2e stack's log (test-results/e2e/launcher.log):"
        tail -n 30 test-results/e2e/launcher.log | sed 's/^/    | /'
      fi
    } >>"$details"
  fi
}

# spec for the tests; then each file's time, slowest first (scripts/test-file-times.mjs).
NODE_TEST=(node --import tsx --test --test-reporter=spec --test-reporter-destination=stdout
  --test-reporter=./scripts/test-file-times.mjs --test-reporter-destination=stdout
  --test-force-exit --test-timeout=600000)

check "system packages (redis-server, faketime, strace, openssl, chromium, prometheus, alertmanager)" 1200 node --import tsx scripts/ensure-system-packages.ts
CHROMIUM_PATH=$(command -v chromium || echo /usr/bin/chromium)
export CHROMIUM_PATH
# The static checks side by side: each is one thread (about 20 s, 20 s and 15 s of CPU), so two
# cores finish the three in about half their sum.
together "type check (tsc)" 300 npx tsc --noEmit
together "lint (eslint)" 300 npx eslint .
together "format (prettier --check)" 120 npx prettier --check .
together "example Prometheus rules (promtool check rules)" 60 promtool check rules docs/prometheus-rules.yml
together_run
# Node 20's test runner takes no globs: bash expands them.
# Three files at a time: most of their time is waiting (TTLs, timers, stopped processes), and every
# file has its own Redis, ports and directories (754 s one at a time, 395–450 s two at a time,
# 305 s three at a time).
# The table after the suite (each file's time) shows the three lanes full: 960 s of tests ran in
# 362 s, the same with the slowest files started first (tried on 2026-12-05), so the order is
# not what bounds this step.
suite "unit and integration tests" 1500 "${NODE_TEST[@]}" --test-concurrency=3 test/unit/**/*.test.ts test/integration/**/*.test.ts
check "next build" 600 npx next build
# Two at a time too (free ports, own beds): 244 s one at a time, 162 s two at a time.
suite "launcher tests (npm start)" 900 "${NODE_TEST[@]}" --test-concurrency=2 test/launcher/**/*.test.ts
suite "e2e (Playwright, Chromium)" 900 npx playwright test
# The three soaks run side by side (each its own Redis servers, ports and directories; the load
# of the others is one more fault): about 90 s instead of about 6 min one after another.
# The chaos soak, short: kills, pauses, deploys and a Redis restart; its checker must count zero
# overlaps, lost triggers, corrupt publishes, stale claims and wrong pointers.
together "soak (45 s chaos, independent checker)" 300 node --import tsx scripts/soak.ts --seconds 45 --quick
# Issue 14's harder faults: the claims on their own server with RDB snapshots only (a crash loses
# seconds of fences and pointers), one old build kept (reproduced hashes meet the pruner), and
# steps whose input reads fail with EIO one time in five (retried, never a lost request).
together "soak (30 s, separate RDB-only claims Redis, retention.builds 1, input EIO p=0.2)" 300 node --import tsx scripts/soak.ts --seconds 30 --quick --claims separate --claims-persistence rdb --retention-builds 1 --input-faults 0.2
# Failover: the main Redis (claims too) as a Sentinel group — a forced failover with the old
# primary still up, then a killed primary; triggers count once both replicas have them.
together "soak (45 s, Sentinel group: forced failover and a killed primary)" 300 node --import tsx scripts/soak.ts --seconds 45 --quick --redis sentinel
together_run

echo
if [ -s "$details" ]; then
  echo "Failure details (repeated from above):"
  cat "$details"
fi
if [ ${#failures[@]} -gt 0 ]; then
  echo "Failed steps:"
  printf '  - %s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ ${#failures[@]} -eq 0 ]
