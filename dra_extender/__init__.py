"""The `dra-extender` command: one entry point whose subcommands start the scheduler sidecar, the controllers or the webhook."""
