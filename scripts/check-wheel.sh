#!/usr/bin/env bash
# Build the wheel and prove it as a user installs it: a clean venv, no `-e`, run from another
# directory. `make test` runs this before the test suite (an editable install hides a package
# missing from the wheel). Usage: scripts/check-wheel.sh [PYTHON]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${1:-python3}"
WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

echo "check-wheel: building the wheel"
# from a copy of the tracked (and new, not ignored) files: a stale build/ folder in the tree
# would otherwise put modules that no longer exist into the wheel
mkdir "$WORK/src"
(cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 tar -cf - 2>/dev/null) | tar -xf - -C "$WORK/src"
"$PY" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src" >/dev/null
WHEEL="$(ls "$WORK"/dist/simulmt-*.whl)"
"$PY" -m venv "$WORK/venv"
BIN="$WORK/venv/bin"
"$BIN/pip" install -q torch==2.13.0 2>&1 | grep -v "is ignored: it is neither" || true
"$BIN/pip" install -q "$WHEEL" 2>&1 | grep -v "is ignored: it is neither" || true
"$BIN/pip" install -q "$WORK/src/examples/simulmt-policy-example" 2>&1 | grep -v "is ignored: it is neither" || true

cd "$WORK"  # nothing of the source tree on the path from here
echo "check-wheel: importing every subpackage"
"$BIN/python" - <<'PY'
import importlib, pkgutil
import simulmt, simulmt.policies, simulmt.server, simulmt.eval
assert "site-packages" in simulmt.__file__, simulmt.__file__
names = []
OPTIONAL = {"simuleval", "omnisteval"}  # integrations whose extras a plain install lacks
for pkg in (simulmt, simulmt.policies, simulmt.server, simulmt.eval):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as e:
            if e.name not in OPTIONAL:
                raise
        names.append(info.name)
assert "simulmt.restore" in names, names
print(f"check-wheel: {len(names)} modules import")
PY

echo "check-wheel: the plugin registers through its entry point"
"$BIN/simulmt" policies | grep -q "^wait-k-stride" || { echo "plugin policy missing"; exit 1; }

echo "check-wheel: simulmt translate"
OUT="$(echo "Ich habe gestern einen Brief geschrieben ." | "$BIN/simulmt" translate --policy wait-k:k=3 --threads 1)"
echo "  $OUT"
[ -n "$(echo "$OUT" | tr -d '[:space:]')" ] || { echo "empty translation"; exit 1; }

echo "check-wheel: simulmt serve and /healthz"
PORT="$("$BIN/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$BIN/simulmt" serve --host 127.0.0.1 --port "$PORT" --threads 1 >"$WORK/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 240); do
  if "$BIN/python" -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$PORT/healthz', timeout=2).status == 200 else 1)" 2>/dev/null; then
    echo "check-wheel: /healthz answered 200"; kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
    echo "check-wheel: ok"; exit 0
  fi
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "serve exited:"; cat "$WORK/serve.log"; exit 1; }
  sleep 0.5
done
echo "serve did not answer /healthz in 120 s:"; cat "$WORK/serve.log"; exit 1
