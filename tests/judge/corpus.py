"""The adversarial corpus: each candidate file, the exploit it tries, and the verdict it must get.

``static`` says whether the judgement runs with the source scan on. Candidates the scan
already stops are judged with the scan off, so the test proves the run-time guards of the
sandbox stop them on their own (defense in depth); the scan's findings are tested
separately in ``test_judge_policy.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CANDIDATES = Path(__file__).parent / "candidates"
TOY = "tests.judge.toy:PROBLEM"
FAKE_SECRET = "sk-judge-fake-123"


@dataclass(frozen=True)
class Case:
    name: str
    status: str
    # Fragments the message must contain (case-insensitive); "a|b" accepts either. The
    # allocator decides whether stale memory still holds the poison or an old result, so a
    # few exploits are caught by one of two checks, both correct.
    says: str
    static: bool = False
    timeout_s: float = 240.0
    reps: int = 1

    @property
    def source(self) -> str:
        return (CANDIDATES / f"{self.name}.py").read_text()


RUNTIME_CASES = (
    Case("honest_cumsum", "ok", "accepted", static=True),
    Case("honest_views", "ok", "accepted", static=True),
    Case("honest_heuristics", "ok", "accepted", static=True),
    Case("honest_reused_buffer", "ok", "accepted", static=True, reps=4),
    Case("honest_integer_plan", "ok", "accepted", static=True),
    Case("float_host_copy", "forbidden", "aten._to_copy"),
    Case("float_literal_tensor", "forbidden", "aten.lift_fresh", static=True),
    Case("empty_output", "incorrect", "relative RMS error|NaN/Inf"),
    Case("stale_output", "incorrect", "tolerance|NaN/Inf"),
    Case("cached_output", "incorrect", "does not depend on the inputs"),
    Case("cached_by_address", "incorrect", "cached by address"),
    # A constant is wrong at the first call already; the plan's first call names the failure.
    Case("constant_output", "incorrect", "does not depend on the inputs|relative RMS error"),
    # NaN is computed in Triton at every t = T-1 (2 x 3 columns of the first shape, whose T is
    # drawn from its family, so the total varies): a relative
    # error of NaN is never "> tolerance", so only the explicit NaN/Inf count stops it.
    Case("nan_output", "incorrect", "6 of ", static=True),
    Case("wrong_shape", "incorrect", "3) float32, got (2, ", static=True),
    Case("precision_downgrade", "incorrect", "3) float16", static=True),
    Case("torch_fallback", "forbidden", "aten.cumsum|torch.cumsum refused at run time"),
    Case("hidden_getattr", "forbidden", "getattr(torch, 'cumsum')", static=True),
    Case("hidden_method", "forbidden", "aten.cumsum", static=True),
    Case("hidden_arithmetic", "forbidden", "aten.mul", static=True),
    Case("hidden_exec", "forbidden", "exec"),
    Case("import_fla", "forbidden", "third-party kernel library 'fla"),
    Case("import_flash_attn_runtime", "forbidden", "third-party kernel library 'flash_attn'"),
    Case("import_subprocess", "forbidden", "import of 'subprocess' refused"),
    Case("thread_injection", "forbidden", "import of 'threading' refused at run time"),
    # Python 3.11 has no audit event for a thread start (3.12 added _thread.start_new_thread):
    # there the thread-count check stops it; on 3.12+ the audit hook stops it first.
    Case("backdoor_thread", "forbidden", "the candidate started threads|_thread.start_new_thread|torch.cuda.threading refused at run time"),
    # Torch only at the call numbers it expects to be timed (the old schedule): whichever of them runs
    # under every guard first (a spot check, a warm-up or a checked call of the new plan) catches it.
    Case("timed_torch_fallback", "forbidden", "aten.cumsum", reps=6),
    Case("import_time_thread", "forbidden", "the candidate started threads while importing|_thread.start_new_thread|torch.cuda.threading refused at run time"),
    Case("backdoor_subprocess", "forbidden", "subprocess.Popen|torch.sys refused at run time"),
    Case("backdoor_socket", "forbidden", "socket.|torch.sys refused at run time"),
    Case("backdoor_ctypes", "forbidden", "ctypes.|torch.sys refused at run time"),
    Case("backdoor_timer_patch", "forbidden", "replaced time.perf_counter|torch.sys refused at run time"),
    Case("event_patch", "forbidden", "replaced torch.cuda.Event.elapsed_time|torch.cuda.Event refused at run time"),
    Case("ghost_launch", "forbidden", "no Triton kernel of the candidate was launched", static=True),
    Case("lying_subclass", "incorrect", "plain torch.Tensor"),
    Case("input_mutation", "incorrect", "modified its input 'x'", static=True),
    Case("non_causal", "incorrect", "causality violated", static=True),
    Case("backdoor_gc_steal", "forbidden", "gc.get_objects|torch.sys refused at run time"),
    # Triton's cache is now the sandbox's own (inside its directory): the plant's rename is refused.
    Case("backdoor_cache_plant", "forbidden", "may write files only inside its sandbox directory|os.rename|triton.runtime refused at run time"),
    Case("backdoor_read_file", "forbidden", "torch.from_file of /etc/hostname for reading|torch.from_file refused at run time"),
    Case("backdoor_torch_save", "forbidden", "torch file writer of /tmp/marathon-judge-escape-torch-save.pt|torch.save refused at run time"),
    Case("early_exit", "runtime_error", "SystemExit", static=True),
    # Reaching torch.os is refused now (the module guard, scan off); under a compromised
    # interpreter an exit still ends as "without a report" (test_judge_isolation.py).
    Case("hard_exit", "forbidden", "torch.os refused at run time"),
    Case("fake_report", "forbidden", "torch.os refused at run time"),
    # The environment is empty under isolation; a candidate that could read anything at all
    # finds no secret (test_judge_isolation.py hunts with no guard at all).
    Case("read_secrets", "forbidden", "torch.os refused at run time"),
    Case("self_kill", "forbidden", "os.kill|torch.os refused at run time"),
    Case("oob_crash", "crashed", "SIGSEGV", static=True),
    Case("oom", "runtime_error", "out of memory", static=True),
    Case("runaway_print", "ok", "accepted", static=True),
    Case("syntax_error", "compile_error", "line 33"),
    Case("kernel_compile_error", "compile_error", "line 18 (t = tl.arange(0, BLOCK_T + 1))", static=True),
    # Either verdict is right (test_a_cache_hit_is_always_caught): caught when the allocator
    # hands an address back (a hit on other values), honest work when it never does.
    Case("cache_during_timing", "incorrect|ok", "in a timed call|does not depend on the inputs|accepted", static=True,
         reps=4),
    # The per-call deadline, not the judgement's: a first call gets FIRST_CALL_S["cpu"] = 30 s.
    Case("hang", "timeout", "within its deadline of 30 s", static=True, timeout_s=240.0),
    # A later call of an already-compiled shape: MIN_CALL_S["cpu"] = 20 s (20 x the reference's time is less).
    Case("hang_later", "timeout", "within its deadline of 20 s", static=True, timeout_s=240.0),
    # Ordinary Python, accepted with the scan on (the standard library's exec for @dataclass and
    # namedtuple is its own, not the candidate's).
    Case("honest_dataclass_config", "ok", "accepted", static=True),
    Case("honest_namedtuple_enum", "ok", "accepted", static=True),
    Case("honest_autotuned_workspace", "ok", "accepted", static=True, reps=4),
    # Doors into the interpreter (2026-12-02), scan off: the run-time guards stop each alone.
    Case("door_triton_core_builtins", "forbidden", "triton.language.core.builtins refused at run time"),
    Case("door_enum_builtins", "forbidden", "enum.bltns refused at run time"),
    Case("door_typing_attrgetter", "forbidden", "typing.operator refused at run time"),
    Case("door_from_typing_import_sys", "forbidden", "typing.sys refused at run time"),
    Case("door_inspect_frame", "forbidden", "reading .tb_frame"),
    Case("door_generator_frame", "forbidden", "reading .gi_frame"),
    Case("door_guard_flag", "forbidden", "dataclasses.sys refused at run time"),
    Case("door_sys_modules_timer", "forbidden", "torch.sys refused at run time"),
    # Reading __globals__ raises no audit event: only the scan stops this one (scan on).
    Case("door_guard_globals", "forbidden", "'.__globals__' is not allowed", static=True),
)

# Judge v3: the candidate owns its whole process. Windows where the guards were off (an autotune
# hook, a finalizer), threads they did not see, calls told apart as checked or timed. The
# verdicts come from outside (every timed output judged, the thread count of the box) or from
# guards that now cover those windows. The compromised-process attacks on the same classes are
# in test_judge_isolation.py and test_judge_box.py.
PROCESS_CASES = (
    Case("honest_hooks_generators", "ok", "accepted", static=True, reps=5),
    Case("honest_autotuned_workspace", "ok", "accepted", static=True, reps=5),
    Case("window_pre_hook_torch", "forbidden", "aten.cumsum"),
    Case("window_generator_finally", "incorrect", "relative RMS error"),
    Case("thread_raw_torch", "forbidden", "starting a thread"),
    Case("timed_after_checks", "incorrect", "in a timed call", reps=5),
    # Its trick never fires: every call comes through the same frames (asserted on its output).
    Case("timed_by_stack_depth", "ok", "accepted", reps=5),
)

# Candidate -> a fragment of the first static finding.
STATIC_CASES = {
    "torch_fallback": "torch.cumsum",
    "hidden_exec": "'exec' is not allowed",
    "import_fla": "third-party kernel library 'fla.ops.kda'",
    "import_flash_attn_runtime": "'__import__' is not allowed",
    "import_subprocess": "import of 'subprocess' is not allowed",
    "thread_injection": "import of 'threading' is not allowed",
    "backdoor_thread": "torch.cuda.threading is not allowed",
    "import_time_thread": "torch.cuda.threading is not allowed",
    "backdoor_subprocess": "'.modules'",
    "backdoor_socket": "'.modules'",
    "backdoor_ctypes": "'.modules'",
    "backdoor_timer_patch": "'.perf_counter'",
    "timer_patch": "import of 'time' is not allowed",
    "event_patch": "'.elapsed_time'",
    "lying_subclass": "subclassing torch types",
    "gc_steal": "import of 'gc' is not allowed",
    "backdoor_gc_steal": "'.modules'",
    "backdoor_cache_plant": "attribute '.runtime' is not allowed",
    "backdoor_torch_save": "torch.save computes or escapes",
    "backdoor_read_file": "torch.from_file computes or escapes",
    "hard_exit": "'._exit'",
    "fake_report": "'._exit'",
    "read_secrets": "torch.os",
    "self_kill": "torch.os",
    "side_stream": "'.Stream'",
    "syntax_error": "SyntaxError",
    "door_triton_core_builtins": "attribute '.builtins' of tl.core is a module a candidate may not import",
    "door_enum_builtins": "attribute '.bltns' of enum is a module a candidate may not import",
    "door_typing_attrgetter": "attribute '.operator' of typing is a module a candidate may not import",
    "door_from_typing_import_sys": "import of 'typing.sys' is not allowed",
    "door_inspect_frame": "'.tb_frame'",
    "door_generator_frame": "'.gi_frame'",
    "door_guard_flag": "'.sys'",
    "door_guard_globals": "'.__globals__'",
    "door_sys_modules_timer": "torch.sys computes or escapes",
}
