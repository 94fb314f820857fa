#!/usr/bin/env bash
# chaos.sh: run the seeded chaos harness (tests/chaos) for CHAOS_SECONDS
# (default 60) on each side:
#
#   patched  - the patched franz-go in upstream/franz-go (the repo's go.work):
#              seed % 18 picks the configuration (idempotent, non-idempotent
#              with 1 in flight, or transactional, times raw kgo with
#              FailPartitionOnProduceFailure and the test-side recovery
#              protocol, or korder with one of five policy sets); each seed
#              runs it, then the same configuration and faults with the
#              option off and the naive "re-produce on failure" recovery (the
#              baseline). Any violation with the option on fails the script.
#   pristine - pristine franz-go v1.22.3 (materialized with patchset.sh and a
#              temporary go.work, -tags pristine): only the naive baseline can
#              run; it must report violations, or the harness proves nothing.
#
# Each side prints one line per run ("chaos run:"), one line per
# configuration ("chaos config": option on and baseline, or baseline only on
# the pristine side), and the summary line ("chaos: runs=N violations=N
# lost=N duplicates=N unfinished_promises=N baseline_violations=N").
#
# Env: CHAOS_SECONDS (per side), CHAOS_SEED (first seed, default 1000, the
# same on both sides), CHAOS_KINDS (only these producer kinds, e.g.
# "idempotent transactional"; default all), CHAOS_KORDER_BOUND (n: korder's
# client gets kgo.MaxBufferedPartitionRecords(n), so that a small n drives
# its stalled-partition path), CHAOS_OUT (where histories of violating runs
# are kept; default a temporary directory that is removed).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${CHAOS_SECONDS:-60}
export CHAOS_SECONDS=$secs CHAOS_SEED=${CHAOS_SEED:-1000}
timeout=$((secs * 2 + 300))s
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CHAOS_OUT=${CHAOS_OUT:-$work/out}

rc=0
echo "chaos.sh: patched tree, ${secs}s, seeds from $CHAOS_SEED (histories: $CHAOS_OUT)"
if ! (cd "$root" && go test -race -count=1 -v -run 'TestChaos$' -timeout "$timeout" ./tests/chaos >"$work/patched" 2>&1); then
	rc=1
fi
grep -E '^(chaos|  |---|FAIL|ok|panic)' "$work/patched" || cat "$work/patched"
patched=$(grep -E '^chaos: runs=' "$work/patched" || true)
[ -n "$patched" ] || { echo "chaos.sh: FAIL: no summary line from the patched run" >&2; rc=1; }

echo
echo "chaos.sh: pristine franz-go v1.22.3 (baseline only, -tags pristine), ${secs}s, seeds from $CHAOS_SEED"
bash "$root/upstream/patchset.sh" pristine "$work" 2>/dev/null
if ! (cd "$root" && GOWORK="$work/go.work" go test -race -count=1 -v -tags pristine -run 'TestChaos$' -timeout "$timeout" ./tests/chaos >"$work/pristine" 2>&1); then
	echo "chaos.sh: FAIL: the pristine baseline run failed:" >&2
	tail -30 "$work/pristine" >&2
	rc=1
fi
grep -E '^(chaos run|chaos config|chaos baseline|chaos:)' "$work/pristine" || true
pristine=$(grep -E '^chaos: runs=' "$work/pristine" || true)
pbase=$(sed -n 's/.*baseline_violations=\([0-9]*\).*/\1/p' <<<"$pristine")
if [ -z "$pbase" ] || [ "$pbase" -eq 0 ]; then
	echo "chaos.sh: FAIL: the naive baseline reported no violation on pristine franz-go: the harness cannot detect the bug" >&2
	rc=1
fi

echo
echo "patched:  $patched"
echo "pristine: $pristine"
exit $rc
