"""This machine or a recorded one: CPUs, GPUs, Apple Silicon, memory; a cluster's nodes as one
machine. Imports: config and the leaves."""
