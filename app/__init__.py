"""The application shell: the `flywheel` CLI, the demo (the main job) and its report.

It stands on top of every other package and nothing imports it (see the import contract in
.importlinter)."""
