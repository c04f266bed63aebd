"""``reasoning-flow-sdk``: the SDK's console script.

    reasoning-flow-sdk simulate --turns 1000      # agent turns against a server, with figures
    reasoning-flow-sdk dispatcher --port 8700     # the research dispatcher webhook

Each subcommand lives in its module as ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

SUBCOMMANDS = {
    "simulate": ("reasoning_flow_sdk.simulate", "run agent turns against a server and print the figures"),
    "dispatcher": ("reasoning_flow_sdk.dispatcher", "serve the research dispatcher webhook"),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reasoning-flow-sdk", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        modules[name] = module
        module.add_arguments(commands.add_parser(name, help=help_text, description=module.__doc__))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    result: int = modules[args.command].run(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
