"""Write the small intersphinx inventories the site falls back on when it cannot reach the libraries'
published ones (an offline build, CI): only the names pyrolik's signatures and guides link to.

    python docs/_intersphinx/build.py

Each entry is ``name: (role, page relative to the library's documentation root)``; ``$`` in the page
stands for the name, as in Sphinx's inventories. Add a name here when a docstring starts naming a
new type of one of these libraries, and run the script.
"""

from __future__ import annotations

import zlib
from pathlib import Path

HERE = Path(__file__).parent

ENTRIES: dict[str, dict[str, tuple[str, str]]] = {
    # numpydoc links bool, sequence, callable, ... in Parameters sections to Python's documentation
    "python": {
        "bltin-boolean-values": ("std:label", "library/stdtypes.html#$"),
        "sequence": ("std:term", "glossary.html#term-sequence"),
        "callable": ("std:term", "glossary.html#term-callable"),
        "iterable": ("std:term", "glossary.html#term-iterable"),
        "function": ("std:term", "glossary.html#term-function"),
        "generator": ("std:term", "glossary.html#term-generator"),
        "path-like object": ("std:term", "glossary.html#term-path-like-object"),
        "None": ("py:data", "library/constants.html#$"),
        "True": ("py:data", "library/constants.html#$"),
        "False": ("py:data", "library/constants.html#$"),
        "int": ("py:class", "library/functions.html#$"),
        "float": ("py:class", "library/functions.html#$"),
        "bool": ("py:class", "library/functions.html#$"),
        "object": ("py:class", "library/functions.html#$"),
        "str": ("py:class", "library/stdtypes.html#$"),
        "dict": ("py:class", "library/stdtypes.html#$"),
        "list": ("py:class", "library/stdtypes.html#$"),
        "tuple": ("py:class", "library/stdtypes.html#$"),
    },
    "torch": {
        "torch.Tensor": ("py:class", "tensors.html#$"),
        "torch.Generator": ("py:class", "generated/torch.Generator.html#$"),
        "torch.dtype": ("py:class", "tensor_attributes.html#$"),
        "torch.device": ("py:class", "tensor_attributes.html#$"),
        "torch.nn.Module": ("py:class", "generated/torch.nn.Module.html#$"),
    },
    "pyro": {
        "pyro.plate": ("py:class", "primitives.html#pyro.primitives.plate"),
        "pyro.primitives.plate": ("py:class", "primitives.html#$"),
        "pyro.sample": ("py:function", "primitives.html#pyro.primitives.sample"),
        "pyro.primitives.sample": ("py:function", "primitives.html#$"),
        "pyro.distributions.Distribution": ("py:class", "distributions.html#$"),
    },
    "arviz": {
        "arviz.InferenceData": ("py:class", "api/generated/$.html#$"),
        "arviz.summary": ("py:function", "api/generated/$.html#$"),
        "arviz.from_dict": ("py:function", "api/generated/$.html#$"),
    },
    "xarray": {
        "xarray.DataTree": ("py:class", "generated/$.html#$"),
        "xarray.Dataset": ("py:class", "generated/$.html#$"),
        "xarray.DataArray": ("py:class", "generated/$.html#$"),
    },
    "pandas": {
        "pandas.DataFrame": ("py:class", "reference/api/$.html#$"),
        "pandas.Series": ("py:class", "reference/api/$.html#$"),
    },
    "numpy": {
        "numpy.ndarray": ("py:class", "reference/generated/$.html#$"),
    },
}


def inventory(project: str, entries: dict[str, tuple[str, str]]) -> bytes:
    head = ("# Sphinx inventory version 2\n"
            f"# Project: {project}\n# Version: stable\n"
            "# The remainder of this file is compressed using zlib.\n").encode()
    body = "".join(f"{name} {role} {-1 if role == 'std:label' else 1} "
                   f"{uri.replace('$', name) if uri.count('$') > 1 else uri} "
                   f"{'Boolean Values' if role == 'std:label' else '-'}\n"
                   for name, (role, uri) in sorted(entries.items()))
    return head + zlib.compress(body.encode(), 9)


def main() -> None:
    for project, entries in ENTRIES.items():
        (HERE / f"{project}.inv").write_bytes(inventory(project, entries))


if __name__ == "__main__":
    main()
