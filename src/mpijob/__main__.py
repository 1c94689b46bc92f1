import sys

from mpijob.cli.main import main

sys.exit(main())
