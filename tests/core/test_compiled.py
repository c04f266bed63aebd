"""The compiled write path (core/compiled.py): loaded when built from the sources on disk, never
when a source changed since, and mapping what the Python modules map."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from core import compiled

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "otlp"


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter of the project, Django set up (the modules imported)."""
    prelude = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_tests_run_the_compiled_modules() -> None:
    """`make test` compiles first (`make compile`): the suite exercises what the server runs."""
    for module in compiled.MODULES:
        __import__(module)
    manifest = compiled.read_manifest()
    assert manifest is not None, "no compiled build: run `make compile`"
    assert compiled.stale(manifest) == [], "the compiled build is stale: run `make compile`"
    assert compiled.loaded() == list(compiled.MODULES)


def test_a_build_is_stale_when_a_source_or_the_interpreter_differs() -> None:
    manifest = compiled.read_manifest()
    assert manifest is not None, "no compiled build: run `make compile`"
    modules = dict(manifest["modules"])  # type: ignore[call-overload]

    edited = {**manifest, "modules": {**modules, "reasoning.recording.otlp": {**modules["reasoning.recording.otlp"]}}}
    edited["modules"]["reasoning.recording.otlp"]["source_sha256"] = "0" * 64  # type: ignore[index]
    assert compiled.stale(edited) == ["reasoning.recording.otlp changed since it was compiled"]

    other_python = {**manifest, "tag": ".cpython-312-x86_64-linux-gnu.so"}
    assert compiled.stale(other_python) == [
        f"built for .cpython-312-x86_64-linux-gnu.so, this interpreter loads {compiled.build_tag()}"
    ]

    fewer = {**manifest, "modules": {key: value for key, value in modules.items() if key != "core.bulk"}}
    assert compiled.stale(fewer) == ["built from another list of modules"]


def test_a_stale_build_is_not_loaded_and_says_so_once() -> None:
    ran = _python(
        "import core.compiled as c\n"
        "c.digest = lambda path: 'edited'\n"  # every source differs from the build
        "import django; django.setup()\n"
        "from reasoning.recording import otlp, ingest\n"
        "print(otlp.__file__, c.loaded())\n"
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [str(ROOT / "reasoning" / "recording" / "otlp.py"), "[]"]
    assert ran.stderr.count("the compiled write path is not loaded, it runs as Python") == 1, ran.stderr
    assert "reasoning.recording.otlp changed since it was compiled" in ran.stderr


def test_a_module_imported_before_the_finder_keeps_the_whole_group_python() -> None:
    ran = _python(
        "import core.bulk\nimport django; django.setup()\nimport core.compiled as c\n"
        "from reasoning.recording import otlp\nprint(otlp.__file__, c.loaded())\n"
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [str(ROOT / "reasoning" / "recording" / "otlp.py"), "[]"]
    assert "core.bulk was imported before" in ran.stderr


def test_rft_compiled_0_runs_the_python_modules() -> None:
    ran = _python(
        "import django; django.setup()\nimport core.compiled as c\nfrom reasoning.recording import otlp\n"
        "print(otlp.__file__, c.loaded())\n",
        RFT_COMPILED="0",
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [str(ROOT / "reasoning" / "recording" / "otlp.py"), "[]"]
    assert ran.stderr == ""


MAP_FIXTURES = """
import dataclasses, json
from pathlib import Path
import django; django.setup()
from core.compiled import loaded
from reasoning.recording import otlp
out = {"compiled": loaded()}
for body in sorted(Path(FIXTURES).glob("*/*.pb")):
    request = otlp.decode_request(body.read_bytes(), "application/x-protobuf")
    spans, problems = otlp.map_request(request, message_content="drop")
    out[str(body.relative_to(FIXTURES))] = [
        [dataclasses.asdict(span) for span in spans], [dataclasses.asdict(problem) for problem in problems]
    ]
print(json.dumps(out, default=str, sort_keys=True))
"""


def test_the_compiled_mapping_maps_every_captured_library_as_the_python_one_does() -> None:
    """The real libraries' captures (tests/fixtures/otlp), mapped by each build: the same spans."""
    code = f"FIXTURES = {str(FIXTURES)!r}\n{MAP_FIXTURES}"
    as_compiled, as_python = _python(code), _python(code, RFT_COMPILED="0")
    assert as_compiled.returncode == 0, as_compiled.stderr
    assert as_python.returncode == 0, as_python.stderr
    native, python = json.loads(as_compiled.stdout), json.loads(as_python.stdout)
    assert "reasoning.recording.otlp" in native.pop("compiled") and python.pop("compiled") == []
    assert len(native) >= 40 and sum(len(spans) for spans, _ in native.values()) >= 150
    assert native == python
