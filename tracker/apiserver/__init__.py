"""The API server as a source, and everything else that talks to it.

`source.ApiSource` wires one reflector per kind (`reflector`), discovery of the optional APIs
(`discovery`) and the writes (`writes`: each a request value built in `requests`, sent by one
executor); `kubeconfig` checks the kubeconfig before anything connects and `leadership` follows
or takes the Lease. Knows nothing of the manifest source (tracker/manifest/); import-linter holds it.
"""
