// The types shared by rltools_td3_pendulum.cpp and rltools_sac_pendulum.cpp, included after each
// has included RLtools' operations in their order (the algorithm's sampling layer and loop core
// among them): the evaluation operations, the device, float32, the Pendulum-v1 environment.

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
