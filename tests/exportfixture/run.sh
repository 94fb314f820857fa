#!/usr/bin/env bash
# run.sh: `make test-export`. Proves that a module can depend on the patched
# franz-go and on korder through `make export` alone: exports into a
# temporary directory, copies this fixture module beside the export, checks
# that nothing there names this checkout and that README.md shows the go.mod
# lines the export's README gives, then vets and tests the fixture with
# GOWORK=off (so neither go.work nor this repository is in play).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

bash "$root/upstream/export.sh" "$work/export" >/dev/null
mkdir "$work/fixture"
cp "$root"/tests/exportfixture/{go.mod,go.sum,*.go} "$work/fixture/"
cd "$work/fixture"
if [ -f ../export/franz-go/pkg/kfake/go.mod ]; then
	# The export carries the patched kfake: use it, as its README says.
	GOWORK=off go mod edit -replace github.com/twmb/franz-go/pkg/kfake=../export/franz-go/pkg/kfake
fi
if grep -r -l -F "$root" "$work" >/dev/null; then
	echo "test-export: FAIL: the export or the fixture refers to this checkout:" >&2
	grep -r -l -F "$root" "$work" >&2
	exit 1
fi
# README.md shows the go.mod lines that the export's README gives: the
# require block and the replace block.
gomod_lines() { awk '/^require \(/ { p = 1 } p { print } p && /^\)$/ { if (++n == 2) exit }' "$1"; }
if [ "$(gomod_lines "$root/README.md")" != "$(gomod_lines "$work/export/README.md")" ]; then
	echo "test-export: FAIL: the go.mod lines in README.md are not those of the export's README (upstream/export.sh); diff README.md export:" >&2
	diff <(gomod_lines "$root/README.md") <(gomod_lines "$work/export/README.md") >&2 || true
	exit 1
fi
echo "test-export: README.md shows the export's go.mod lines"
echo "test-export: make export into a temporary directory; tests/exportfixture built and tested from it alone (GOWORK=off)"
export GOWORK=off GOFLAGS=-mod=mod
go vet ./...
go test -race -count=1 -timeout 5m ./...
