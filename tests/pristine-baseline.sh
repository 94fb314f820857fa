#!/usr/bin/env bash
# pristine-baseline.sh: prove that the ordering tests can fail.
#
# Builds tests/failstop with -tags pristine (the new API shimmed out)
# against pristine franz-go v1.22.3 and runs the invariant tests there, then
# the issue 21 reproduction in tests/chaos. They must FAIL: on pristine upstream, a record produced after a failure is
# written, which is the bug the patch set fixes. If they pass there, they
# prove nothing, and this script fails.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run=${BASELINE_RUN:-TestInvariantInvalidRecord}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bash "$root/upstream/patchset.sh" pristine "$work"
echo "pristine-baseline: go test -tags pristine -run '$run' ./tests/failstop (against pristine v1.22.3; must fail)"
if (cd "$root" && GOWORK="$work/go.work" go test -race -count=1 -tags pristine -run "$run" ./tests/failstop >"$work/out" 2>&1); then
	cat "$work/out"
	echo "pristine-baseline: FAIL: the invariant tests pass on pristine upstream, so they cannot detect the bug" >&2
	exit 1
fi
if ! grep -q -- '--- FAIL: TestInvariant' "$work/out"; then
	cat "$work/out"
	echo "pristine-baseline: FAIL: the run failed, but not in an invariant test (build error?)" >&2
	exit 1
fi
echo "pristine-baseline: expected result: the test fails on pristine v1.22.3; its first failure lines (expected, not a problem):"
grep -E -- '_test.go:[0-9]+:' "$work/out" | head -3 | sed 's/^[[:space:]]*/    (expected on pristine) /'
echo "pristine-baseline: ok: pristine v1.22.3 violates the ordering invariant, as expected; the patched tree passes the same test in test-ours"

# Issue 21: pristine kgo and kfake write an unsure idempotent batch twice,
# in both variants of the reproduction.
echo "pristine-baseline: go test -tags pristine -run 'TestUnsureBatchWrittenOnce' ./tests/chaos (must fail, both variants)"
(cd "$root" && GOWORK="$work/go.work" go test -race -count=1 -tags pristine -run 'TestUnsureBatchWrittenOnce' ./tests/chaos >"$work/out" 2>&1) || true
if [ "$(grep -c -- '--- FAIL: TestUnsureBatchWrittenOnce/' "$work/out")" != 2 ]; then
	cat "$work/out"
	echo "pristine-baseline: FAIL: TestUnsureBatchWrittenOnce does not fail in both variants on pristine upstream, so it cannot detect the duplicate" >&2
	exit 1
fi
echo "pristine-baseline: ok: pristine v1.22.3 writes the unsure batch twice, as expected"
