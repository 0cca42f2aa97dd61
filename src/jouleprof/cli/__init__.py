"""The `jouleprof` command: one file per subcommand, heavy imports inside each command."""
