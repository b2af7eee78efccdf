"""CUDA methods of the multirotor: one thread per env.

The kernels are generated (:func:`per_index`) from the CPU backend's per-env bodies, their
helpers compiled as device functions from the same Python source (:func:`device_twin`), so CPU
and CUDA evaluate identical expressions. Imported when a CUDA device is first created (see
:func:`dispatchrl.envs.registry.register_cuda_methods`)."""

from ...backends.cuda import device_twin, per_index
from ...devices import CUDA
from ...kernels.random.cuda import standard_normal, standard_normal_icdf, uniform01
from .. import api
from ..shared.cuda import kernel_methods, launch_per_env
from . import cpu
from .env import Multirotor, parameter_array
from .layout import RESET_DRAWS

__all__: list[str] = []  # methods only: importing the module registers them

rotation_matrix = device_twin(cpu.rotation_matrix)
multirotor_observe_at = device_twin(
    cpu.multirotor_observe_at, standard_normal_icdf=standard_normal_icdf, rotation_matrix=rotation_matrix
)
multirotor_reset_at = device_twin(
    cpu.multirotor_reset_at,
    reset_draw=device_twin(cpu.reset_draw, uniform01=uniform01),
    standard_normal=standard_normal,
    multirotor_observe_at=multirotor_observe_at,
)

multirotor_step_kernel = per_index(
    cpu.multirotor_step_at,
    "physics.shape[0]",
    curriculum_weight=device_twin(cpu.curriculum_weight),
    multirotor_derivative=device_twin(cpu.multirotor_derivative),
    state_plus=device_twin(cpu.state_plus),
    multirotor_observe_at=multirotor_observe_at,
)


multirotor_critic_observation_kernel = per_index(
    cpu.multirotor_critic_observe_at, "physics.shape[0]", rotation_matrix=rotation_matrix
)


def _reset_from_stream_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done, p) -> None:
    # the CPU kernel reads the stream's key and position once, before its loop over the envs; here
    # each thread reads them (launch_reset advances rng[1] in a launch of its own, after all read)
    multirotor_reset_at(i, rng[0], rng[1], physics, steps, obs, reward, terminated, truncated, p, only_done)


multirotor_reset_kernel = per_index(_reset_from_stream_at, "physics.shape[0]", name="multirotor_reset")


kernel_methods(Multirotor, multirotor_step_kernel, multirotor_reset_kernel, RESET_DRAWS, parameters=parameter_array)


@api.env_critic_observation.dispatch
def env_critic_observation(device: CUDA, env: Multirotor, state, out) -> None:
    launch_per_env(
        device, multirotor_critic_observation_kernel, env.num_envs, state.physics, out, parameter_array(device, env)
    )
