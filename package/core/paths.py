"""Where longhaul's checkout and its build outputs are: one place for every module that needs them.

longhaul is installed editable (`make setup`, and at /opt/longhaul in the appliance image), so the
checkout is this file's grandparent and the C helpers are under its build/.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_BIN = REPO / "build" / "bin"
BUILD_LIB = REPO / "build" / "lib"
PROFILES = REPO / "profiles"
