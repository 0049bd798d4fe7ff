"""Prices: the validated catalogue (rates per GPU model and pricing model, energy tariff, PUE), the rules that
choose a node's pricing model, and the catalogue versions stored in the database."""
