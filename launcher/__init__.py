"""graphtier.launcher: everything on the job's side, starting with the `graphtier` CLI."""
