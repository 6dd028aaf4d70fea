"""Tier placement: byte budgets per memory tier -> node-id boundaries of each tier.

`parse_budget` reads "10%", "512MiB" and the like; `TierBudgets` groups the budgets;
`PlacementPlan.from_budgets` turns them into the boundaries the gather and sampler use.
"""

from graphtier.service.placement.plan import PlacementPlan, Tier, TierSize
from graphtier.service.placement.tier_budget import TierBudgets, parse_budget

__all__ = ["PlacementPlan", "Tier", "TierBudgets", "TierSize", "parse_budget"]
