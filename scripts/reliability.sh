#!/usr/bin/env bash
# The reliability records: faults under load and the soak, against 11-role inkling-mini fleets on
# this machine, and the reliability table rendered from them.
#
#   scripts/reliability.sh [OUT]     (default results/reliability-YYYYMMDD; make reliability)
#
# Each fault runs against a fleet of its own (`moefleet-harness faults`, one directory per fault
# under OUT/faults/), so every measured recovery is a first one: repeated losses within
# --max-recoveries' ten-minute window back off 1, 2, 4 ... s by design. FAULTS lists them
# (default: kill and SIGSTOP of a middle role and of the last role, and a kill of role 1), each with
# STREAMS streams in flight (default 88). The cut
# link needs network namespaces (`ip netns`, root): role 6 runs in one, joined to the rest by a
# veth pair, and the link is taken down from inside, for each of CUTS seconds (default 2, shorter
# than the 5 s stall bound, and 10, longer); without namespaces it is skipped with the reason in
# OUT/faults/cut.skipped. The host gone (part `gone`): the same fleet with role 6 in one namespace
# and a spare (`moefleet spare`) in a second, listed in the fleet file; role 6's namespace is cut
# off for GONE_S seconds (default 30), and the fleet must be ready through the spare (after
# `--spare-after-s` 5) before it returns; OUT/faults/gone-role-6.log then says how the returning
# role left. Then the soak (`moefleet-harness soak`,
# SOAK_S seconds, default 1800, at 176 streams with 2x bursts of 60 s every 300 s) in OUT/soak.
# Finally OUT/RELIABILITY.md: the table from these records and the wire fuzzing record FUZZ. PARTS
# (default "faults cut gone soak") runs only some; the table is rendered when all four ran.
set -euo pipefail

cd "$(dirname "$0")/.."
. scripts/fleet.sh
OUT=${1:-results/reliability-$(date +%Y%m%d)}
PARTS=${PARTS:-"faults cut gone soak"}
FAULTS=${FAULTS:-"kill:5 stop:5 kill:10 stop:10 kill:1"}
SOAK_S=${SOAK_S:-1800}
STREAMS=${STREAMS:-88}
CUTS=${CUTS:-"2 10"}
GONE_S=${GONE_S:-30}
FUZZ=${FUZZ:-results/fuzz-wire-20261201/record.json}
PRESET=inkling-mini
ROLES=11
bin=${BIN:-target/release}
[ -x "$bin/moefleet" ] && [ -x "$bin/moefleet-harness" ] || { echo "build first: make build (or set BIN)" >&2; exit 1; }
mkdir -p "$OUT/faults"

NS="" VETH="" NS2="" VETH2=""
cleanup() {
  fleet_stop
  for p in ${HAND_ROLES:-}; do kill -KILL "$p" 2>/dev/null || true; done
  [ -n "$VETH" ] && ip link del "$VETH" 2>/dev/null || true
  [ -n "$NS" ] && ip netns del "$NS" 2>/dev/null || true
  [ -n "$VETH2" ] && ip link del "$VETH2" 2>/dev/null || true
  [ -n "$NS2" ] && ip netns del "$NS2" 2>/dev/null || true
}
trap cleanup EXIT

dirs=()
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
part faults || FAULTS=""
for f in $FAULTS; do
  d="$OUT/faults/${f/:/-}"
  fleet_start "$OUT/faults/${f/:/-}.log" "$bin/moefleet" --preset "$PRESET" --roles "$ROLES"
  "$bin/moefleet-harness" faults --url "$FLEET_URL" --out "$d" --fault "$f" \
    --streams "$STREAMS" --prompts 8 --min-tokens 16 --max-tokens 48
  fleet_stop
  dirs+=(--faults "$d")
done

# the cut link: role 6 in a namespace, the others on this side of a veth pair
n=$(( $$ % 200 + 20 ))
NS=mfcut$$ VETH=mfh$(( $$ % 10000 )) PEER=mfp$(( $$ % 10000 ))
# make_ns NS VETH PEER N: a namespace joined to this one by a veth pair, 10.77.N.1 here and
# 10.77.N.2 there, its default route through here (so it reaches other namespaces too)
make_ns() {
  ip netns add "$1" 2>/dev/null && ip link add "$2" type veth peer name "$3" \
    && ip link set "$3" netns "$1" \
    && ip addr add "10.77.$4.1/24" dev "$2" && ip link set "$2" up \
    && ip -n "$1" addr add "10.77.$4.2/24" dev "$3" && ip -n "$1" link set "$3" up \
    && ip -n "$1" link set lo up && ip -n "$1" route add default via "10.77.$4.1"
}
# hand_fleet NAME BASE [EXTRA]: OUT/faults/NAME-fleet.toml (role 6 in $NS at 10.77.$n.2, the
# others here at 10.77.$n.1, on ports BASE + rank; then EXTRA), and ranks 1.. started by hand
# (OUT/faults/NAME-role-K.log, their pids in HAND_ROLES)
hand_fleet() {
  fleet="$OUT/faults/$1-fleet.toml"
  : >"$fleet"
  for r in $(seq 0 $((ROLES - 1))); do
    host=10.77.$n.1
    [ "$r" = 6 ] && host=10.77.$n.2
    printf '[[role]]\nrank = %d\naddr = "%s:%d"\n\n' "$r" "$host" $(($2 + r)) >>"$fleet"
  done
  if [ -n "${3:-}" ]; then printf '%s\n' "$3" >>"$fleet"; fi
  HAND_ROLES=""
  for r in $(seq 1 $((ROLES - 1))); do
    if [ "$r" = 6 ]; then
      ip netns exec "$NS" "$bin/moefleet" role --rank "$r" --preset "$PRESET" --fleet "$fleet" \
        >"$OUT/faults/$1-role-$r.log" 2>&1 </dev/null &
    else
      "$bin/moefleet" role --rank "$r" --preset "$PRESET" --fleet "$fleet" \
        >"$OUT/faults/$1-role-$r.log" 2>&1 </dev/null &
    fi
    HAND_ROLES="$HAND_ROLES $!"
  done
}
netns=no
if { part cut || part gone; } && make_ns "$NS" "$VETH" "$PEER" "$n"; then
  netns=yes
fi
if ! part cut; then
  :
elif [ "$netns" = yes ]; then
  hand_fleet cut 21000
  fleet_start "$OUT/faults/cut.log" "$bin/moefleet" --preset "$PRESET" --fleet "$fleet"
  cuts=()
  for c in $CUTS; do cuts+=(--fault "cut:$c"); done
  "$bin/moefleet-harness" faults --url "$FLEET_URL" --out "$OUT/faults/cut" "${cuts[@]}" \
    --cut-cmd "ip -n $NS link set $PEER down" --heal-cmd "ip -n $NS link set $PEER up" \
    --streams "$STREAMS" --prompts 8 --min-tokens 16 --max-tokens 48
  fleet_stop
  for p in $HAND_ROLES; do kill -INT "$p" 2>/dev/null || true; done
  sleep 2
  dirs+=(--faults "$OUT/faults/cut")
else
  echo "cannot make a network namespace pair here (ip netns add/veth failed); the cut link is not measured" \
    | tee "$OUT/faults/cut.skipped" >&2
fi

# the host gone: role 6 in a namespace as for the cut, a spare in a second namespace
if ! part gone; then
  :
elif [ "$netns" = yes ]; then
  m=$(( n + 1 ))
  NS2=mfspare$$ VETH2=mfs$(( $$ % 10000 )) PEER2=mfq$(( $$ % 10000 ))
  make_ns "$NS2" "$VETH2" "$PEER2" "$m"
  spare="10.77.$m.2:22100"
  hand_fleet gone 22000 "$(printf '[[spare]]\naddr = "%s"\n' "$spare")"
  ip netns exec "$NS2" "$bin/moefleet" spare --listen "$spare" \
    >"$OUT/faults/gone-spare.log" 2>&1 </dev/null &
  HAND_ROLES="$HAND_ROLES $!"
  fleet_start "$OUT/faults/gone.log" "$bin/moefleet" --preset "$PRESET" --fleet "$fleet" \
    --spare-after-s 5
  "$bin/moefleet-harness" faults --url "$FLEET_URL" --out "$OUT/faults/gone" --fault "gone:$GONE_S" \
    --cut-cmd "ip -n $NS link set $PEER down" --heal-cmd "ip -n $NS link set $PEER up" \
    --streams "$STREAMS" --prompts 8 --min-tokens 16 --max-tokens 48
  sleep 5 # the returning role asks role 0 for the roster and leaves
  fleet_stop
  for p in $HAND_ROLES; do kill -INT "$p" 2>/dev/null || true; done
  sleep 2
  dirs+=(--faults "$OUT/faults/gone")
else
  echo "cannot make network namespaces here (ip netns add/veth failed); the host gone is not measured" \
    | tee "$OUT/faults/gone.skipped" >&2
fi

if part soak; then
  fleet_start "$OUT/soak.log" "$bin/moefleet" --preset "$PRESET" --roles "$ROLES"
  "$bin/moefleet-harness" soak --url "$FLEET_URL" --out "$OUT/soak" --duration-s "$SOAK_S"
  fleet_stop
fi

[ "$PARTS" = "faults cut gone soak" ] || exit 0
"$bin/moefleet-harness" reliability "${dirs[@]}" --soak "$OUT/soak" --fuzz "$FUZZ" \
  | tee "$OUT/RELIABILITY.md"
