#!/usr/bin/env bash
# Installs libengine into a temporary prefix, builds clients/example through pkg-config exactly as a user
# would, and runs it greedily on a fixture model.
set -euo pipefail
build=$1 src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig"
cp "$src/clients/example/embed_example.c" "$src/clients/example/Makefile" "$prefix/"
make -s -C "$prefix" embed_example >/dev/null
out=$("$prefix/embed_example" "$src/tests/fixtures/models/mha" "To be, or not")
echo "$out"
grep -q "prompt tokens" <<<"$out"
echo "1 passed, 0 failed"
