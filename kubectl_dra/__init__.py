"""`kubectl dra`: device taints and DRA scheduling views computed locally from one list of each kind."""
