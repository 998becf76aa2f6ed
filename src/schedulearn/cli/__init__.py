"""The `schedulearn` command line: thin Typer commands over an HTTP client and the simulator."""
