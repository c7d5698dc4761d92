"""scripts/setup-system's decisions, driven through a PATH of fakes: what it installs, how, and
when it stops with the command to run instead. The fakes record each call; nothing is installed."""

import subprocess
from pathlib import Path

import pytest

from tests.cli.stack import REPO

SCRIPT = REPO / "scripts" / "setup-system"
BASH = "/bin/bash"


def fake_machine(tmp_path: Path, *, uid: int, have: tuple[str, ...], sudo: bool, apt: bool = True) -> Path:
    """A bin directory with only the programs named: ``id`` answers ``uid``, ``apt-get`` and
    ``sudo`` append their arguments to calls.log (apt-get "installs" by creating the programs)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"

    def script(name: str, body: str) -> None:
        path = bin_dir / name
        path.write_text(f"#!{BASH}\n{body}\n")
        path.chmod(0o755)

    script("id", f'echo {uid}')
    for program in have:
        script(program, "exit 0")
    if apt:
        provides = {"bubblewrap": "bwrap", "chromium": "chromium"}
        installs = "\n".join(
            f'for a in "$@"; do [ "$a" = {package} ] && printf "#!{BASH}\\nexit 0\\n" > {bin_dir}/{program} '
            f"&& chmod 755 {bin_dir}/{program}; done"
            for package, program in provides.items()
        )
        script("apt-get", f'echo "apt-get $*" >> {log}\n{installs}\nexit 0')
    if sudo:
        script("sudo", f'echo "sudo $*" >> {log}\nexec "$@"')
    return bin_dir


def run_setup(tmp_path: Path, purpose: str, bin_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BASH, str(SCRIPT), purpose], env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=30
    )


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_nothing_to_do_when_everything_is_there(tmp_path):
    bin_dir = fake_machine(tmp_path, uid=1000, have=("bwrap", "chromium"), sudo=False)
    result = run_setup(tmp_path, "test", bin_dir)
    assert result.returncode == 0, result.stderr
    assert calls(tmp_path) == [] and result.stdout == ""


def test_root_installs_what_is_missing_with_apt_and_says_so(tmp_path):
    bin_dir = fake_machine(tmp_path, uid=0, have=(), sudo=False)
    result = run_setup(tmp_path, "test", bin_dir)
    assert result.returncode == 0, result.stderr
    assert calls(tmp_path) == ["apt-get update -qq", "apt-get install -y -qq bubblewrap chromium"]
    assert "installing bubblewrap (the judge's sandbox), chromium (the run page's browser tests)" in result.stdout


def test_demo_needs_only_bubblewrap(tmp_path):
    bin_dir = fake_machine(tmp_path, uid=0, have=(), sudo=False)
    result = run_setup(tmp_path, "demo", bin_dir)
    assert result.returncode == 0, result.stderr
    assert calls(tmp_path)[-1] == "apt-get install -y -qq bubblewrap"


def test_a_user_with_sudo_installs_through_sudo(tmp_path):
    bin_dir = fake_machine(tmp_path, uid=1000, have=("chromium",), sudo=True)
    result = run_setup(tmp_path, "test", bin_dir)
    assert result.returncode == 0, result.stderr
    assert calls(tmp_path) == [
        "sudo apt-get update -qq", "apt-get update -qq",
        "sudo apt-get install -y -qq bubblewrap", "apt-get install -y -qq bubblewrap",
    ]
    assert "with sudo apt-get" in result.stdout


def test_without_root_or_sudo_it_stops_at_once_with_the_command(tmp_path):
    bin_dir = fake_machine(tmp_path, uid=1000, have=(), sudo=False)
    result = run_setup(tmp_path, "test", bin_dir)
    assert result.returncode == 1
    assert calls(tmp_path) == []
    assert "not root and no sudo" in result.stderr
    assert "su -c 'apt-get update -qq && apt-get install -y -qq bubblewrap chromium'" in result.stderr


def test_without_apt_it_names_the_packages(tmp_path):
    bin_dir = fake_machine(tmp_path, uid=0, have=("chromium",), sudo=False, apt=False)
    result = run_setup(tmp_path, "test", bin_dir)
    assert result.returncode == 1
    assert "install bubblewrap with this system's package manager" in result.stderr


@pytest.mark.parametrize("script", ["scripts/demo", "scripts/test", ".ci/run"])
def test_every_entry_point_calls_the_one_setup(script):
    text = (REPO / script).read_text()
    assert "scripts/setup-system" in text
    assert "apt-get" not in text, f"{script} installs packages itself instead of through scripts/setup-system"
