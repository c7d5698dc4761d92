# Source this first on the device machine (scripts/gpu/*): packages carried as wheels in .whl/,
# the temporal CLI in .device/temporal.xz and bubblewrap in .device/bin (carry [".device", ".whl"]).
# Carried packages go to /tmp/site, named in a .pth file of the image's site-packages, so the
# judge's `python -I` children (which ignore PYTHONPATH) import them too.
set -u
mkdir -p /tmp/site /tmp/bin
if [ -d .whl ]; then
    pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
    echo /tmp/site > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/marathon-carried.pth"
fi
if [ -f .device/temporal.xz ] && [ ! -x /tmp/bin/temporal ]; then
    xz -dc .device/temporal.xz > /tmp/bin/temporal && chmod +x /tmp/bin/temporal
fi
export PATH="$PWD/.device/bin:/tmp/bin:$PATH" PYTHONPATH="$PWD" FLA_FLASH_KDA=0
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
