#!/usr/bin/env bash
# Acceptance check for authentication (issue 14), as a user would see it on one machine:
# a first `edgellm daemon --model default` under a fresh $HOME, every RPC on a plain channel
# (no token), then the CLI with no flags. Usage: scripts/check_auth.sh [PORT] (default 50051;
# another port is passed as $EDGELLM_TARGET, which the CLI reads anyway).
set -u
cd "$(dirname "$0")/.."
PORT="${1:-50051}"
ROOT="$(mktemp -d)"
export HOME="$ROOT/home" EDGELLM_CACHE_DIR="$PWD/.cache"
mkdir -p "$HOME"
unset EDGELLM_TOKEN EDGELLM_HOME EDGELLM_CONFIG_DIR XDG_CONFIG_HOME
[ "$PORT" = 50051 ] && unset EDGELLM_TARGET || export EDGELLM_TARGET="127.0.0.1:$PORT"
PY="$PWD/.venv/bin/python"
E="$PWD/.venv/bin/edgellm"
"$E" daemon --model default --port "$PORT" >"$ROOT/daemon.log" 2>&1 &
DPID=$!
trap 'kill $DPID 2>/dev/null; wait $DPID 2>/dev/null; rm -rf "$ROOT"' EXIT
"$PY" - "$PORT" <<'PY'
import sys, time, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
ch = grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}")
for _ in range(180):
    try:
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1)
        if r.status == health_pb2.HealthCheckResponse.SERVING:
            break
    except grpc.RpcError:
        pass
    time.sleep(1)
else:
    sys.exit("daemon not serving after 180 s")
PY
echo "token file: $(stat -c '%a' "$HOME/.edgellm/token")"
echo "--- every RPC on a plain channel, without the token"
"$PY" - "$PORT" <<'PY'
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from edgellm.v1 import device_pb2
ch = grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}")
bad = 0
for m in device_pb2.DESCRIPTOR.services_by_name["DeviceDaemon"].methods:
    path = f"/edgellm.v1.DeviceDaemon/{m.name}"
    try:
        if m.client_streaming:
            ch.stream_unary(path)(iter([b""]), timeout=10)
        elif m.server_streaming:
            list(ch.unary_stream(path)(b"", timeout=10))
        else:
            ch.unary_unary(path)(b"", timeout=10)
        code = "OK"
    except grpc.RpcError as e:
        code = e.code().name
    bad += code != "UNAUTHENTICATED"
    print(f"{m.name:20s} {code}")
r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
print(f"{'Health/Check':20s} {health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)}")
sys.exit(bad)
PY
rc=$?
for cmd in "status" "generate --max-new-tokens 8 --temperature 0 Hello" "push .cache/artifacts/default" \
    "models" "telemetry --json"; do
    # shellcheck disable=SC2086
    "$E" $cmd >"$ROOT/out" 2>&1
    r=$?
    echo "edgellm $cmd: rc=$r"
    [ $r = 0 ] || { cat "$ROOT/out"; rc=1; }
done
exit $rc
