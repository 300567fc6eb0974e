"""Sphinx configuration of the sparse-ops documentation.

Build: ``python -m sphinx -W --keep-going -n -b html docs docs/_build/html`` (the ``docs``
extra installs Sphinx, furo and myst-parser). The reference pages (operators, API, C ABI,
command line) are generated at each build by ``docs/_ext/sparse_ops_docs.py`` into
``docs/reference/generated/``; the guides are Markdown (MyST).
"""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import sparse_ops  # noqa: E402

project = "sparse-ops"
author = "the sparse-ops developers"
copyright = "2026, the sparse-ops developers"
release = version = sparse_ops.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sparse_ops_docs"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"sparse-ops {release}"

# every cross-reference to our own names must resolve; other projects' names (NumPy, torch,
# typing, ...) are left as text: the build runs offline, without their inventories
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(?!sparse_ops\b).*"),
    (r"py:.*", r"sparse_ops(\.\w+)*\._\w+"),  # private names in signatures: nothing to link to
    (r"py:class", r"sparse_ops\.jax\.spec\.CallSpec"),  # the JAX bridge's internal call description
]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
