"""Marathon's kernel library: problems, references, baselines, our Triton kernels and the judge.

Usable without Temporal or the web stack. Importing this package is cheap; torch and
triton load when a kernel, reference or the judge is used.
"""
