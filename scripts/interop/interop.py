"""``make interop``: capture what real instrumentation libraries send, and check our mapping of it.

For each capture script under ``libraries/`` (or the ones named on the command line):

1. make a throw-away virtualenv under ``$RFT_INTEROP_VENVS`` (default ``/tmp/rft-interop``) and
   install the script's dependencies at their current versions (a ``.py`` script declares them
   in a PEP 723 ``# /// script`` block; a folder holds a ``package.json`` and ``capture.mjs``
   for npm);
2. start the fake model server (``fake_openai.py``) and the OTLP receiver (``collector.py``)
   on loopback and run the script against them;
3. write every traces request it sent to ``tests/fixtures/otlp/<library>/`` (``NNN-<scenario>.pb``
   or ``.json``) with ``capture.json`` (library, package versions, scenarios, files).

Then it runs the replay tests (``tests/reasoning/recording/test_otlp_interop.py``), which compare what
the server stores for each fixture with the expectations kept beside it, and prints
``git diff --stat`` of the fixtures: a library whose new version maps differently shows up
as a failing test naming the field that changed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LIBRARIES = HERE / "libraries"
FIXTURES = ROOT / "tests" / "fixtures" / "otlp"
VENVS = Path(os.environ.get("RFT_INTEROP_VENVS", "/tmp/rft-interop"))  # noqa: S108 (throw-away, by design)
PYTHON = os.environ.get("RFT_INTEROP_PYTHON", shutil.which("python3.11") or sys.executable)
TIMEOUT = int(os.environ.get("RFT_INTEROP_TIMEOUT", "600"))

sys.path.insert(0, str(HERE))
import collector  # noqa: E402
import fake_openai  # noqa: E402

_METADATA = re.compile(r"(?m)^# /// script\s*$\s+(?P<content>(^#(| .*)$\s)+)^# ///$")


def libraries() -> dict[str, Path]:
    found = {}
    for path in sorted(LIBRARIES.iterdir()):
        if path.suffix == ".py" and not path.name.startswith("_"):
            found[path.stem.replace("_", "-")] = path
        elif path.is_dir() and (path / "package.json").exists():
            found[path.name.replace("_", "-")] = path
    return found


def dependencies(script: Path) -> list[str]:
    """The PEP 723 ``dependencies`` of a capture script."""
    match = _METADATA.search(script.read_text())
    if match is None:
        raise SystemExit(f"{script}: no '# /// script' block naming its dependencies")
    content = "".join(line[2:] if line.startswith("# ") else line[1:] for line in match["content"].splitlines(True))
    return list(tomllib.loads(content).get("dependencies", []))


def _run(command: list[str], **kwargs: object) -> None:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} … failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def install_python(name: str, script: Path) -> tuple[list[str], dict[str, str]]:
    venv = VENVS / name
    if not (venv / "bin" / "python").exists():
        _run([PYTHON, "-m", "venv", str(venv)])
    wanted = dependencies(script)
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-U", *wanted]
    )
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {item["name"].lower().replace("_", "-"): item["version"] for item in json.loads(listed.stdout)}
    names = {re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-") for requirement in wanted}
    versions = {package: installed[package] for package in sorted(names) if package in installed}
    return [str(venv / "bin" / "python"), str(script)], versions


def install_node(name: str, folder: Path) -> tuple[list[str], dict[str, str]]:
    work = VENVS / name
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(folder / "package.json", work / "package.json")
    # The current versions within package.json's ranges, not the ones an earlier capture locked.
    (work / "package-lock.json").unlink(missing_ok=True)
    for script in folder.glob("*.mjs"):
        shutil.copy(script, work / script.name)
    _run(["npm", "install", "--silent", "--no-audit", "--no-fund"], cwd=work)
    declared = json.loads((folder / "package.json").read_text()).get("dependencies", {})
    versions = {}
    for package in sorted(declared):
        manifest = work / "node_modules" / package / "package.json"
        if manifest.exists():
            versions[package] = json.loads(manifest.read_text())["version"]
    return ["node", str(work / "capture.mjs")], versions


def capture(name: str, path: Path) -> dict[str, object]:
    started = time.monotonic()
    print(f"[{name}] installing into {VENVS / name} …", flush=True)
    command, versions = install_node(name, path) if path.is_dir() else install_python(name, path)
    print(f"[{name}] versions: {', '.join(f'{k} {v}' for k, v in versions.items())}", flush=True)
    model_server, openai_url = fake_openai.start()
    receiver, store, collector_url = collector.start()
    env = {
        **os.environ,
        "PYTHONPATH": str(HERE),
        "NODE_PATH": str(VENVS / name / "node_modules"),
        "RFT_INTEROP_OPENAI_URL": openai_url,
        "RFT_INTEROP_COLLECTOR": collector_url,
        "OPENAI_API_KEY": "sk-interop-fake",
        "OPENAI_BASE_URL": openai_url,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{collector_url}/v1/traces",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "HF_HUB_OFFLINE": "1",
    }
    try:
        result = subprocess.run(command, env=env, cwd=HERE, capture_output=True, text=True, timeout=TIMEOUT)
        time.sleep(0.5)  # a last export may still be in flight
    finally:
        model_server.shutdown()
        receiver.shutdown()
    if result.returncode != 0:
        raise RuntimeError(f"capture script failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    if not store.requests:
        raise RuntimeError(f"the library sent no traces request\n{result.stderr[-4000:]}")
    target = FIXTURES / name
    target.mkdir(parents=True, exist_ok=True)
    for old in target.iterdir():
        if old.suffix in (".pb", ".json") and old.name not in ("expected.json",):
            old.unlink()
    files = []
    for index, request in enumerate(store.requests, start=1):
        extension = "json" if request.content_type == "application/json" else "pb"
        file_name = f"{index:03d}-{request.scenario}.{extension}"
        (target / file_name).write_bytes(request.body)
        files.append(
            {
                "file": file_name,
                "scenario": request.scenario,
                "content_type": request.content_type or "application/x-protobuf",
                "path": request.path,
            }
        )
    manifest: dict[str, object] = {
        "library": name,
        "packages": versions,
        "python": None
        if path.is_dir()
        else subprocess.run(
            [command[0], "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
        ).stdout.strip(),
        "captured_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "script": str(path.relative_to(ROOT)),
        "requests": files,
    }
    (target / "capture.json").write_text(json.dumps(manifest, indent=2) + "\n")
    scenarios = sorted({request.scenario for request in store.requests})
    print(
        f"[{name}] {len(store.requests)} requests ({', '.join(scenarios)}) in {time.monotonic() - started:.0f} s"
        + (f"; other calls: {sorted(set(store.other))}" if store.other else ""),
        flush=True,
    )
    return manifest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("names", nargs="*", help="libraries to capture (default: all)")
    parser.add_argument("--no-tests", action="store_true", help="capture only; do not run the replay tests")
    args = parser.parse_args()
    available = libraries()
    names = args.names or list(available)
    unknown = [name for name in names if name not in available]
    if unknown:
        raise SystemExit(f"unknown libraries {unknown}; available: {', '.join(available)}")
    failed = []
    for name in names:
        try:
            capture(name, available[name])
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"[{name}] FAILED: {exc}", flush=True)
            failed.append(name)
    subprocess.run(["git", "diff", "--stat", "--", str(FIXTURES)], cwd=ROOT)
    status = 0
    if not args.no_tests:
        status = subprocess.run(
            [
                str(ROOT / ".venv" / "bin" / "pytest"),
                "tests/reasoning/recording/test_otlp_interop.py",
                "-p",
                "no:randomly",
                "-q",
            ],
            cwd=ROOT,
        ).returncode
    if failed:
        print(f"capture failed for: {', '.join(failed)}")
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
