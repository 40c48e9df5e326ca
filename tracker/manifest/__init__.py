"""`--source DIR`: a directory of manifests as the cluster (docs/design.md#manifest-directory-mode).

`source.ManifestSource` composes the parts: reading one file (`load`), the directory and its
watcher (`directory`), the in-memory overlay of writes (`overlay`), the API server's writes
(`writes`) and the stand-in for the resourceclaim controller (`claims`). Knows nothing of the
API server's pieces (tracker/apiserver/); import-linter holds it.
"""
