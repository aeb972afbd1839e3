"""Client subcommands, one module each."""
