"""Plot what scripts/gpu/service_runs.py measured: per run, the best speedup against wall time
(one point per iteration). Needs matplotlib (not a dependency of Marathon).

Usage: python3 scripts/plot_service_runs.py service_runs.json curve.png
"""

from __future__ import annotations

import json
import sys


def main(source: str, target: str) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.load(open(source))
    figure, axis = plt.subplots(figsize=(7, 4))
    for followed in data["runs"]:
        run = followed["run"]
        points = [(it["ended_s"] / 60, it["best_speedup"]) for it in followed["iterations"] if it["best_speedup"]]
        if not points:
            continue
        axis.step([0] + [p[0] for p in points], [points[0][1]] + [p[1] for p in points], where="post",
                  marker="o", label=f"{run['problem']} ({run['id']})")
        if followed.get("killed"):
            axis.axvline(followed["killed"]["at_s"] / 60, linestyle=":", color="grey")
    axis.set_xlabel("wall time (minutes)")
    axis.set_ylabel("best speedup over the baseline (x)")
    axis.set_title("Marathon runs through the service on one H200 (dotted: GPU worker killed)")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(target, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
