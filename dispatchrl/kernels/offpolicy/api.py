"""Declarations of the reinforcement-learning generic functions: replay storage, column
plumbing, exploration noise, TD targets, episode bookkeeping and the SAC Gaussian head.

Struct arguments (replay buffers, batches, episode logs) are plain objects with Array fields;
the declarations check every field, methods unpack them into flat kernel calls.
"""

import numpy as np

from ...checks import check_array, check_device, check_number
from ...dispatch import generic
from ...errors import ConfigError, ShapeError

__all__ = [
    "EPISODE_LOG_FIELDS",
    "LOG_STD_MAX",
    "LOG_STD_MIN",
    "RING_FIELDS",
    "TRANSITION_FIELDS",
    "TRANSITION_RECORDS",
    "accumulate_actor_stats",
    "accumulate_critic_stats",
    "accumulate_q_stats",
    "accumulate_sac_actor_stats",
    "add_clipped_noise",
    "check_batch_rows",
    "check_transitions",
    "concat_columns",
    "dqn_targets",
    "dueling_q",
    "dueling_q_backward",
    "entropy_temperature_gradient",
    "episode_log_arrays",
    "epsilon_greedy",
    "gaussian_tanh_backward",
    "gaussian_tanh_sample",
    "q_huber_gradient",
    "replay_add",
    "replay_sample",
    "select_min_rows",
    "slice_columns",
    "soft_td_target",
    "taken_q",
    "td_target",
    "track_episodes",
    "transition_arrays",
]

#: SAC log-std clamp (Stable-Baselines3's LOG_STD_MIN / LOG_STD_MAX)
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
#: the arrays of a Transitions (dispatchrl.data.replay), in the order kernels take them
TRANSITION_FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
#: a replay ring's arrays as kernels name them beside a batch's (b_obs, ...)
RING_FIELDS = tuple("b_" + field for field in TRANSITION_FIELDS)
#: element bodies take a step's or batch's arrays as one tuple ``transition`` and a ring's as
#: ``ring``; their generated kernels take the arrays one by one (``per_index(..., fields=)``)
TRANSITION_RECORDS = {"transition": TRANSITION_FIELDS, "ring": RING_FIELDS}
#: the arrays of an EpisodeLog (dispatchrl.data.replay), in the order kernels take them
EPISODE_LOG_FIELDS = ("running_return", "running_length", "returns", "lengths", "end_steps", "count")


def episode_log_arrays(log) -> tuple:
    """The arrays of an EpisodeLog ``log`` in :data:`EPISODE_LOG_FIELDS` order."""
    return tuple(getattr(log, field) for field in EPISODE_LOG_FIELDS)


def transition_arrays(t) -> tuple:
    """The arrays of a Transitions (or ReplayRing) ``t`` in :data:`TRANSITION_FIELDS` order."""
    return tuple(getattr(t, field) for field in TRANSITION_FIELDS)


def check_transitions(fn, device, name, t, rows=None):
    """obs (R, O), action (R, A), reward (R,), next_obs (R, O), terminated/truncated (R,) bool."""
    check_array(fn, f"{name}.obs", t.obs, device, shape=(rows, None))
    rows, obs_dim = t.obs.shape
    check_array(fn, f"{name}.action", t.action, device, shape=(rows, None), dtype=t.obs.dtype)
    check_array(fn, f"{name}.reward", t.reward, device, shape=(rows,), dtype=t.obs.dtype)
    check_array(fn, f"{name}.next_obs", t.next_obs, device, shape=(rows, obs_dim), dtype=t.obs.dtype)
    for flag in ("terminated", "truncated"):
        check_array(fn, f"{name}.{flag}", getattr(t, flag), device, shape=(rows,), dtype=np.bool_)
    return rows, obs_dim, t.action.shape[1]


def check_batch_rows(fn, buffer, batch):
    """A batch for ``buffer`` has its row shapes and dtype (both Transitions already checked)."""
    rows, batch_rows = ((t.obs.shape[1], t.action.shape[1]) for t in (buffer, batch))
    if batch_rows != rows or batch.obs.dtype != buffer.obs.dtype:
        raise ShapeError(
            f"{fn}: batch rows are {batch_rows} {batch.obs.dtype}, buffer rows are {rows} {buffer.obs.dtype}"
        )


@generic(inplace=("buffer",))
def replay_add(device, buffer, obs, action, reward, next_obs, terminated, truncated):
    """Append one transition per environment row to the circular ``buffer`` (overwriting the
    oldest when full). ``terminated`` and ``truncated`` are stored apart, so TD targets bootstrap
    through truncation but not through termination."""
    fn = "replay_add"
    check_device(fn, device)
    _, obs_dim, action_dim = check_transitions(fn, device, "buffer", buffer)
    check_array(fn, "buffer.position", buffer.position, device, shape=(1,), dtype=np.int64)
    check_array(fn, "buffer.size", buffer.size, device, shape=(1,), dtype=np.int64)
    check_array(fn, "obs", obs, device, shape=(None, obs_dim), dtype=buffer.obs.dtype)
    n = obs.shape[0]
    check_array(fn, "action", action, device, shape=(n, action_dim), dtype=buffer.obs.dtype)
    check_array(fn, "reward", reward, device, shape=(n,), dtype=buffer.obs.dtype)
    check_array(fn, "next_obs", next_obs, device, shape=(n, obs_dim), dtype=buffer.obs.dtype)
    check_array(fn, "terminated", terminated, device, shape=(n,), dtype=np.bool_)
    check_array(fn, "truncated", truncated, device, shape=(n,), dtype=np.bool_)
    if n > buffer.obs.shape[0]:
        raise ShapeError(f"{fn}: {n} rows do not fit a buffer of capacity {buffer.obs.shape[0]}")
    return device, buffer, obs, action, reward, next_obs, terminated, truncated


@generic(inplace=("rng",), outputs=("batch",))
def replay_sample(device, rng, buffer, batch):
    """Fill ``batch`` with rows drawn uniformly (with replacement) from the filled part of
    ``buffer``, using the counter stream ``rng``. The buffer must hold at least one transition."""
    fn = "replay_sample"
    check_device(fn, device)
    check_array(fn, "rng", rng, device, shape=(2,), dtype=np.uint64)
    check_transitions(fn, device, "buffer", buffer)
    check_array(fn, "buffer.size", buffer.size, device, shape=(1,), dtype=np.int64)
    check_transitions(fn, device, "batch", batch)
    check_batch_rows(fn, buffer, batch)
    return device, rng, buffer, batch


@generic(outputs=("out",))
def concat_columns(device, a, b, out):
    """``out = [a, b]`` side by side (critic input = observation and action)."""
    check_device("concat_columns", device)
    check_array("concat_columns", "a", a, device, shape=(None, None))
    check_array("concat_columns", "b", b, device, shape=(a.shape[0], None), dtype=a.dtype)
    check_array("concat_columns", "out", out, device, shape=(a.shape[0], a.shape[1] + b.shape[1]), dtype=a.dtype)
    return device, a, b, out


@generic(outputs=("out",))
def slice_columns(device, x, start, out):
    """``out = x[:, start:start + out.shape[1]]`` (the action part of a critic's input gradient)."""
    check_device("slice_columns", device)
    check_array("slice_columns", "x", x, device, shape=(None, None))
    check_array("slice_columns", "out", out, device, shape=(x.shape[0], None), dtype=x.dtype)
    if not isinstance(start, (int, np.integer)) or not 0 <= start <= x.shape[1] - out.shape[1]:
        raise ShapeError(f"slice_columns: columns {start}:{start}+{out.shape[1]} do not fit x of shape {x.shape}")
    return device, x, int(start), out


@generic(inplace=("rng", "x"))
def add_clipped_noise(device, rng, x, std, noise_clip, low, high):
    """``x = clip(x + clip(std·ε, ±noise_clip), low, high)`` with ε ~ N(0, 1) from ``rng``
    (TD3 exploration noise, ``noise_clip=None`` for none, and target policy smoothing)."""
    fn = "add_clipped_noise"
    check_device(fn, device)
    check_array(fn, "rng", rng, device, shape=(2,), dtype=np.uint64)
    check_array(fn, "x", x, device)
    noise_clip = np.inf if noise_clip is None else check_number(fn, "noise_clip", noise_clip, 0)
    low = check_number(fn, "low", low)
    return device, rng, x, check_number(fn, "std", std, 0), noise_clip, low, check_number(fn, "high", high, low)


@generic(outputs=("target",))
def td_target(device, reward, terminated, q1, q2, gamma, target):
    """``target = reward + γ (1 - terminated) min(q1, q2)`` (clipped double-Q, TD3)."""
    fn = "td_target"
    check_device(fn, device)
    check_array(fn, "reward", reward, device, shape=(None,))
    n = reward.shape[0]
    check_array(fn, "terminated", terminated, device, shape=(n,), dtype=np.bool_)
    for name, arr in (("q1", q1), ("q2", q2), ("target", target)):
        check_array(fn, name, arr, device, shape=(n, 1), dtype=reward.dtype)
    return device, reward, terminated, q1, q2, check_number(fn, "gamma", gamma, 0, 1), target


@generic(inplace=("log",))
def track_episodes(device, log, reward, terminated, truncated, step):
    """Accumulate per-environment returns and lengths; when an episode ends, write its return,
    length and the global ``step`` into the log's ring at ``count % capacity``, count it and
    restart the running sums (the reader takes the new episodes before the ring wraps)."""
    fn = "track_episodes"
    check_device(fn, device)
    check_array(fn, "reward", reward, device, shape=(None,))
    n = reward.shape[0]
    check_array(fn, "terminated", terminated, device, shape=(n,), dtype=np.bool_)
    check_array(fn, "truncated", truncated, device, shape=(n,), dtype=np.bool_)
    check_array(fn, "step", step, device, shape=(1,), dtype=np.int64)
    check_array(fn, "log.running_return", log.running_return, device, shape=(n,), dtype=np.float64)
    check_array(fn, "log.running_length", log.running_length, device, shape=(n,), dtype=np.int64)
    check_array(fn, "log.returns", log.returns, device, shape=(None,), dtype=np.float64)
    capacity = log.returns.shape[0]
    check_array(fn, "log.lengths", log.lengths, device, shape=(capacity,), dtype=np.int64)
    check_array(fn, "log.end_steps", log.end_steps, device, shape=(capacity,), dtype=np.int64)
    check_array(fn, "log.count", log.count, device, shape=(1,), dtype=np.int64)
    return device, log, reward, terminated, truncated, step


def _check_gaussian(fn, device, actor_out, action):
    check_array(fn, "actor_out", actor_out, device, shape=(None, None))
    batch, width = actor_out.shape
    if width % 2:
        raise ShapeError(f"{fn}: argument 'actor_out' needs 2·action_dim columns (mean, log_std), got {width}")
    check_array(fn, "action", action, device, shape=(batch, width // 2), dtype=actor_out.dtype)
    return batch


@generic(inplace=("rng",), outputs=("noise", "action", "log_prob"))
def gaussian_tanh_sample(device, rng, actor_out, noise, action, log_prob):
    """SAC's squashed Gaussian: ``actor_out = [mean, log_std]`` (log_std clamped to
    [LOG_STD_MIN, LOG_STD_MAX]), ``noise`` ← ε ~ N(0, 1), ``action = tanh(mean + exp(log_std) ε)``
    and ``log_prob`` its log-density including the tanh correction."""
    fn = "gaussian_tanh_sample"
    check_device(fn, device)
    check_array(fn, "rng", rng, device, shape=(2,), dtype=np.uint64)
    batch = _check_gaussian(fn, device, actor_out, action)
    check_array(fn, "noise", noise, device, shape=action.shape, dtype=action.dtype)
    check_array(fn, "log_prob", log_prob, device, shape=(batch, 1), dtype=action.dtype)
    return device, rng, actor_out, noise, action, log_prob


@generic(outputs=("d_actor_out",))
def gaussian_tanh_backward(device, actor_out, noise, action, d_action, log_alpha, d_actor_out):
    """Gradient of ``mean_b(α log_prob - Q)`` w.r.t. ``actor_out = [mean, log_std]`` by
    reparameterisation, given ``d_action`` = ∂(-mean_b Q)/∂action from the critic."""
    fn = "gaussian_tanh_backward"
    check_device(fn, device)
    _check_gaussian(fn, device, actor_out, action)
    for name, arr in (("noise", noise), ("d_action", d_action)):
        check_array(fn, name, arr, device, shape=action.shape, dtype=action.dtype)
    check_array(fn, "log_alpha", log_alpha, device, shape=(1,), dtype=action.dtype)
    check_array(fn, "d_actor_out", d_actor_out, device, shape=actor_out.shape, dtype=action.dtype)
    return device, actor_out, noise, action, d_action, log_alpha, d_actor_out


@generic(outputs=("target",))
def soft_td_target(device, reward, terminated, q1, q2, log_prob, log_alpha, gamma, target):
    """``target = reward + γ (1 - terminated) (min(q1, q2) - α log_prob)`` (SAC)."""
    fn = "soft_td_target"
    check_device(fn, device)
    check_array(fn, "reward", reward, device, shape=(None,))
    n = reward.shape[0]
    check_array(fn, "terminated", terminated, device, shape=(n,), dtype=np.bool_)
    for name, arr in (("q1", q1), ("q2", q2), ("log_prob", log_prob), ("target", target)):
        check_array(fn, name, arr, device, shape=(n, 1), dtype=reward.dtype)
    check_array(fn, "log_alpha", log_alpha, device, shape=(1,), dtype=reward.dtype)
    return device, reward, terminated, q1, q2, log_prob, log_alpha, check_number(fn, "gamma", gamma, 0, 1), target


@generic(outputs=("grad",))
def entropy_temperature_gradient(device, log_prob, target_entropy, grad):
    """Gradient of SAC's temperature loss ``-mean(log_α (log_prob + target_entropy))`` w.r.t. log_α."""
    fn = "entropy_temperature_gradient"
    check_device(fn, device)
    check_array(fn, "log_prob", log_prob, device, shape=(None, 1))
    check_array(fn, "grad", grad, device, shape=(1,), dtype=log_prob.dtype)
    return device, log_prob, check_number(fn, "target_entropy", target_entropy), grad


@generic(outputs=("out",))
def select_min_rows(device, a, b, x, y, out):
    """Row i of ``out`` is row i of ``x`` where ``a[i, 0] <= b[i, 0]``, else row i of ``y``:
    the gradient of ``min(a, b)`` routed to the smaller critic (SAC's clipped double-Q)."""
    fn = "select_min_rows"
    check_device(fn, device)
    check_array(fn, "a", a, device, shape=(None, 1))
    check_array(fn, "b", b, device, shape=a.shape, dtype=a.dtype)
    check_array(fn, "x", x, device, shape=(a.shape[0], None), dtype=a.dtype)
    check_array(fn, "y", y, device, shape=x.shape, dtype=a.dtype)
    check_array(fn, "out", out, device, shape=x.shape, dtype=a.dtype)
    return device, a, b, x, y, out


# ---------------------------------------------------------------- learner statistics (logging)
# Running float64 sums the fused step adds to and never resets (a count first), so logging
# reads means over any span of steps from two copies and leaves every training number alone.


def _check_stats(fn, device, stats, size):
    check_array(fn, "stats", stats, device, shape=(size,), dtype=np.float64)


@generic(inplace=("stats",))
def accumulate_critic_stats(device, q1, q2, target, stats):
    """``stats += [1, mean((q1 - target)²) + mean((q2 - target)²), mean((q1 + q2) / 2)]``: the
    twin critics' summed MSE loss and their mean Q on the batch, in float64."""
    fn = "accumulate_critic_stats"
    check_device(fn, device)
    check_array(fn, "q1", q1, device, shape=(None, 1))
    for name, arr in (("q2", q2), ("target", target)):
        check_array(fn, name, arr, device, shape=q1.shape, dtype=q1.dtype)
    _check_stats(fn, device, stats, 3)
    return device, q1, q2, target, stats


@generic(inplace=("stats",))
def accumulate_actor_stats(device, q, stats):
    """``stats += [1, -mean(q)]``: a deterministic actor's loss (TD3: ``q`` = Q1(s, π(s)))."""
    fn = "accumulate_actor_stats"
    check_device(fn, device)
    check_array(fn, "q", q, device, shape=(None, 1))
    _check_stats(fn, device, stats, 2)
    return device, q, stats


@generic(inplace=("stats",))
def accumulate_sac_actor_stats(device, q1, q2, log_prob, log_alpha, stats):
    """``stats += [1, mean(α log_prob - min(q1, q2)), -mean(log_prob)]``: SAC's actor loss and
    the policy's entropy estimate on the batch, in float64."""
    fn = "accumulate_sac_actor_stats"
    check_device(fn, device)
    check_array(fn, "q1", q1, device, shape=(None, 1))
    for name, arr in (("q2", q2), ("log_prob", log_prob)):
        check_array(fn, name, arr, device, shape=q1.shape, dtype=q1.dtype)
    check_array(fn, "log_alpha", log_alpha, device, shape=(1,), dtype=q1.dtype)
    _check_stats(fn, device, stats, 3)
    return device, q1, q2, log_prob, log_alpha, stats


# ---------------------------------------------------------------- DQN (discrete actions)
# A discrete action is held as its index in a float column (N, 1), as the replay ring stores
# every action, and Q networks output one column per action.


@generic(inplace=("rng",), outputs=("action",))
def epsilon_greedy(device, rng, q, step, initial_eps, final_eps, decay_steps, action):
    """Per row of ``q`` (N, K): ε = ``initial_eps + (final_eps - initial_eps) · min(1, step[0] /
    decay_steps)``; with probability ε a uniform index in [0, K), else the row's argmax (the first
    maximum on ties), written as a float into ``action`` (N, 1). Row i draws stream positions
    2i (explore?) and 2i + 1 (which index); the stream advances by 2N whatever is chosen."""
    fn = "epsilon_greedy"
    check_device(fn, device)
    check_array(fn, "rng", rng, device, shape=(2,), dtype=np.uint64)
    check_array(fn, "q", q, device, shape=(None, None))
    check_array(fn, "step", step, device, shape=(1,), dtype=np.int64, dtypes=None)
    check_array(fn, "action", action, device, shape=(q.shape[0], 1), dtype=q.dtype)
    return (
        device,
        rng,
        q,
        step,
        check_number(fn, "initial_eps", initial_eps, 0, 1),
        check_number(fn, "final_eps", final_eps, 0, 1),
        check_number(fn, "decay_steps", decay_steps, 0, low_open=True),
        action,
    )


def _check_discrete_batch(fn, device, q, action, target):
    check_array(fn, "q", q, device, shape=(None, None))
    check_array(fn, "action", action, device, shape=(q.shape[0], 1), dtype=q.dtype)
    check_array(fn, "target", target, device, shape=(q.shape[0], 1), dtype=q.dtype)


@generic(outputs=("target",))
def dqn_targets(device, q_next_online, q_next_target, reward, terminated, gamma, target, double=True):
    """``target = reward + γ (1 - terminated) q_next_target[a*]`` per row, with a* the argmax of
    ``q_next_online``'s row (Double DQN, first maximum on ties), or (``double=False``) the max of
    ``q_next_target``'s row (DQN). Truncated rows bootstrap, as td_target's."""
    fn = "dqn_targets"
    check_device(fn, device)
    check_array(fn, "q_next_target", q_next_target, device, shape=(None, None))
    rows = q_next_target.shape[0]
    dtype = q_next_target.dtype
    check_array(fn, "q_next_online", q_next_online, device, shape=q_next_target.shape, dtype=dtype)
    check_array(fn, "reward", reward, device, shape=(rows,), dtype=dtype)
    check_array(fn, "terminated", terminated, device, shape=(rows,), dtype=np.bool_)
    check_array(fn, "target", target, device, shape=(rows, 1), dtype=dtype)
    if not isinstance(double, (bool, np.bool_)):
        raise ConfigError(f"{fn}: argument 'double' must be True or False, got {double!r}")
    gamma = check_number(fn, "gamma", gamma, 0, 1)
    return device, q_next_online, q_next_target, reward, terminated, gamma, target, bool(double)


@generic(outputs=("d_q",))
def q_huber_gradient(device, q, action, target, d_q):
    """Gradient of ``mean_i huber(q[i, a_i] - target[i])`` (δ = 1, smooth L1) w.r.t. ``q`` (B, K):
    ``clip(q[i, a_i] - target[i], -1, 1) / B`` in the taken action's column ``a_i = action[i, 0]``,
    0 in the others."""
    fn = "q_huber_gradient"
    check_device(fn, device)
    _check_discrete_batch(fn, device, q, action, target)
    check_array(fn, "d_q", d_q, device, shape=q.shape, dtype=q.dtype)
    return device, q, action, target, d_q


@generic(inplace=("stats",))
def accumulate_q_stats(device, q, action, target, stats):
    """``stats += [1, mean huber(q[i, a_i] - target[i]), mean q[i, a_i]]``: a Q network's loss
    (δ = 1) and its mean Q of the taken actions on the batch, in float64."""
    fn = "accumulate_q_stats"
    check_device(fn, device)
    _check_discrete_batch(fn, device, q, action, target)
    _check_stats(fn, device, stats, 3)
    return device, q, action, target, stats


@generic(outputs=("out",))
def taken_q(device, q, action, out) -> tuple:
    """``out[i, 0] = q[i, a_i]`` with ``a_i = action[i, 0]``: each row's Q of its taken action
    (B, 1), as the TD-error priorities of prioritized replay read it."""
    fn = "taken_q"
    check_device(fn, device)
    check_array(fn, "q", q, device, shape=(None, None))
    check_array(fn, "action", action, device, shape=(q.shape[0], 1), dtype=q.dtype)
    check_array(fn, "out", out, device, shape=(q.shape[0], 1), dtype=q.dtype)
    return device, q, action, out


def _check_dueling(fn, device, raw_name, raw, q_name, q) -> None:
    """``raw`` (R, n + 1) holds [V, A_1..A_n] per row, ``q`` (R, n) the Q-values: n >= 1."""
    check_array(fn, raw_name, raw, device, shape=(None, None))
    if raw.shape[1] < 2:
        raise ShapeError(
            f"{fn}: argument {raw_name!r} needs n + 1 >= 2 columns (V, then one advantage per action), "
            f"got shape {raw.shape}"
        )
    check_array(fn, q_name, q, device, shape=(raw.shape[0], raw.shape[1] - 1), dtype=raw.dtype)


@generic(outputs=("q",))
def dueling_q(device, raw, q) -> tuple:
    """The dueling head (Wang et al. 2016): ``q[i, j] = raw[i, 0] + raw[i, 1 + j] - mean_k raw[i, 1 + k]``
    for a network's output ``raw`` (R, n + 1) = [V, A_1..A_n], in float64 (the advantages summed
    in column order)."""
    fn = "dueling_q"
    check_device(fn, device)
    _check_dueling(fn, device, "raw", raw, "q", q)
    return device, raw, q


@generic(outputs=("d_raw",))
def dueling_q_backward(device, d_q, d_raw) -> tuple:
    """The gradient through :func:`dueling_q`: ``d_raw[i, 0] = Σ_j d_q[i, j]`` (V's) and
    ``d_raw[i, 1 + j] = d_q[i, j] - mean_k d_q[i, k]`` (the advantages'), in float64."""
    fn = "dueling_q_backward"
    check_device(fn, device)
    _check_dueling(fn, device, "d_raw", d_raw, "d_q", d_q)
    return device, d_q, d_raw
