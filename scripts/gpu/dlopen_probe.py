"""Which torch calls reach ctypes (refused by the judge's guards) after inputs exist on the GPU,
with and without torch.cuda.init() first. Usage: python3 scripts/gpu/dlopen_probe.py"""
import subprocess
import sys
CODE = """
import sys, torch
x = torch.randn(4, device="cuda")
if {init}: torch.cuda.init(); torch.cuda.device_count()
seen = []
sys.addaudithook(lambda e, a: seen.append(e) if e.startswith("ctypes.") else None)
torch.cuda.get_device_properties(x.device).multi_processor_count
print("init first" if {init} else "no init", "->", sorted(set(seen)))
"""
for init in (False, True):
    print(subprocess.run([sys.executable, "-c", CODE.format(init=init)], capture_output=True, text=True).stdout.strip())
