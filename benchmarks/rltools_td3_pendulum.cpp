// RLtools TD3 / Pendulum-v1 native anchor for benchmarks/td3_vs_rltools.py.
//
// Our own small main, written against the headers shipped in the `rltools` PyPI package
// (rltools/external/rl_tools/include). It follows the canonical RLtools TD3 Pendulum training
// loop that the RLtools paper benchmarks (rl-tools/rl-tools
// src/rl/environments/pendulum/td3/cpu/benchmark.cpp: loop-core config + `while(!step(...))`),
// adapted to the rltools 2.x API (numeric_types::Policy). No RLtools source is copied here.
//
// Hyperparameters (TD3 paper / RLtools paper, all spelled out even where they equal the RLtools
// defaults: below, and those SAC shares in rltools_pendulum_types.h): actor and critic MLPs with
// 2 hidden layers of 64 ReLU units, batch 100, gamma 0.99, critic trained every step, actor and
// target networks updated every 2nd step, Polyak 0.995, target policy noise 0.2 clipped at 0.5,
// exploration noise 0.1, Adam lr 1e-3, 100 random warm-up steps, replay capacity = total steps,
// one Pendulum-v1 environment, normalized actions in [-1, 1] (torque = 2 * action).
//
// Build (what the harness does):
//   g++ -O3 -march=native -ffast-math -std=c++17 -DRL_TOOLS_BACKEND_ENABLE_OPENBLAS \
//       -DDRL_STEPS=10000 -I <rltools>/external/rl_tools/include rltools_td3_pendulum.cpp \
//       -o rltools_td3_pendulum -lopenblas
// Run:  OPENBLAS_NUM_THREADS=1 ./rltools_td3_pendulum [seed]
// Prints one JSON line: training-loop seconds (std::chrono around the loop only) and the
// mean return of a deterministic evaluation (10 episodes of 200 steps) after training.

#include <rl_tools/operations/cpu_mux.h>
#include <rl_tools/nn/optimizers/adam/instance/operations_generic.h>
#include <rl_tools/nn/operations_cpu_mux.h>

#include <rl_tools/rl/environments/pendulum/operations_cpu.h>
#include <rl_tools/nn/layers/td3_sampling/operations_generic.h>
#include <rl_tools/nn_models/mlp/operations_generic.h>
#include <rl_tools/nn_models/sequential/operations_generic.h>
#include <rl_tools/nn/optimizers/adam/operations_generic.h>

#include <rl_tools/rl/algorithms/td3/loop/core/config.h>
#include <rl_tools/rl/algorithms/td3/loop/core/operations_generic.h>

#include "rltools_pendulum_types.h"

struct LOOP_CORE_PARAMETERS: PENDULUM_LOOP_CORE_PARAMETERS<rlt::rl::algorithms::td3::loop::core::DefaultParameters<TYPE_POLICY, TI, ENVIRONMENT>>{
    struct TD3_PARAMETERS: rlt::rl::algorithms::td3::DefaultParameters<TYPE_POLICY, TI>{
        static constexpr T GAMMA = 0.99;
        static constexpr TI ACTOR_BATCH_SIZE = 100;
        static constexpr TI CRITIC_BATCH_SIZE = 100;
        static constexpr TI CRITIC_TRAINING_INTERVAL = 1;
        static constexpr TI ACTOR_TRAINING_INTERVAL = 2;
        static constexpr TI CRITIC_TARGET_UPDATE_INTERVAL = 2;
        static constexpr TI ACTOR_TARGET_UPDATE_INTERVAL = 2;
        static constexpr T ACTOR_POLYAK = 1.0 - 0.005;
        static constexpr T CRITIC_POLYAK = 1.0 - 0.005;
        static constexpr T TARGET_NEXT_ACTION_NOISE_STD = 0.2;
        static constexpr T TARGET_NEXT_ACTION_NOISE_CLIP = 0.5;
    };
    static constexpr T EXPLORATION_NOISE = 0.1;
};
using LOOP_CONFIG = rlt::rl::algorithms::td3::loop::core::Config<TYPE_POLICY, TI, RNG, ENVIRONMENT, LOOP_CORE_PARAMETERS>;
#define DRL_ALGO "td3"
#include "rltools_pendulum_main.h"
