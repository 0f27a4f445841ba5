"""specwatch: is speculative decoding paying on this node right now?"""

from __future__ import annotations

import sys
from importlib.util import spec_from_file_location
from pathlib import Path

__version__ = "0.1.0"

# The repository keeps collectors/ and widgets/ beside specwatch/ (the design card's top level), and
# installs them as specwatch.collectors and specwatch.widgets. Run from a checkout's root,
# `python -m specwatch` imports this folder rather than the installed package, and the two would
# not be found: where they sit beside this folder, they are found there. Installed, they are
# subfolders, and this finder is not added.
_CHECKOUT = Path(__file__).resolve().parent.parent
_BESIDE = {f"{__name__}.{name}": _CHECKOUT for name in ("collectors", "widgets")
           if not (Path(__file__).parent / name).is_dir() and (_CHECKOUT / name / "__init__.py").is_file()}


class _CheckoutFinder:
    """Finds specwatch.collectors and specwatch.widgets in a checkout's top-level folders."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        folder = _BESIDE.get(name)
        if folder is None:
            return None
        package = folder / name.rpartition(".")[2]
        return spec_from_file_location(name, package / "__init__.py", submodule_search_locations=[str(package)])


# First in line: an editable install of another checkout has its own finder for these two names, and
# this checkout's specwatch must not run with that checkout's collectors and widgets.
if _BESIDE and not any(isinstance(f, type) and f.__name__ == "_CheckoutFinder" for f in sys.meta_path):
    sys.meta_path.insert(0, _CheckoutFinder)
