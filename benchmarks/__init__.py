"""The repository's benchmarks and studies, outside the package: comparisons with other
libraries and one-off measurements (figures in ``RESULTS.md``). Run from the repository
root, e.g. ``python -m benchmarks.design``; the tests import them from here."""
