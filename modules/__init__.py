"""Lightning modules (one per algorithm family) and networks."""
