import sys

from tritonforge.cli import main

sys.exit(main())
