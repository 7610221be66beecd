import sys

from gapbench.cli import main

sys.exit(main())
