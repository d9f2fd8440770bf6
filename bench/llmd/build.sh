#!/bin/sh
# Builds llmd-scorer (bench/llmd/main.go) against llm-d's llm-d-kv-cache,
# beside the project: LLMD_KV_CACHE is a checkout of
# github.com/llm-d/llm-d-kv-cache (the numbers in docs/benchmarks.md used
# main at 7be76e1); its Go modules come from the Go module proxy into Go's
# own cache.  Nothing of it enters the repository.
#
#   LLMD_KV_CACHE=/path/to/llm-d-kv-cache sh bench/llmd/build.sh [OUT]
set -e
src=${LLMD_KV_CACHE:?set LLMD_KV_CACHE to a checkout of github.com/llm-d/llm-d-kv-cache}
out=${1:-build/llmd-scorer}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/main.go" "$work/"
cd "$work"
go mod init polykv.local/llmd-scorer >/dev/null 2>&1
go mod edit -require=github.com/llm-d/llm-d-kv-cache@v0.0.0-00010101000000-000000000000 \
            -replace=github.com/llm-d/llm-d-kv-cache="$(cd "$src" && pwd)"
GOFLAGS="-buildvcs=false" go mod tidy >/dev/null
outdir=$(cd "$OLDPWD" && mkdir -p "$(dirname "$out")" && cd "$(dirname "$out")" && pwd)
CGO_ENABLED=0 GOFLAGS="-buildvcs=false" go build -o "$outdir/$(basename "$out")" .
echo "built $outdir/$(basename "$out") against $(cd "$src" && git log --oneline -1 2>/dev/null || echo "$src")"
