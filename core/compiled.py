"""The write path's hot modules, compiled to C by mypyc, and loaded only while they match their source.

``make compile`` (a step of ``make run``, ``make test`` and the benchmarks; ``scripts/compile.py``)
compiles the modules of :data:`MODULES` together, with mypyc (it comes with mypy) and the machine's
C compiler, into ``.build/compiled/``, and writes there a manifest: each module's extension file and
the SHA-256 of the source it was compiled from. ``config`` calls :func:`install` before Django loads
anything, so every process (the web workers, the job worker, the chainer, ``manage.py``, the tests)
imports the compiled modules instead of the ``.py`` files, but only when the manifest says they were
compiled, by this interpreter, from exactly the sources on disk. A module edited since is not
shadowed by an old build: then none of them is loaded (they were compiled as one group and call one
another directly), the process runs them as Python, and says so once on stderr. ``RFT_COMPILED=0``
runs them as Python on purpose (a profiler that reads Python frames, py-spy or cProfile, sees
nothing inside compiled functions).

The modules are the OTLP mapping (``otlp``, the conventions), the placing and writing of spans and
flows (``traces``, ``ingest``), the row encoding (``core.bulk``), the validators and their plain-text
check (``core.compiled_serializers``, ``core.plain_text``), the audit events' checks and canonical
bytes (``audit.services``, ``audit.canonical``), the close's radar and its scores
(``reasoning.radar``, ``pathways.radar``, ``reasoning.dimensions``) and the summary guard: the web
process's per-span work (docs/performance.md). They are ordinary, type-checked
Python; mypyc compiles them by their annotations, and a value that contradicts an annotation raises
``TypeError`` where Python would have carried on. A dataclass's generated ``__init__`` runs as
Python (a frozen one's through ``object.__setattr__``, twenty times a native call's cost): the
classes made once a span or more have an explicit one. ``monkeypatch.setattr`` on a compiled module
does not reach the calls between compiled functions.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
BUILD_DIR = ROOT / ".build" / "compiled"
MANIFEST = BUILD_DIR / "manifest.json"
# The name of the shared library mypyc puts the group's code in (``<GROUP>__mypyc``).
GROUP = "rft_hot"

MODULES: tuple[str, ...] = (
    "audit.canonical",
    "audit.services",
    "core.bulk",
    "core.compiled_serializers",
    "core.plain_text",
    "pathways.radar",
    "reasoning.dimensions",
    "reasoning.radar",
    "reasoning.summary_guard",
    "reasoning.recording.conventions",
    "reasoning.recording.conventions.base",
    "reasoning.recording.conventions.genai",
    "reasoning.recording.conventions.langfuse",
    "reasoning.recording.conventions.logfire",
    "reasoning.recording.conventions.mlflow",
    "reasoning.recording.conventions.openinference",
    "reasoning.recording.conventions.traceloop",
    "reasoning.recording.conventions.vercel",
    "reasoning.recording.otlp",
    "reasoning.recording.traces",
    "reasoning.recording.ingest",
)


def source_of(module: str) -> Path:
    """The ``.py`` file of ``module`` (a package's ``__init__.py``)."""
    base = ROOT.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_tag() -> str:
    """What a build must have been made for: this interpreter's extension suffix."""
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def stale(manifest: dict[str, object], modules: Sequence[str] = MODULES) -> list[str]:
    """Why ``manifest`` cannot be loaded (empty when it can): each module whose source or
    extension differs from the build, or a build made for another interpreter or module list."""
    reasons: list[str] = []
    if manifest.get("tag") != build_tag():
        reasons.append(f"built for {manifest.get('tag')}, this interpreter loads {build_tag()}")
    built = manifest.get("modules")
    if not isinstance(built, dict) or sorted(built) != sorted(modules):
        return [*reasons, "built from another list of modules"]
    for module in modules:
        entry, source = built[module], source_of(module)
        if not source.is_file():
            reasons.append(f"{module} has no source")
        elif not isinstance(entry, dict) or entry.get("source_sha256") != digest(source):
            reasons.append(f"{module} changed since it was compiled")
        elif not (BUILD_DIR / str(entry.get("file"))).is_file():
            reasons.append(f"{module}'s extension is missing")
    if not (BUILD_DIR / str(manifest.get("group_file"))).is_file():
        reasons.append("the group's shared library is missing")
    return reasons


def read_manifest() -> dict[str, object] | None:
    try:
        loaded = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules (and the group's shared library) in the build directory."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        source = source_of(fullname) if fullname in MODULES else None
        # A compiled package still finds its submodules in its source directory.
        package = [str(source.parent)] if source is not None and source.name == "__init__.py" else None
        return importlib.util.spec_from_file_location(fullname, file, loader=loader, submodule_search_locations=package)


_installed: _CompiledFinder | None = None


def install() -> bool:
    """Load the compiled modules from now on, if the build matches the sources; True when it does."""
    global _installed
    if _installed is not None:
        return True
    if os.environ.get("RFT_COMPILED", "1") == "0":
        return False
    manifest = read_manifest()
    if manifest is None:
        return False  # never compiled (``make compile``): the modules run as Python
    reasons = stale(manifest)
    # One group calls itself directly: a module already imported as Python would run beside its
    # compiled copy, each with its own state. Load all of them compiled, or none.
    reasons += [f"{module} was imported before" for module in MODULES if module in sys.modules]
    if reasons:
        sys.stderr.write(
            "reasoning-flow-tracker: the compiled write path is not loaded, it runs as Python "
            f"({'; '.join(reasons)}); `make compile` builds it again\n"
        )
        return False
    modules = manifest["modules"]
    assert isinstance(modules, dict)
    files = {module: BUILD_DIR / entry["file"] for module, entry in modules.items()}
    files[f"{GROUP}__mypyc"] = BUILD_DIR / str(manifest["group_file"])
    _installed = _CompiledFinder(files)
    sys.meta_path.insert(0, _installed)
    return True


def loaded() -> list[str]:
    """The modules of :data:`MODULES` imported so far from their compiled extension."""
    return [
        name
        for name in MODULES
        if (module := sys.modules.get(name)) is not None and str(getattr(module, "__file__", "")).endswith(build_tag())
    ]
