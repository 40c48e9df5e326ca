"""/prioritize: the ranking /filter keeps for the nodes it passed (`scores`), by health first and
then how full each node's own devices are (`packing`; docs/scoring.md).
"""
