"""KDA forward with general gates: the problem ``kda-general``.

The same operator as ``kda`` (``kernels/kda/definition.py``: the recurrence, q and k
L2-normalized, beta in (0, 1), fp32 log-decays g), without the promise that gates stay above
-5. Gates here are what models and FLA's own tests produce, unclamped:

- ``"default"``: the Kimi Linear model's gate as the layer computes it (``gates.py``),
  ``g = -exp(A_log) * softplus(raw + dt_bias)`` with ``A_log = log U(1, 16)`` per head, per-channel
  biases and per-sequence shifts: long-memory channels next to fast-decaying ones (down to about
  -70) in every tensor;
- ``"long_memory"``: ``g = logsigmoid(randn + 6)`` everywhere (per-step decay about e^-0.0025);
- ``"strong_decay"``: ``g = logsigmoid(randn) / 0.1``, FLA's ``gate_logit_normalizer = 0.1``
  (down to about -50: a token forgets its state within a step or two);
- ``"kimi"``: FLA's test gate, ``g = -exp(A_log) * softplus(raw + dt_bias)`` with
  ``dt_bias ~ N(0, 1)`` per head and channel (mostly fast decay);
- ``"probe"`` (held out, as in ``kda``): saturated gates (0 and -50 exactly), one-hot keys,
  betas pushed to the ends.
The scale is ``D ** -0.5 * 2 ** U(-1, 1)`` in every regime, and initial states are drawn, as in
``kda``; the outputs are ``(o, final_state)``.

Which baseline, and why: FLA's ``chunk_kda`` with its default flags, the path that makes no
promise about the gates' range, so it is the matching path for general gates. The bounded
problem ``kda`` compares with FLA's bounded-gate path (``safe_gate=True, lower_bound=-5``)
instead: a comparison is fair only between paths that promise the same.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kernels.kda import gates
from kernels.kda.definition import HELD_OUT, LONG_MEMORY_GATE_SHIFT, PROBLEM as BOUNDED, draw_common, finish_inputs
from kernels.problem import Shape, check_regime

REGIMES = ("default", "long_memory", "strong_decay", "kimi")
GATE_LOGIT_NORMALIZER = 0.1
KIMI_A_RANGE = (1.0, 16.0)


def make_inputs(
    shape: Shape, seed: int, device: Any = "cpu", dtype: Any = "bfloat16", regime: str = "default"
) -> dict[str, Any]:
    """Inputs for shape ``(B, T, H, D)`` as ``kda``'s, with unclamped gates of ``regime`` (one of
    ``REGIMES``, module docstring). Drawn on ``device`` from a generator seeded from
    ``(seed, regime)``: one seed gives the same values on every machine of one kind of device."""
    import torch
    import torch.nn.functional as F

    check_regime(regime, REGIMES + HELD_OUT)
    gen, draws = draw_common(shape, seed, device, regime)
    raw = draws["raw"]
    if regime in ("default", "probe"):
        g = gates.kimi_gate(raw, gen, None)
    elif regime == "long_memory":
        g = F.logsigmoid(raw + LONG_MEMORY_GATE_SHIFT)
    elif regime == "strong_decay":
        g = F.logsigmoid(raw) / GATE_LOGIT_NORMALIZER
    else:
        heads, dim = raw.shape[2], raw.shape[3]
        low, high = KIMI_A_RANGE
        unit = torch.rand(heads, generator=gen, device=raw.device)
        a_log = torch.log(low + (high - low) * unit)
        dt_bias = torch.randn(heads, dim, generator=gen, device=raw.device)
        g = -a_log.exp()[:, None] * F.softplus(raw + dt_bias)
    return finish_inputs(draws, g, device, dtype, gen, probe=regime == "probe", lower_bound=None)


# kda's problem in every field but the gates and what follows from them: the same operator,
# bench and CPU shapes, tolerances, reference, kernel and space; four of kda's five verify shapes.
PROBLEM = dataclasses.replace(
    BOUNDED,
    name="kda-general",
    title="Kimi Delta Attention forward with general (unbounded) gates, D = 128",
    shapes={**BOUNDED.shapes,
            "verify": ((1, 1000, 4, 128), (2, 63, 2, 128), (1, 4096, 8, 128), (2, 500, 3, 128))},
    make_inputs=make_inputs,
    baselines="kernels.kda.baseline:general_baselines",
    notes="As kda, with gates of any magnitude: a chunked kernel must not factor e^(G_r - G_i) "
    "into e^(G_r) e^(-G_i) (overflow); ours forms such tiles' diagonal blocks exactly.",
    extra={**BOUNDED.extra, "gate_lower_bound": None},
    regimes=REGIMES,
)
