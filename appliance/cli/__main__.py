"""`python -m longhaul.appliance.cli ...` is the `longhaul` command."""

import sys

from longhaul.appliance.cli.app import main

sys.exit(main())
