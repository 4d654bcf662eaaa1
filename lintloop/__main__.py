import sys

from lintloop.entry import main

sys.exit(main())
