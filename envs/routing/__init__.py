"""The static VRPTW: a batch of routing problems (:mod:`~envs.routing.problem`) and the route-construction
rules every plan obeys (:mod:`~envs.routing.construction`). The lower layer of the routing envs: the DVRP
env's neural oracle decodes with these rules, and the VRPTW construction env (:mod:`envs.vrptw`) steps them."""
