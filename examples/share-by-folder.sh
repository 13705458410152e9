#!/usr/bin/env bash
# Five memories A-E share one folder, end to end (README, "Your first lessons"; docs/reference.md, "Sharing").
# Everything happens in a temporary folder, removed at the end.  Needs neverestctl on PATH.
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shared=$work/shared project=$work/project
mkdir -p "$project"
ctl() { local who=$1; shift; neverestctl --home "$work/$who" "$@"; }
# Five brand-new memories have tested nothing yet, so under the default trust policy ("earned") they count
# nobody's support until it is earned.  A team names its members instead (README, "Sharing with a team").
unset NEVEREST_TRUST
for m in A B C D E; do ctl $m init >/dev/null; done
for m in A B C D E; do
  for other in A B C D E; do
    [ "$m" = "$other" ] || ctl $m trust add "$(ctl $other id --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["origin"])')" >/dev/null
  done
done
echo "== each memory names the other four"
ctl A trust list
sync_all() { for _ in 1 2; do for m in A B C D E; do ctl $m folder sync "$shared" >/dev/null; done; done; }
err=(--kind error --title "pip install -e ." --happened "fails without --no-build-isolation")

echo "== A meets the same error in two sessions, opts its project in, sleeps"
export NEVEREST_NOW=2026-03-01T09:00:00Z
ctl A remember "${err[@]}" --cwd "$project" --session a1 >/dev/null
ctl A remember "${err[@]}" --cwd "$project" --session a2 >/dev/null
ctl A publish --project "$project"
ctl A sleep >/dev/null
ctl A lessons

echo "== after a sync, B-E hold it as a candidate"
sync_all
ctl B lessons

echo "== C, D and E meet the error in their own sessions, sleep, and confirm"
export NEVEREST_NOW=2026-03-02T03:00:00Z
for m in A B C D E; do ctl $m sleep >/dev/null; done   # received candidates make their predictions
export NEVEREST_NOW=2026-03-03T10:00:00Z
for m in C D E; do ctl $m remember "${err[@]}" --session "${m}1" >/dev/null; done
export NEVEREST_NOW=2026-03-04T03:00:00Z
for m in C D E; do ctl $m sleep >/dev/null; done
sync_all
for m in A B C D E; do echo -n "$m: "; ctl $m lessons | tail -n +2; done   # rows without the header

echo "== one prediction window (14 days) after B-E first held it: common at all five"
export NEVEREST_NOW=2026-03-16T03:00:00Z
for m in A B C D E; do echo -n "$m: "; ctl $m lessons | tail -n +2; done

echo "== 91 days later, with no new support"
export NEVEREST_NOW=2026-06-03T03:00:00Z
for m in A B C D E; do echo -n "$m: "; ctl $m lessons | tail -n +2; done   # rows without the header
hash=$(ctl A lessons --json | python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[0])["hash"])')
ctl B show "$hash"

echo "== A revokes it; after a sync it is gone everywhere"
origin_a=$(ctl A id --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["origin"])')
cp "$shared/$origin_a.jsonl" "$work/old-A.jsonl"
ctl A revoke "$hash"
sync_all
for m in A B C D E; do echo "$m: $(ctl $m lessons --json | wc -l) lesson(s)"; done

echo "== an old copy of A's file comes back: the lesson does not"
cp "$work/old-A.jsonl" "$shared/$origin_a.jsonl"
for m in B C D E; do ctl $m folder sync "$shared" >/dev/null; echo "$m: $(ctl $m lessons --json | wc -l) lesson(s)"; done
ctl B show "$hash" | sed -n 1,2p   # sed reads it all: no SIGPIPE for neverestctl
