// The types shared by rltools_td3_pendulum.cpp and rltools_sac_pendulum.cpp, included after each
// has included RLtools' operations in their order (the algorithm's sampling layer and loop core
// among them): the evaluation operations, the device, float32, the Pendulum-v1 environment, and
// the loop-core parameters both anchors set alike.

#include <rl_tools/rl/utils/evaluation/operations_generic.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#ifndef DRL_STEPS
#define DRL_STEPS 10000
#endif

namespace rlt = rl_tools;

using DEVICE = rlt::devices::DEVICE_FACTORY<>;
using RNG = DEVICE::SPEC::RANDOM::ENGINE<>;
using T = float;
using TI = typename DEVICE::index_t;
using TYPE_POLICY = rlt::numeric_types::Policy<T>;

using PENDULUM_SPEC = rlt::rl::environments::pendulum::Specification<T, TI, rlt::rl::environments::pendulum::DefaultParameters<T>>;
using ENVIRONMENT = rlt::rl::environments::Pendulum<PENDULUM_SPEC>;

// The loop-core parameters TD3 and SAC share (dispatchrl's defaults, spelled out), on top of the
// algorithm's own loop-core defaults LOOP_CORE_DEFAULTS: one environment, 100 random warm-up
// steps, replay capacity = total steps, actor and critic MLPs with 2 hidden layers of 64 ReLU
// units, Adam lr 1e-3. Each anchor derives its LOOP_CORE_PARAMETERS from it and adds its
// algorithm's parameters.
template <typename LOOP_CORE_DEFAULTS>
struct PENDULUM_LOOP_CORE_PARAMETERS: LOOP_CORE_DEFAULTS{
    static constexpr TI N_ENVIRONMENTS = 1;
    static constexpr TI N_WARMUP_STEPS = 100;
    static constexpr TI N_WARMUP_STEPS_CRITIC = 100;
    static constexpr TI N_WARMUP_STEPS_ACTOR = 100;
    static constexpr TI STEP_LIMIT = DRL_STEPS;
    static constexpr TI REPLAY_BUFFER_CAP = STEP_LIMIT;
    static constexpr TI ACTOR_NUM_LAYERS = 3;   // 3 dense layers = 2 hidden layers
    static constexpr TI ACTOR_HIDDEN_DIM = 64;
    static constexpr TI CRITIC_NUM_LAYERS = 3;
    static constexpr TI CRITIC_HIDDEN_DIM = 64;
    static constexpr auto ACTOR_ACTIVATION_FUNCTION = rlt::nn::activation_functions::ActivationFunction::RELU;
    static constexpr auto CRITIC_ACTIVATION_FUNCTION = rlt::nn::activation_functions::ActivationFunction::RELU;
    struct OPTIMIZER_PARAMETERS: rlt::nn::optimizers::adam::DEFAULT_PARAMETERS_TENSORFLOW<TYPE_POLICY>{
        static constexpr T ALPHA = 1e-3;
    };
};
