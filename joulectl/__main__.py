"""``python -m joulectl`` and the ``joulectl`` console script.

The command line's start-up imports (typer, click and joulectl's own modules) create tens of
thousands of objects and no garbage, and the cyclic collector's passes over them while they load
are several milliseconds of every run. So the collector is off while :mod:`joulectl.cli` loads;
then everything loaded so far is frozen (``gc.freeze``: left out of every later collection, as it
lives as long as the process) and the collector runs again, as before, for the command itself
(docs/PERFORMANCE.md). A program that imports :mod:`joulectl.cli` itself (the tests) is not
touched by this.
"""

import gc

_collecting = gc.isenabled()
gc.disable()
try:
    from joulectl.cli import main as _main
finally:
    gc.freeze()
    if _collecting:
        gc.enable()


def main() -> None:
    """Run the command line (see :func:`joulectl.cli.main`)."""
    _main()


if __name__ == "__main__":
    main()
