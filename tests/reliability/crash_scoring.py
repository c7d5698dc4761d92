"""The deterministic evaluator of the crash tests: the same (iteration, index) always scores
the same, so "the best matches an undisturbed run" holds whatever the timing of a crash."""


def score(iteration: int, index: int, confirm: bool) -> tuple[str, float | None]:
    if (iteration + index) % 5 == 4:
        return "incorrect", None
    return "ok", 1.0 + ((iteration * 5 + index * 3) % 7) / 10
