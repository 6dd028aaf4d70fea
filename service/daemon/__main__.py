"""`python -m graphtier.service.daemon` runs `graphtierd`."""

from graphtier.service.daemon.main import run

run()
