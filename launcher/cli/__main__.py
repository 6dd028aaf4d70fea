"""`python -m graphtier.launcher.cli` runs the `graphtier` command."""

from graphtier.launcher.cli.entry import main

main()
