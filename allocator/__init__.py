"""The pure core of dra-extender: DRA value types, toleration matching, CEL and
the structured allocation search. No I/O lives here (held by import-linter)."""
