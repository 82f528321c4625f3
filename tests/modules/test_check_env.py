"""Env <-> algorithm checks (``RLModule.check_env``, :mod:`modules.compatibility`) on specs alone, and network sizes
and action counts taken from the env (``num_actions: null``)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Binary, Bounded, Categorical, MultiCategorical, OneHot, Unbounded

from envs import EnvSpecs
from modules.actor_critic import MLPActorCritic
from modules.dqn import DQNModule
from modules.dvrp_actor_critic import DVRPActorCritic
from modules.ppo import PPOModule
from modules.q_networks import MultiAgentQNetwork, QNetwork
from modules.sac import SACModule, SACNetworks


def _specs(action, features: int = 4, agents: int | None = None, name: str | None = "TestEnv-v0",
           **extra: torch.Tensor) -> EnvSpecs:
    """Specs of an env with ``action`` (one agent's spec; stacked R times with ``agents``) and an observation of
    ``features`` (plus ``extra`` entries)."""
    lead = (agents,) if agents is not None else ()
    entries = {k: v.unsqueeze(0) for k, v in extra.items()}
    observation = TensorDict(observation=torch.zeros(1, *lead, features), **entries, batch_size=[1])
    full = action.expand(agents, *action.shape) if agents is not None else action
    return EnvSpecs(full, action, observation, agents, name)


CARTPOLE = dict(action=Categorical(2))
PENDULUM = dict(action=Bounded(-2.0, 2.0, shape=(1,)))


@pytest.mark.parametrize("spec,kind,count,words", [
    (Categorical(3), "discrete", 3, "3 discrete actions"),
    (OneHot(4), "discrete", 4, "4 discrete actions"),
    (Bounded(-1.0, 1.0, shape=(2,)), "continuous", None, "continuous actions [2] (bounded)"),
    (Unbounded(shape=(2,)), "continuous", None, "continuous actions [2] (unbounded)"),
    (MultiCategorical([3, 3]), "multi-discrete", None, "multi-discrete actions [2] (MultiCategorical)"),
    (Categorical(3, shape=(2,)), "multi-discrete", None, "multi-discrete actions [2] (Categorical)"),
    (Binary(n=3), "multi-discrete", None, "multi-discrete actions [3] (Binary)"),
])
def test_action_kinds_and_counts_are_read_off_the_spec(spec, kind, count, words):
    specs = _specs(spec)
    assert (specs.action_kind, specs.num_actions, specs.describe_actions()) == (kind, count, words)


def test_dqn_takes_discrete_actions_and_names_both_sides():
    with pytest.raises(ValueError, match=r"^model\.class_path=modules\.dqn\.DQNModule takes discrete actions, but the "
                                         r"env \(TestEnv-v0\) has continuous actions \[1\] \(bounded\): for continuous "
                                         r"actions use modules\.ppo\.PPOModule, or modules\.sac\.SACModule"):
        DQNModule(QNetwork()).check_env(_specs(**PENDULUM))
    DQNModule(QNetwork()).check_env(_specs(**CARTPOLE))


def test_an_explicit_num_actions_must_be_the_envs():
    with pytest.raises(ValueError, match=r"^model\.init_args\.network\.init_args\.num_actions=2 but the env "
                                         r"\(TestEnv-v0\) has 3 discrete actions: remove num_actions to take "
                                         r"it from the env$"):
        DQNModule(QNetwork(2)).check_env(_specs(Categorical(3)))
    with pytest.raises(ValueError, match=r"num_actions=3 but the env \(TestEnv-v0\) has 2 discrete actions"):
        PPOModule(MLPActorCritic(3), action_mask_key=None).check_env(_specs(**CARTPOLE))
    DQNModule(QNetwork(3)).check_env(_specs(Categorical(3)))


def test_ppo_takes_one_agent_with_discrete_or_continuous_actions():
    module = PPOModule(MLPActorCritic(), action_mask_key=None)
    module.check_env(_specs(**PENDULUM))  # a Gaussian policy
    module.check_env(_specs(Unbounded(shape=(2,))))
    with pytest.raises(ValueError, match=r"num_actions=2 but the env \(TestEnv-v0\) has continuous actions \[1\]"):
        PPOModule(MLPActorCritic(2), action_mask_key=None).check_env(_specs(**PENDULUM))
    with pytest.raises(ValueError, match=r"PPOModule trains single-agent envs, but the env \(TestEnv-v0\) has 4 "):
        module.check_env(_specs(Categorical(5), agents=4))
    with pytest.raises(ValueError, match=r"PPOModule takes discrete or continuous actions, but the env \(TestEnv-v0\) "
                                         r"has multi-discrete actions \[2\] \(MultiCategorical\)$"):
        module.check_env(_specs(MultiCategorical([3, 3])))


def test_sac_takes_discrete_and_bounded_continuous_actions():
    module = SACModule(SACNetworks((8,), (8,)))
    for ok in (_specs(**PENDULUM), _specs(**CARTPOLE), _specs(Categorical(5), agents=3)):
        module.check_env(ok)
    with pytest.raises(ValueError, match=r"SACModule takes bounded continuous actions .*has continuous actions \[2\] "
                                         r"\(unbounded\)"):
        module.check_env(_specs(Unbounded(shape=(2,))))
    with pytest.raises(ValueError, match=r"SACModule takes discrete or continuous actions, but the env \(TestEnv-v0\) "
                                         r"has multi-discrete"):
        module.check_env(_specs(MultiCategorical([2, 2])))


def test_observation_entries_the_networks_read_must_be_in_the_env():
    with pytest.raises(ValueError, match=r"^model\.init_args\.action_mask_key reads 'action_mask', but the env "
                                         r"\(TestEnv-v0\) gives no 'action_mask' \(it gives: observation\): set it "
                                         r"to null"):
        DQNModule(QNetwork(), action_mask_key="action_mask").check_env(_specs(**CARTPOLE))
    with pytest.raises(ValueError, match=r"^model\.init_args\.in_keys reads 'agent_id'"):
        DQNModule(QNetwork(), in_keys=("observation", "agent_id")).check_env(_specs(**CARTPOLE))
    with pytest.raises(ValueError, match=r"^model\.init_args\.observation_key reads 'pixels'"):
        SACModule(SACNetworks(), observation_key="pixels").check_env(_specs(**PENDULUM))
    with pytest.raises(ValueError, match=r"network \(class_path=modules\.dvrp_actor_critic\.DVRPActorCritic\) reads "
                                         r"'customers', but the env gives no 'customers'"):
        mask = torch.ones(4, dtype=torch.bool)
        PPOModule(DVRPActorCritic()).check_env(_specs(Categorical(4), name=None, action_mask=mask))


def test_multi_agent_networks_check_and_take_the_number_of_agents():
    agents = dict(agent_id=torch.zeros(4, 4), action_mask=torch.ones(4, 5, dtype=torch.bool))
    vacuum = _specs(Categorical(5), agents=4, name="VacuumConfig", **agents)
    keys = dict(in_keys=("observation", "agent_id"), action_mask_key="action_mask")
    with pytest.raises(ValueError, match=r"^model\.init_args\.network\.init_args\.num_agents=3 but the env "
                                         r"\(VacuumConfig\) has 4 agents \(env\.num_agents=4"):
        DQNModule(MultiAgentQNetwork(3), **keys).check_env(vacuum)
    with pytest.raises(ValueError, match=r"^model\.init_args\.network\.class_path="
                                         r"modules\.q_networks\.MultiAgentQNetwork "
                                         r"is a multi-agent network, but the env \(TestEnv-v0\) has one agent"):
        DQNModule(MultiAgentQNetwork()).check_env(_specs(**CARTPOLE))
    for sharing in (True, False):
        module = DQNModule(MultiAgentQNetwork(parameter_sharing=sharing, hidden_dims=(8,)), **keys)
        module.check_env(vacuum)
        module.build_on(vacuum)
        assert module.network.num_agents == 4 and module.network.num_actions == 5
        assert len(module.network.heads) == (1 if sharing else 4)
        assert all(head.advantage.out_features == 5 for head in module.network.heads)


@pytest.mark.parametrize("make,key", [
    (lambda: QNetwork(hidden_dims=(-3,)), r"hidden_dims=\[-3\]"),
    (lambda: QNetwork(0), r"num_actions=0"),
    (lambda: MultiAgentQNetwork(0), r"num_agents=0"),
    (lambda: MLPActorCritic(hidden_dims=(64, 0)), r"hidden_dims=\[64, 0\]"),
    (lambda: SACNetworks(actor_hidden_dims=(256, -1)), r"actor_hidden_dims=\[256, -1\]"),
    (lambda: SACNetworks(critic_hidden_dims=(0,)), r"critic_hidden_dims=\[0\]"),
    (lambda: DVRPActorCritic(hidden_dim=-8), r"hidden_dim=-8"),
])
def test_bad_network_sizes_stop_at_construction(make, key):
    with pytest.raises(ValueError, match=rf"^model\.init_args\.network\.init_args\.{key} is not allowed: "):
        make()


@pytest.mark.parametrize("dueling", [False, True])
def test_qnetwork_takes_its_actions_from_the_env_and_matches_an_explicit_one(dueling):
    """``num_actions: null`` builds the heads on the env's spec: the same module tree and, on the same random state,
    the same weights as the network given the number."""
    observation = TensorDict(observation=torch.zeros(1, 6), batch_size=[1])
    built = []
    for num_actions in (None, 3):
        torch.manual_seed(0)
        module = DQNModule(QNetwork(num_actions, (8,), dueling=dueling))
        module.build(Categorical(3), observation)
        built.append(module.network.state_dict())
    assert list(built[0]) == list(built[1]) and all(torch.equal(built[0][k], built[1][k]) for k in built[0])
    with pytest.raises(ValueError, match=r"num_actions=3 but the env has 4 actions"):
        DQNModule(QNetwork(3)).build(Categorical(4), observation)


def test_mlp_actor_critic_takes_its_actions_from_the_env_and_matches_an_explicit_one():
    specs = _specs(Categorical(3), features=5)
    built = []
    for num_actions in (None, 3):
        torch.manual_seed(0)
        module = PPOModule(MLPActorCritic(num_actions, (8,)), action_mask_key=None)
        module.build_on(specs)
        built.append(module.network.state_dict())
    assert list(built[0]) == list(built[1]) and all(torch.equal(built[0][k], built[1][k]) for k in built[0])
    assert built[0]["actor.2.weight"].shape == (3, 8)
