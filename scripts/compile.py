"""``make compile``: compile the write path's hot modules with mypyc into ``.build/compiled/``.

The modules are ``core.compiled.MODULES``; ``core.compiled`` loads the build only while it matches
the sources (its docstring says how). Nothing is done when the manifest already matches them, so
every ``make run`` and ``make test`` can ask for it. mypyc generates C from the modules' annotations
(about a minute and a half on a 2-core machine) and the machine's C compiler builds one extension
per module and one shared library for the group. Without a C compiler or the Python headers the
build fails: with ``--optional`` (``make run``) the stack then runs the modules as Python, with a
warning; without it (``make test``, the benchmarks) the command fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.compiled import BUILD_DIR, GROUP, MANIFEST, MODULES, build_tag, digest, read_manifest, source_of, stale  # noqa: E402


def _build(scratch: Path) -> dict[str, object]:
    from mypyc.build import mypycify
    from setuptools import setup

    sources = [str(source_of(module).relative_to(ROOT)) for module in MODULES]
    extensions = mypycify(sources, opt_level="3", group_name=GROUP, target_dir=str(scratch / "c"))
    setup(
        name=GROUP,
        ext_modules=extensions,
        script_args=["--quiet", "build_ext", "--build-lib", str(scratch / "lib"), "--build-temp", str(scratch / "o")],
    )
    suffix = build_tag()
    modules = {}
    for module in MODULES:
        file = source_of(module).relative_to(ROOT).with_suffix(suffix)  # a package's: its __init__
        if not (scratch / "lib" / file).is_file():
            raise SystemExit(f"compile: mypyc built no {file}")
        modules[module] = {"file": str(file), "source_sha256": digest(source_of(module))}
    group_file = f"{GROUP}__mypyc{suffix}"
    if not (scratch / "lib" / group_file).is_file():
        raise SystemExit(f"compile: mypyc built no {group_file}")
    return {"tag": suffix, "group_file": group_file, "modules": modules}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optional", action="store_true", help="a failed build warns instead of failing")
    parser.add_argument("--force", action="store_true", help="build even when the build matches the sources")
    args = parser.parse_args()

    manifest = read_manifest()
    if manifest is not None and not stale(manifest) and not args.force:
        print(f"compile: the {len(MODULES)} compiled modules match their sources")
        return 0
    started = time.monotonic()
    print(f"compile: compiling {len(MODULES)} modules with mypyc (about a minute and a half)", flush=True)
    with tempfile.TemporaryDirectory(prefix="rft-compile-") as scratch_dir:
        scratch = Path(scratch_dir)
        try:
            built = _build(scratch)
        except (Exception, SystemExit) as failure:  # the compiler's own errors are printed above it
            if not args.optional:
                print(f"compile: FAILED ({failure})", file=sys.stderr)
                return 1
            print(f"compile: failed ({failure}); the write path runs as Python", file=sys.stderr)
            return 0
        # Replace the build whole: the old manifest goes first, so no process loads a mix.
        MANIFEST.unlink(missing_ok=True)
        shutil.rmtree(BUILD_DIR, ignore_errors=True)
        shutil.copytree(scratch / "lib", BUILD_DIR)
        MANIFEST.write_text(json.dumps(built, indent=2, sort_keys=True) + "\n")
    print(f"compile: done in {time.monotonic() - started:.0f} s ({BUILD_DIR.relative_to(ROOT)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
