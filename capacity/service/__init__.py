"""The capacity application layer: claims, occupancy, agents, observations."""
