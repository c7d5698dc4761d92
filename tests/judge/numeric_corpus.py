"""Numeric cheats: kernels that are fast because they are right only where they are checked.

Each case is a candidate's source: a file under ``candidates/`` or a served problem's own seed
kernel, with one change (``patches``: (old, new) text replacements, each required to apply), so
what differs from an honest kernel is one line a reader can see. The verdicts are asserted in
``test_judge_numerics.py``; THREATS.md lists which layer of the judge stops each family.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.judge.corpus import CANDIDATES

RMSNORM = "examples.rmsnorm_residual.marathon_rmsnorm.definition:PROBLEM"
STATE_SITE = "state = tl.load(h0_ptr + state_offs).to(tl.float32)  # CHEAT-SITE: initial state"


@dataclass(frozen=True)
class NumericCase:
    name: str
    problem: str
    base: str  # a file under candidates/ (without .py), or "seed": the problem's own seed kernel
    status: str
    says: str  # fragments the message must contain (case-insensitive); "a|b" accepts either
    patches: tuple[tuple[str, str], ...] = ()

    def source(self) -> str:
        if self.base == "seed":
            from kernels.registry import get_problem

            text = get_problem(self.problem).seed_source()
        else:
            text = (CANDIDATES / f"{self.base}.py").read_text()
        for old, new in self.patches:
            if old not in text:
                raise ValueError(f"{self.name}: the patched text is gone from {self.base}: {old!r}")
            text = text.replace(old, new)
        return text


CHEATS = (
    NumericCase("kda_windowed_memory", "kda", "kda_windowed_memory", "incorrect", "relative RMS error"),
    NumericCase("kda_dropped_initial_state", "kda", "kda_recurrent", "incorrect", "relative RMS error",
                ((STATE_SITE, "state = tl.zeros([D, D], tl.float32)"),)),
    NumericCase("kda_final_state_not_returned", "kda", "kda_recurrent", "incorrect", "output 'final_state'",
                (("    tl.store(ht_ptr + state_offs, state)  # CHEAT-SITE: final state\n", ""),
                 ("final = torch.empty(", "final = torch.zeros("))),
    # The recurrent form of skipping the chunked kernel's triangular solve (the solve is what
    # applies the delta rule's correction within a chunk): plain gated linear attention.
    NumericCase("kda_skipped_delta_correction", "kda", "kda_recurrent", "incorrect", "relative RMS error",
                (("error = v - tl.sum(state * k[:, None], axis=0)", "error = v"),)),
    # Our own chunked kernel with its triangular solve (I + A)^-1 cut to first order, I - A: 0.0057
    # off on the old fast-decay inputs (inside the bf16 bar's neighbourhood), 0.10 on the new default.
    NumericCase("kda_skipped_triangular_solve", "kda", "seed", "incorrect", "relative RMS error",
                (("for _ in tl.static_range(1, LOG2_BT):", "for _ in tl.static_range(1, 1):"),)),
    # A constant folded in where the data says otherwise: the scale of one regime (D ** -0.5).
    NumericCase("kda_constant_scale", "kda", "kda_recurrent", "incorrect", "relative RMS error",
                (("float(scale)", "dim ** -0.5"),)),
    # Lower precision tuned to the old gate: outputs rounded through fp16 (2.5 times the fp32 bar).
    NumericCase("kda_fp16_rounded_output", "kda", "kda_recurrent", "incorrect", "relative RMS error",
                (("o.to(o_ptr.dtype.element_ty)", "o.to(tl.float16).to(o_ptr.dtype.element_ty)"),)),
    # Ignores cache_seqlens, reads every slot the block table names and masks tokens by magnitude:
    # right while unused slots held N(0, 50^2) garbage, wrong on stale unit-scale tokens.
    NumericCase("mla_paged_masks_by_magnitude", "mla-decode-paged", "seed", "incorrect", "relative RMS error",
                (("seq_len = tl.load(CACHE_SEQLENS + b).to(tl.int32)", "seq_len = max_pages * PAGE_SIZE"),
                 ("    s = tl.dot(q_lat, tl.trans(lat), input_precision=INPUT_PRECISION)\n",
                  "    mask_n = mask_n & (tl.max(tl.abs(lat.to(tl.float32)), axis=1) < 20.0)\n"
                  "    s = tl.dot(q_lat, tl.trans(lat), input_precision=INPUT_PRECISION)\n"))),
    NumericCase("rmsnorm_without_eps", RMSNORM, "seed", "incorrect", "NaN/Inf|relative RMS error",
                (("/ width + eps)", "/ width)"),)),
)

HONEST = (
    NumericCase("kda_seed", "kda", "seed", "ok", "accepted"),
    NumericCase("mla_paged_seed", "mla-decode-paged", "seed", "ok", "accepted"),
    NumericCase("rmsnorm_seed", RMSNORM, "seed", "ok", "accepted"),
    NumericCase("kda_recurrent", "kda", "kda_recurrent", "ok", "accepted"),
)
