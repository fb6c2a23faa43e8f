#!/bin/bash
# What an S3 endpoint that accepts connections and never answers costs profd: its thread count
# before and after N `profctl list --timeout 1s` calls, and how long SIGTERM takes with an upload
# to it in flight. Usage: tests/bench/silent_store.sh BUILD_DIR [N=100]. Needs python3 and bc.
# Everything lives in a temporary folder, removed at the end.
set -u
build=$(cd "$1" && pwd)
calls=${2:-100}
work=$(mktemp -d /tmp/profd-silent.XXXXXX)
# The silent endpoint: listens with a deep backlog, never accepts, never answers.
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4096)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
time.sleep(100000)' "$work/port" &
listener=$!
until [ -s "$work/port" ]; do sleep 0.1; done
port=$(cat "$work/port")
ctl() { "$build/client/profctl" --target "unix:$work/run/profd.sock" "$@"; }
AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=y "$build/daemon/profd" --runtime_dir="$work/run" \
  --grpc_address=none --metrics_address=none --capture_dir="$work/captures" \
  --spool_dir="$work/spool" --store=s3://traces/p --s3_endpoint="http://127.0.0.1:$port" \
  --s3_path_style 2>"$work/profd.log" &
profd=$!
until ctl status >/dev/null 2>&1; do sleep 0.2; done
threads() { awk '/^Threads:/ {print $2}' "/proc/$profd/status"; }
echo "endpoint 127.0.0.1:$port never answers; profd threads at start: $(threads)"
for _ in $(seq "$calls"); do ctl --timeout 1s list >/dev/null 2>&1; done
echo "after $calls x 'profctl list --timeout 1s': $(threads) threads"
echo '{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":2}]}' \
  >"$work/t.json"
ctl import "$work/t.json" >/dev/null
sleep 2  # the upload is in flight
start=$(date +%s.%N)
kill -TERM "$profd"
wait "$profd"
end=$(date +%s.%N)
echo "SIGTERM with an upload in flight: profd exited after $(echo "$end - $start" | bc) s"
ls "$work/spool/pending" | sed 's/^/  left in pending\/ for the next start: /'
kill "$listener"
rm -rf "$work"
