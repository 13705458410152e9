#!/usr/bin/env bash
# Three daemons on 127.0.0.1 in temporary homes find each other by zeroconf (on loopback only),
# a lesson published on the first is shown arriving on the others, and everything is cleaned up.
# Needs neverestd and neverestctl on PATH (e.g. PATH=.venv/bin:$PATH).
set -euo pipefail
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
names=(A B C)
for m in "${names[@]}"; do
  mkdir -m 700 "$work/$m"
  neverestd --home "$work/$m" --listen 127.0.0.1:0 --mdns-interface 127.0.0.1 2>"$work/$m.log" &
  pids+=($!)
done
ctl() { local who=$1; shift; neverestctl --home "$work/$who" "$@"; }
for m in "${names[@]}"; do
  until ctl "$m" status >/dev/null 2>&1 && ctl "$m" status | grep -q "daemon       up"; do sleep 0.2; done
done
echo "== three daemons are up; waiting until A has found B and C by zeroconf"
until [ "$(ctl A peer list --json | wc -l)" -ge 2 ]; do sleep 0.5; done
ctl A peer list

echo "== A meets the same error twice, publishes its project, sleeps"
mkdir "$work/project"
err=(--kind error --title "pip install -e ." --happened "fails without --no-build-isolation" --cwd "$work/project")
ctl A remember "${err[@]}" --session s1 >/dev/null
ctl A remember "${err[@]}" --session s2 >/dev/null
ctl A publish --project "$work/project"
ctl A sleep | tail -1
ctl A lessons

echo "== no manual step: the round that follows the sleep has told B and C"
for m in B C; do echo "== $m now holds:"; ctl "$m" lessons; done
echo "== a round asked for now: already in sync, one small round trip each"
ctl A gossip
