# Source this first on a GPU node (scripts/gpu/*): on a node without network, the packages its
# image lacks come as wheels in .whl/, the temporal CLI as .device/temporal.xz and bubblewrap in
# .device/bin, copied into the repository checkout beforehand.
# Carried packages go to $SCRATCH/site, named in a .pth file of the image's site-packages, so the
# judge's `python -I` children (which ignore PYTHONPATH) import them too.
set -u
# Scratch space of this node (its temporary directory): carried packages, the temporal CLI, outputs.
SCRATCH="$(python3 -c 'import tempfile; print(tempfile.gettempdir())')/marathon-gpu"
mkdir -p "$SCRATCH/site" "$SCRATCH/bin"
if [ -d .whl ]; then
    pip install -q --no-index --no-deps --target "$SCRATCH/site" .whl/*.whl 2>&1 | tail -2
    echo "$SCRATCH/site" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/marathon-carried.pth"
fi
if [ -f .device/temporal.xz ] && [ ! -x "$SCRATCH/bin/temporal" ]; then
    xz -dc .device/temporal.xz > "$SCRATCH/bin/temporal" && chmod +x "$SCRATCH/bin/temporal"
fi
export PATH="$PWD/.device/bin:$SCRATCH/bin:$PATH" PYTHONPATH="$PWD" FLA_FLASH_KDA=0
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
