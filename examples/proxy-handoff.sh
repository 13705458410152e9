#!/usr/bin/env bash
# The proxy in front of two models, end to end (README, "Handing work from one model to another").
# Two stand-in models on 127.0.0.1 (examples/fake_model.py: an OpenAI-style one and an Anthropic-style one,
# each saying in its reply what it was handed) behind `neverestctl proxy`.  The person works with the first,
# corrects it, then moves to the second: the second is handed the first one's work.
# Everything happens in a temporary folder, removed at the end, with every process it started.
# Needs neverestctl and python on PATH (.venv/bin).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
export NEVEREST_HOME=$work/memory
neverestctl init >/dev/null
project=$work/shop && mkdir -p "$project"

# Two stand-in models, each answering with its replies in turn and keeping what it was handed in a file.
python "$here/fake_model.py" "I added a retry with backoff to the payment webhook handler.|Capped it at three tries." \
  "$work/gpt.handed" > "$work/gpt.port" &
pids+=($!)
python "$here/fake_model.py" "Added test_webhook_retry: it checks the third failure gives up." \
  "$work/claude.handed" > "$work/claude.port" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/gpt.port" ] && [ -s "$work/claude.port" ] && break; sleep 0.1; done
gpt=$(cat "$work/gpt.port") claude=$(cat "$work/claude.port")
proxy_port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
neverestctl proxy --listen "127.0.0.1:$proxy_port" --route "gpt=http://127.0.0.1:$gpt" \
  --route "claude=http://127.0.0.1:$claude" > "$work/proxy.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "neverest proxy on" "$work/proxy.out" 2>/dev/null && break; sleep 0.1; done
grep "neverest proxy on" "$work/proxy.out"

ask() {  # PATH MODEL TEXT: one call through the proxy naming the project, with the conversation so far with
         # that model (as a chat client sends it); prints the reply's text
  python - "$proxy_port" "$project" "$work/$2.history" "$@" <<'EOF'
import json, os, sys
import httpx
port, project, history, path, model, text = sys.argv[1:]
messages = json.load(open(history)) if os.path.exists(history) else []
messages.append({"role": "user", "content": text})
body = {"model": model, "max_tokens": 200, "messages": messages}
answer = httpx.post(f"http://127.0.0.1:{port}{path}", json=body, timeout=30,
                    headers={"x-neverest-project": project, "authorization": "Bearer sk-your-own-key"})
answer.raise_for_status()
data = answer.json()
reply = data["choices"][0]["message"]["content"] if "choices" in data else data["content"][0]["text"]
messages.append({"role": "assistant", "content": reply})
json.dump(messages, open(history, "w"))
print(reply)
EOF
}

echo; echo "== the person asks the first model (gpt-4o, OpenAI-style); what it was handed, then its reply"
ask /v1/chat/completions gpt-4o "The payment webhook fails when the bank is slow; add a retry."
echo "   handed: $(cat "$work/gpt.handed")"
echo; echo "== and corrects it"
ask /v1/chat/completions gpt-4o "No, not more than three tries: the bank bills each call."
echo; echo "== the person moves to a second model (claude-sonnet-4, Anthropic-style): it is handed the work"
ask /v1/messages claude-sonnet-4 "Carry on: add a test for the retry."
echo "-- what claude-sonnet-4 was handed (its system text):"
cat "$work/claude.handed"; echo
echo; echo "== the project log, as neverestctl relay prints it"
neverestctl relay --project "$project"
echo; echo "== what reached the memory from these calls, as episodes (the correction among them)"
neverestctl episodes
