"""Install the real coding CLIs for end-to-end tests, once, into a cache.

    claude = real_cli("claude")          # RealCli(command=..., path=..., model=...)

Each CLI is installed at the version its captures were made with
(tests/fixtures/cli/README.md) into `~/.cache/olp-test-clis/<package>@<version>`
(`$OLP_TEST_CLI_CACHE` overrides the root), under a lock of its own and through a temporary
directory renamed into place, so an interrupted or concurrent install (the suite runs in
several processes) is never used. Later runs only check the binary answers `--version`.

When the package registry cannot be reached the test is skipped with the installer's own
error in the reason (shown by `-ra`); any other install failure fails the test.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["KNOWN", "CliPackage", "RealCli", "install_npm", "install_pypi", "real_cli"]


@dataclass(frozen=True)
class CliPackage:
    registry: str  # "npm" | "pypi"
    package: str
    version: str
    binary: str
    model: str  # a model name the tests ask for


@dataclass(frozen=True)
class RealCli:
    name: str
    command: Path  # absolute path of the binary
    path: str  # PATH for the child (node/python first), to put in the provider's env
    model: str
    version: str


KNOWN: dict[str, CliPackage] = {
    "claude": CliPackage(
        "npm", "@anthropic-ai/claude-code", "2.1.197", "claude", "claude-sonnet-4-5"
    ),
    "qwen": CliPackage("npm", "@qwen-code/qwen-code", "0.15.10", "qwen", "qwen3-coder-plus"),
    "codex": CliPackage("npm", "@openai/codex", "0.171.0", "codex", "gpt-5.5"),
    "gemini": CliPackage("npm", "@google/gemini-cli", "0.61.0", "gemini", "gemini-2.5-flash"),
    "vibe": CliPackage("pypi", "mistral-vibe", "3.0.2", "vibe", "devstral-medium-latest"),
}  # fmt: skip

_NETWORK_ERRORS = (
    "ENOTFOUND",
    "EAI_AGAIN",
    "ECONNREFUSED",
    "ECONNRESET",
    "ETIMEDOUT",
    "ENETUNREACH",
    "EHOSTUNREACH",
    "network",
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Failed to establish a new connection",
    "No matching distribution found",  # pip's answer when it cannot reach the index
)


def cache_root() -> Path:
    root = os.environ.get("OLP_TEST_CLI_CACHE")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "olp-test-clis"


def real_cli(name: str) -> RealCli:
    """The installed CLI `name` (see KNOWN), installing it on first use."""
    spec = KNOWN[name]
    if spec.registry == "npm":
        return install_npm(name, spec)
    return install_pypi(name, spec)


@contextmanager
def _locked(root: Path, spec: CliPackage) -> Iterator[None]:
    """One package's install, against the other test processes (pytest-xdist workers):
    a lock per package, so different CLIs install side by side."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{_dir_name(spec)}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _dir_name(spec: CliPackage) -> str:
    return f"{spec.package.replace('/', '__')}@{spec.version}"


def install_npm(name: str, spec: CliPackage) -> RealCli:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        pytest.skip(f"LOUD SKIP: cannot test the real {name} CLI: node/npm are not installed")
    root = cache_root()
    final = root / _dir_name(spec)
    binary = final / "node_modules" / ".bin" / spec.binary
    with _locked(root, spec):
        if not binary.exists():
            tmp = root / (_dir_name(spec) + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            _run_installer(
                name,
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(tmp),
                 f"{spec.package}@{spec.version}"],
            )  # fmt: skip
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
    path = os.pathsep.join([str(Path(node).parent), str(binary.parent), "/usr/bin", "/bin"])
    version = _version(name, binary, path)
    if name == "claude" and spec.version not in version:
        # npm may skip the package's postinstall, which links the native binary in.
        pkg_dir = final / "node_modules" / spec.package
        subprocess.run([node, "install.cjs"], cwd=pkg_dir, capture_output=True, check=False)
        version = _version(name, binary, path)
    return RealCli(name, binary.resolve(), path, spec.model, version)


def install_pypi(name: str, spec: CliPackage) -> RealCli:
    python = _python_312_plus()
    if python is None:
        pytest.skip(f"LOUD SKIP: the real {name} CLI needs Python >= 3.12, none on PATH")
    root = cache_root()
    # A venv cannot be moved (its scripts name its path): built in place, and only used
    # once the marker written after a complete install is there.
    final = root / _dir_name(spec)
    binary = final / "bin" / spec.binary
    with _locked(root, spec):
        if not (final / ".complete").exists():
            shutil.rmtree(final, ignore_errors=True)
            _run_installer(name, [python, "-m", "venv", str(final)])
            pip = str(final / "bin" / "pip")
            _run_installer(name, [pip, "install", "-q", f"{spec.package}=={spec.version}"])
            (final / ".complete").write_text(spec.version)
    path = os.pathsep.join([str(binary.parent), "/usr/bin", "/bin"])
    return RealCli(name, binary, path, spec.model, _version(name, binary, path))


def _python_312_plus() -> str | None:
    """A Python >= 3.12 that really runs: a pyenv shim on PATH may name a version that is
    installed but not selected ("pyenv: python3.13: command not found"), so each candidate
    is tried, pyenv's own installs included."""
    names = [f"python{v}" for v in ("3.13", "3.12", "3.14")]
    candidates = [p for n in names if (p := shutil.which(n))]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates += sorted(str(p) for p in pyenv.glob("3.1[2-9]*/bin/python3"))
    for candidate in candidates:
        probe = [candidate, "-c", "import sys; assert sys.version_info >= (3, 12)"]
        try:
            if subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0:
                return candidate
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


def _run_installer(name: str, argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip(f"LOUD SKIP: installing the real {name} CLI timed out: {' '.join(argv)}")
    if done.returncode == 0:
        return
    output = (done.stderr + done.stdout).strip()
    if any(marker in output for marker in _NETWORK_ERRORS):
        pytest.skip(
            f"LOUD SKIP: the package registry cannot be reached, so the real {name} CLI "
            f"cannot be installed and is NOT tested: {output[-1500:]}"
        )
    pytest.fail(f"installing the real {name} CLI failed ({' '.join(argv)}):\n{output[-3000:]}")


def _version(name: str, binary: Path, path: str) -> str:
    with tempfile.TemporaryDirectory(prefix="olp-cli-version-") as home:
        env = {"PATH": path, "HOME": home, "LANG": "C.UTF-8"}
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, env=env, timeout=60
        )
    if done.returncode != 0:
        pytest.fail(f"the real {name} CLI does not run: {done.stderr[-2000:]}")
    return done.stdout.strip()


if __name__ == "__main__":  # pre-install for CI caches: python tests/real_cli.py claude qwen
    for arg in sys.argv[1:] or list(KNOWN):
        print(real_cli(arg))
