import sys

from mpijob_testbed.cli import main

sys.exit(main())
