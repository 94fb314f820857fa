#!/usr/bin/env bash
# export.sh DEST: `make export`. Writes, into DEST, plain directories that a
# user can commit into their own repository and point replace directives at:
#
#   DEST/franz-go            the patched franz-go, module github.com/twmb/franz-go
#                            (upstream/franz-go as it is on disk, without .git);
#                            with pkg/kfake in it if the patched kfake is
#                            materialized at upstream/franz-go/pkg/kfake (a
#                            module of its own, github.com/twmb/franz-go/pkg/kfake)
#   DEST/franz-go-ordered    a trimmed github.com/franz-go-ordered/franz-go-ordered
#                            holding only pkg/korder (no tests), with a go.mod
#                            requiring franz-go v1.22.3 and a go.sum
#   DEST/README.md           what it is, where it came from, the lines to add to
#                            your go.mod
#
# DEST is replaced if it holds a previous export (it has EXPORT-SOURCE); any
# other non-empty DEST is refused. Nothing in DEST refers to this checkout.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree=$root/upstream/franz-go

die() { printf 'export: %s\n' "$*" >&2; exit 1; }

[ $# -eq 1 ] && [ -n "$1" ] || die 'usage: export.sh DEST'
dest=$1
[ -d "$tree/.git" ] || die 'upstream/franz-go is not materialized; run: make patches-apply'
if [ -e "$dest" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
	[ -f "$dest/EXPORT-SOURCE" ] || die "$dest exists, is not empty and is not a previous export; refusing to overwrite it"
	rm -rf "$dest"
fi
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
case "$dest/" in
"$root"/*) echo "export: note: $dest is inside this checkout (fine for a try; for your service, export into its repository)" >&2 ;;
esac

version=$(awk '$1 == "version" { print $2 }' "$root/upstream/PIN")
dirty=
if [ -n "$(git -C "$tree" status --porcelain)" ]; then
	dirty=' (with uncommitted edits in upstream/franz-go)'
	echo "export: warning: upstream/franz-go has uncommitted edits; they are exported too" >&2
fi

# 1. The patched franz-go, and kfake if it is materialized inside it.
mkdir -p "$dest/franz-go"
tar -C "$tree" --exclude=.git -cf - . | tar -C "$dest/franz-go" -xf -
kfake=
if [ -f "$dest/franz-go/pkg/kfake/go.mod" ]; then
	kfake=1
fi

# 2. korder, trimmed: the package's non-test files (and any subpackages).
ko=$dest/franz-go-ordered
mkdir -p "$ko"
(cd "$root" && find pkg/korder -type f ! -name '*_test.go' ! -path '*/testdata/*' -print0 | tar --null -T - -cf -) | tar -C "$ko" -xf -
cat >"$ko/go.mod" <<EOF
// A trimmed copy of github.com/franz-go-ordered/franz-go-ordered holding only
// pkg/korder, written by its \`make export\`. Not published: require it at
// v0.0.0-00010101000000-000000000000 and replace it with this directory.
module github.com/franz-go-ordered/franz-go-ordered

go 1.26.0

require github.com/twmb/franz-go $version

// Lets this directory build on its own; ignored when it is a dependency (your
// module's own replace of github.com/twmb/franz-go applies then).
replace github.com/twmb/franz-go => ../franz-go
EOF
(cd "$ko" && GOWORK=off GOFLAGS=-mod=mod go mod tidy) || die 'go mod tidy failed for the korder module'
(cd "$ko" && GOWORK=off go build ./...) || die 'the exported korder module does not build'

# 3. Provenance and the README with the lines to use.
{
	echo "franz-go-ordered export"
	echo "repository commit: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
	echo "upstream: github.com/twmb/franz-go $version + $(grep -c -v -E '^[[:space:]]*(#|$)' "$root/patches/series") patches$dirty"
	echo "kfake: $([ -n "$kfake" ] && echo "patched, at franz-go/pkg/kfake" || echo "not included (not materialized)")"
} >"$dest/EXPORT-SOURCE"

kfake_lines=
if [ -n "$kfake" ]; then
	kfake_lines='	github.com/twmb/franz-go/pkg/kfake => ./third_party/franz-go-ordered/franz-go/pkg/kfake
'
fi
cat >"$dest/README.md" <<EOF
# franz-go-ordered export

Written by \`make export\` in franz-go-ordered; see EXPORT-SOURCE for the
commit it came from. Commit this directory into your repository; nothing in
it refers to the checkout it came from.

- \`franz-go/\`: github.com/twmb/franz-go $version with the franz-go-ordered
  patch series (\`kgo.FailPartitionOnProduceFailure\` and its recovery API)$([ -n "$kfake" ] && printf '%s' ', and the patched kfake in `franz-go/pkg/kfake`').
- \`franz-go-ordered/\`: the module github.com/franz-go-ordered/franz-go-ordered,
  trimmed to \`pkg/korder\`.

If this directory is \`third_party/franz-go-ordered\` in your module, add to
your go.mod (adjust the paths otherwise):

\`\`\`
require (
	github.com/twmb/franz-go $version
	github.com/franz-go-ordered/franz-go-ordered v0.0.0-00010101000000-000000000000
)

replace (
	github.com/twmb/franz-go => ./third_party/franz-go-ordered/franz-go
	github.com/franz-go-ordered/franz-go-ordered => ./third_party/franz-go-ordered/franz-go-ordered
${kfake_lines})
\`\`\`

then \`go mod tidy\`. The franz-go replace has no version on its left, so it
also covers modules that require another franz-go version (kfake, kadm, ...).
Leave out the second require and replace if you use kgo alone.

\`go doc\` (Go 1.26) prints a package's import path from the first module
root that contains its directory, and your module comes first: with this
directory inside your module, \`go doc kgo\` shows the right documentation
(the patched kgo) under a wrong import comment,
\`example.com/you/third_party/franz-go-ordered/franz-go/pkg/kgo\`. Builds are
not affected. With the export outside your module's directory (a sibling,
as in a repository whose module sits in a subdirectory), or after
\`go mod vendor\`, it shows \`github.com/twmb/franz-go/pkg/kgo\`.
EOF
echo "export: wrote $dest (franz-go $version + patches$([ -n "$kfake" ] && echo ', kfake'), korder); the replace lines are in $dest/README.md"
