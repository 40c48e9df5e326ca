"""The HTTP edge's routes, one module per concern (probes, verbs, /debug), composed by extender.app.create_app.

Routes reach the cluster state only through the service (extender/service.py):
an import-linter contract and tests/extender/test_edge_contract.py check it.
"""
