import sys

from memoryplus.cli.main import main

sys.exit(main())
