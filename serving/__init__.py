"""HTTP and process plumbing every command shares: the listener thread, request bodies, metrics, logs, argument types."""
