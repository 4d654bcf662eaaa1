import sys

from lintloop.cli import main

sys.exit(main())
