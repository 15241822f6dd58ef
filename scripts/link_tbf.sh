#!/usr/bin/env bash
# Kernel link shaping, measured (issue: links that behave like the paper's network): two network
# namespaces joined by a veth pair, first unshaped and then with a `tbf` rate limit on both ends
# (this kernel has no netem, so no added latency: tbf shapes rate only). Frames of the sizes an
# inkling-mini (1 KB a row) and an inkling (24 KB a row) fleet send are timed across each
# (scripts/tbf_probe.py); `moefleet-harness links` tabulates them against bytes x 8 / rate.
# Needs root (or an unshare -rn that allows veth); says so and exits 0 where it cannot.
# Usage: scripts/link_tbf.sh OUT_DIR [RATE, default 1gbit] [BURST, default 64kb]
set -euo pipefail
out=${1:?out dir}; rate=${2:-1gbit}; burst=${3:-64kb}
sizes=1040,16640,24608,196864,393728,1048576
reps=${REPS:-30}
mkdir -p "$out"
a=mf-tbf-a-$$; b=mf-tbf-b-$$
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
if ! ip netns add "$a" 2>/dev/null; then
  echo "link_tbf: cannot create network namespaces here (needs root); nothing measured" >&2
  exit 0
fi
ip netns add "$b"
ip link add va netns "$a" type veth peer name vb netns "$b"
ip -n "$a" addr add 10.77.0.1/24 dev va; ip -n "$b" addr add 10.77.0.2/24 dev vb
ip -n "$a" link set va up; ip -n "$b" link set vb up
ip -n "$a" link set lo up; ip -n "$b" link set lo up
here=$(dirname "$0")
measure() {
  local name=$1 port=$2
  ip netns exec "$b" python3 "$here/tbf_probe.py" serve "$port" &
  local srv=$!
  sleep 0.5
  ip netns exec "$a" python3 "$here/tbf_probe.py" probe 10.77.0.2 "$port" "$sizes" "$reps" >"$out/$name.json"
  wait "$srv"
}
measure veth 5601
for ns_dev in "$a va" "$b vb"; do
  set -- $ns_dev
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency 50ms
done
measure tbf 5602
ip netns exec "$a" tc -s qdisc show dev va >"$out/tc.txt"
cat >"$out/link.json" <<JSON
{"rate": "$rate", "burst": "$burst", "sizes": "$sizes", "reps": $reps, "kernel": "$(uname -r)", "load_average": "$(cut -d' ' -f1-3 /proc/loadavg)"}
JSON
echo "link_tbf: wrote $out/veth.json, tbf.json, link.json" >&2
