// RLtools SAC / Pendulum-v1 native anchor for benchmarks/td3_vs_rltools.py (--algos sac).
//
// The SAC twin of rltools_td3_pendulum.cpp: our own small main against the headers shipped in the
// `rltools` PyPI package, using RLtools' SAC loop core (rl/algorithms/sac/loop/core) with its
// `while(!step(...))` loop. No RLtools source is copied here.
//
// Hyperparameters: those of dispatchrl's sac.Config defaults, spelled out below and, those TD3
// shares, in rltools_pendulum_types.h (several differ from RLtools' own SAC defaults: batch
// 32 -> 100, initial temperature 0.5 -> 0.2): actor and critic MLPs with 2 hidden layers of 64
// ReLU units, batch 100, gamma 0.99, every update every step, Polyak 0.995, automatic temperature
// from 0.2 towards target entropy -action_dim, Adam lr 1e-3 (actor, critics, temperature), 100
// random warm-up steps, replay capacity = total steps, one Pendulum-v1 environment, normalized
// actions in [-1, 1].
//
// Build and run as the TD3 anchor (the harness does it), prints the same JSON line.

#include <rl_tools/operations/cpu_mux.h>
#include <rl_tools/nn/optimizers/adam/instance/operations_generic.h>
#include <rl_tools/nn/operations_cpu_mux.h>

#include <rl_tools/rl/environments/pendulum/operations_cpu.h>
#include <rl_tools/nn/layers/sample_and_squash/operations_generic.h>
#include <rl_tools/nn_models/mlp/operations_generic.h>
#include <rl_tools/nn_models/sequential/operations_generic.h>
#include <rl_tools/nn/optimizers/adam/operations_generic.h>

#include <rl_tools/rl/algorithms/sac/loop/core/config.h>
#include <rl_tools/rl/algorithms/sac/loop/core/operations_generic.h>

#include "rltools_pendulum_types.h"

struct LOOP_CORE_PARAMETERS: PENDULUM_LOOP_CORE_PARAMETERS<rlt::rl::algorithms::sac::loop::core::DefaultParameters<TYPE_POLICY, TI, ENVIRONMENT>>{
    struct SAC_PARAMETERS: rlt::rl::algorithms::sac::DefaultParameters<TYPE_POLICY, TI, ENVIRONMENT::ACTION_DIM>{
        static constexpr T GAMMA = 0.99;
        static constexpr TI ACTOR_BATCH_SIZE = 100;
        static constexpr TI CRITIC_BATCH_SIZE = 100;
        static constexpr TI CRITIC_TRAINING_INTERVAL = 1;
        static constexpr TI ACTOR_TRAINING_INTERVAL = 1;
        static constexpr TI CRITIC_TARGET_UPDATE_INTERVAL = 1;
        static constexpr T ACTOR_POLYAK = 1.0 - 0.005;
        static constexpr T CRITIC_POLYAK = 1.0 - 0.005;
        static constexpr T TARGET_ENTROPY = -(T)ENVIRONMENT::ACTION_DIM;
        static constexpr T ALPHA = 0.2;
        static constexpr bool ADAPTIVE_ALPHA = true;
    };
    using ACTOR_OPTIMIZER_PARAMETERS = OPTIMIZER_PARAMETERS;
    using CRITIC_OPTIMIZER_PARAMETERS = OPTIMIZER_PARAMETERS;
    using ALPHA_OPTIMIZER_PARAMETERS = OPTIMIZER_PARAMETERS;
};
using LOOP_CONFIG = rlt::rl::algorithms::sac::loop::core::Config<TYPE_POLICY, TI, RNG, ENVIRONMENT, LOOP_CORE_PARAMETERS>;
#define DRL_ALGO "sac"
#include "rltools_pendulum_main.h"
