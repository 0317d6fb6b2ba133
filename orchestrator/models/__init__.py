"""Model references and their metadata (GGUF headers, Hugging Face folders, other tools' stores),
the vocabulary rules, the catalog and the testbed files. Imports: config and the leaves."""
