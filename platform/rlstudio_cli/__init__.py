"""`rlstudio`: a command-line client of RL Studio's REST API (/api/v1/, docs/cli.md).

Standard library only (argparse, urllib.request, json), and never Django or the platform's own
modules (tests/test_import_graph.py checks it): it installs and runs anywhere a script or a CI job does.
"""
__version__ = "0.1.0"
