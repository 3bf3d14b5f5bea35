"""The reference runtime agent (``truerun agent``): runs attempts as local processes, each
under a supervisor of its own. Kept import-light: the supervisor imports this package."""
