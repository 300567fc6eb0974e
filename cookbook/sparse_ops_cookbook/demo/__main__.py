"""``python -m sparse_ops_cookbook.demo``: the same demo as ``sparse-ops demo``."""
import sys

from . import main

sys.exit(main())
