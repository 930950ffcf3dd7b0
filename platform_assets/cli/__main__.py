import sys

from platform_assets.cli import main

sys.exit(main())
