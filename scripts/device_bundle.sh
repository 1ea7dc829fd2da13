#!/usr/bin/env bash
# Builds the CUDA binaries for a lent GPU machine (which has the CUDA toolkit but none of the Debian libraries)
# and packs them with the shared libraries they need into one compressed file that the device tool carries.
#
#   scripts/device_bundle.sh [TARGET ...]      (default: the tests and benchmarks a GPU session runs)
#
# Output: .device/bundle.tar.zst (ignored by git: .device/ is listed in .git/info/exclude by this script) holding
# dev-bundle/bin/* and dev-bundle/lib/* (every library ldd names except glibc's and CUDA's own, which the machine
# has). There, in the repository root the tool runs in:
#
#   tar -I zstd -xf .device/bundle.tar.zst -C /tmp && export LD_LIBRARY_PATH=/tmp/dev-bundle/lib \
#       MNEMO_FIXTURES=$PWD/tests/fixtures && /tmp/dev-bundle/bin/test_ops --quiet
#
# with `carry: [".device"]`. Binaries are built for sm_90 only (H100/H200: CUDA_ARCH=90 overrides) in build-dev/.
# The carried tree is limited to 64 MiB with the repository's own files (~27 MB): the script prints the size.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
cd "$SRC"
BUILD=build-dev
ARCH=${CUDA_ARCH:-90}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(mnemo mnemo-server test_ops test_reference_models test_train_device test_s2_attn
    test_mem_device_ivf test_longllama bench_cuda bench_longctx bench_knn_device)
command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "device_bundle.sh: no nvcc here" >&2; exit 2; }
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" > /dev/null
cmake --build "$BUILD" -j"$(nproc)" --target "${targets[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/dev-bundle/bin" "$stage/dev-bundle/lib"
for t in "${targets[@]}"; do
    bin=$(find "$BUILD" -maxdepth 2 -type f -name "$t" -perm -u+x | head -1)
    [ -n "$bin" ] || { echo "device_bundle.sh: built target $t not found under $BUILD" >&2; exit 1; }
    cp "$bin" "$stage/dev-bundle/bin/"
    # the libraries it loads, but glibc's (the machine's own must be used) and CUDA's (the toolkit is there)
    ldd "$bin" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
        case $(basename "$lib") in
        libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libcuda.so* | libcudart.so* | \
            libcublas*.so*) ;;
        *) cp -nL "$lib" "$stage/dev-bundle/lib/" ;;
        esac
    done
done
mkdir -p .device
exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qx '/.device/' "$exclude" 2> /dev/null || echo '/.device/' >> "$exclude"
tar -C "$stage" -cf - dev-bundle | zstd -19 -T0 -q -o .device/bundle.tar.zst -f
bundle=$(du -m .device/bundle.tar.zst | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cm 2> /dev/null | tail -1 | cut -f1)
echo "device_bundle.sh: .device/bundle.tar.zst ${bundle} MB (${#targets[@]} binaries + $(ls "$stage/dev-bundle/lib" | wc -l)" \
    "libraries); with the repository's ${tree} MB the carried tree is ~$((bundle + tree)) MB of 64"
