"""``marathon export RUN -o DIR``: the run's best kernel as an installable Python package.

Reads the run and its best kernel (with its judge report) from the API, loads the run's problem
here to draw the reference test's cases, and writes the package (kernels/export.py). Then
``pip install DIR`` and ``from marathon_<problem> import <problem>``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from marathon.commands.connection import calling_api, common_options, fail


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", parents=[common_options()],
        help="write a run's best kernel as an installable Python package (function, test, measurements, provenance)",
        description="Writes DIR/pyproject.toml and DIR/marathon_<problem>/: the judged kernel, a function with the "
        "problem's signature (CUDA-graph capturable on the GPU), its reference test (float64 references saved "
        "at the problem's small shapes), the measured table (device, baseline, ratios, date) and the run's "
        "provenance. Needs the run's problem loadable here (built in, or its package installed).",
    )
    parser.add_argument("id", help="the run's id (marathon runs lists them)")
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help="folder to write (must not exist or be empty; default: ./marathon_<problem>-<run id>)")
    parser.set_defaults(handler=export_command)


@calling_api
def export_command(client, args: argparse.Namespace) -> int:
    from importlib.metadata import PackageNotFoundError, version

    from kernels.export import python_name, write_package
    from kernels.registry import find_object_paths_here, get_problem

    run = client.get_run(args.id)
    best = client.best(args.id)
    name = run.get("problem") or ""
    find_object_paths_here(name)
    try:
        problem = get_problem(name)
    except (ValueError, ImportError) as error:
        return fail(f"cannot export run {args.id}: its problem {name!r} does not load here ({error}); install the "
                    "problem's package where you export")
    out = args.output or Path(f"marathon_{python_name(problem.name)}-{args.id}")
    try:
        marathon_version = version("marathon")
    except PackageNotFoundError:
        marathon_version = "unknown"
    try:
        exported = write_package(out, run, best, problem, marathon_version)
    except ValueError as error:
        return fail(str(error))
    print(f"wrote {exported.folder}/: package {exported.package}, function {exported.function}"
          f"({', '.join(problem.input_names)})")
    print(f"  pip install {exported.folder}")
    print(f"  python -m {exported.package}.test_kernel   (TRITON_INTERPRET=1 without a GPU)")
    return 0
