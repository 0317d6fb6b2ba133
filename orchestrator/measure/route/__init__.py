"""Speculation per request: a request's kind, what a setting costs it, the route's choice."""
