"""The pipeline: which stages a recipe's builds are made of, how they are wired, and the project that runs
them (a recipe with its store and build folder)."""
