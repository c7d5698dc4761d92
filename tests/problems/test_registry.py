"""Finding problems by entry point (group ``marathon.problems``), read through importlib.metadata
from real ``.dist-info`` folders on the path, as pip installs them."""

from __future__ import annotations

import pytest

from kernels.registry import get_problem, problem_names, problem_source
from tests.problems.installed import EXAMPLE_ROOT, declared_entry_points, install_here, uninstall_here


@pytest.fixture
def installed(tmp_path):
    added: list[str] = []

    def install(entry_points=None, name="marathon_checkout"):
        added.extend(install_here(tmp_path / name, entry_points, name))

    yield install
    uninstall_here(added)


def test_marathon_declares_its_example_as_an_entry_point():
    assert declared_entry_points() == {"rmsnorm-residual": "marathon_rmsnorm.definition:PROBLEM"}


def test_an_installed_entry_point_is_a_problem_by_name(installed):
    installed()
    assert problem_names()[:5] == ["kda", "kda-general", "kda-varlen", "mla-decode", "mla-decode-paged"] and "rmsnorm-residual" in problem_names()
    problem = get_problem("rmsnorm-residual")
    assert problem.name == "rmsnorm-residual" and problem.reference == "marathon_rmsnorm.reference:reference"
    where = problem_source("rmsnorm-residual")
    assert where.path == "marathon_rmsnorm.definition:PROBLEM"
    assert where.import_roots == (str(EXAMPLE_ROOT),)
    assert where.code == (str(EXAMPLE_ROOT / "marathon_rmsnorm"),)
    assert problem_source("kda").path == "kda" and problem_source("kda").import_roots == ()


def test_the_same_declaration_twice_is_one_problem(installed):
    installed()
    installed(name="marathon_again")  # e.g. this checkout and an installed copy of it
    assert problem_names().count("rmsnorm-residual") == 1


def test_two_packages_claiming_one_name_is_an_error_naming_both(installed):
    installed()
    installed({"rmsnorm-residual": "elsewhere.definition:PROBLEM"}, name="other_package")
    with pytest.raises(ValueError, match="declared twice in marathon.problems: .*marathon_rmsnorm.definition:PROBLEM"
                                         ".*elsewhere.definition:PROBLEM"):
        get_problem("rmsnorm-residual")


def test_an_entry_point_must_carry_its_problems_name(installed):
    installed({"rms": "marathon_rmsnorm.definition:PROBLEM"}, name="misnamed")
    with pytest.raises(ValueError, match="entry point 'rms' .* whose name is 'rmsnorm-residual': the two must be"):
        get_problem("rms")


def test_a_built_in_name_cannot_be_taken(installed):
    installed({"kda": "marathon_rmsnorm.definition:PROBLEM"}, name="squatter")
    with pytest.raises(ValueError, match="has the name of a built-in problem"):
        problem_names()


def test_an_unknown_name_says_how_to_declare_one():
    with pytest.raises(ValueError, match=r"unknown problem 'gemm'; known problems: kda, kda-general, kda-varlen, mla-decode, mla-decode-paged.*"
                                         r"\[project.entry-points.\"marathon.problems\"\]"):
        get_problem("gemm")
