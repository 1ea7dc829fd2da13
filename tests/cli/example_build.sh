#!/usr/bin/env bash
# Installs libengine into a temporary prefix and builds, through the installed pkg-config files exactly as a user
# would, clients/example (its Makefile) and the README's "C API in 20 lines" snippet (the first ```c block after
# that heading, cut out of README.md), each against libengine.so (libengine) and libengine.a (libengine-static,
# and `pkg-config --static libengine`); checks which libengine each binary needs and runs each on the tiny model.
# usage: example_build.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
pcdir=$(dirname "$(find "$prefix" -name libengine.pc | head -1)")
export PKG_CONFIG_PATH=$pcdir
model=$src/tests/fixtures/models/mha
passed=0 failed=0
check() { # check WHAT COMMAND...: one line per failure, counted
    local what=$1
    shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $what" >&2; fi
}
needs_libengine() { readelf -d "$1" | grep -q 'NEEDED.*libengine\.so'; }
no_libengine() { ! needs_libengine "$1"; }

# The README snippet, with its placeholder path pointed at the tiny model. -Werror: a missing include fails it.
awk '/^## The C API in 20 lines/ {h = 1} h && /^```c/ {c = 1; next} c && /^```/ {exit} c' "$src/README.md" \
    | sed "s|/path/to/model|$model|" >"$work/app.c"
check "README snippet extracted" grep -q 'mnemo_generate(' "$work/app.c"
cd "$work"
libdir=$(pkg-config --variable=libdir libengine)
cc_app() { # cc_app OUT FLAGS...: compiles app.c as the README says, with the given pkg-config output
    local out=$1
    shift
    cc -Wall -Werror app.c "$@" -o "$out" 2>"$out.log" || { cat "$out.log" >&2; return 1; }
}
check "snippet: cc app.c \$(pkg-config --cflags --libs libengine)" \
    cc_app app_shared $(pkg-config --cflags --libs libengine) -Wl,-rpath,"$libdir"
check "snippet, libengine-static: cc app.c \$(pkg-config --cflags --libs libengine-static)" \
    cc_app app_static $(pkg-config --cflags --libs libengine-static)
check "snippet: cc app.c \$(pkg-config --cflags --libs --static libengine)" \
    cc_app app_pcstatic $(pkg-config --cflags --libs --static libengine) -Wl,-rpath,"$libdir"
check "app_shared needs libengine.so" needs_libengine app_shared
check "app_static carries libengine.a (needs no libengine.so)" no_libengine app_static
for app in app_shared app_static app_pcstatic; do
    out=$(./"$app" 2>&1) && rc=0 || rc=$?
    check "$app runs (exit $rc): $out" test "$rc" -eq 0 -a -n "$out"
done
# Every library libengine.a needs is in libengine.pc's Libs.private too: libengine.a linked by path, with the
# --static list after it, links.
check "libengine.a + pkg-config --libs --static libengine" \
    cc_app app_private "$libdir/libengine.a" $(pkg-config --cflags --libs --static libengine | sed 's/-lengine\b//')
check "app_private needs no libengine.so" no_libengine app_private

# clients/example through its Makefile, both ways, run greedily.
cp "$src/clients/example/embed_example.c" "$src/clients/example/Makefile" "$work/"
check "make embed_example embed_example_static" make -s embed_example embed_example_static
check "embed_example needs libengine.so" needs_libengine embed_example
check "embed_example_static needs no libengine.so" no_libengine embed_example_static
for ex in embed_example embed_example_static; do
    out=$(./"$ex" "$model" "To be, or not" 2>&1) && rc=0 || rc=$?
    check "$ex runs (exit $rc): $out" grep -q "prompt tokens" <<<"$out"
done
out_shared=$(./embed_example "$model" "To be, or not")
out_static=$(./embed_example_static "$model" "To be, or not")
check "the static and shared examples print the same greedy text" test "$out_shared" = "$out_static"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
