"""`python -m graphtier`: the `graphtier` command, for environments without its script on PATH."""

from graphtier.launcher.cli.app import main

if __name__ == "__main__":
    main()
