"""`python -m graphtier.service.daemon` runs `graphtierd`."""

import sys

from graphtier.service.daemon.main import main

sys.exit(main())
