"""`aeon serve`: the HTTP API, its run feed and the run page."""
